"""`ReadAhead`: a remote stream read front to back with its next chunk fetched in the background, so that a reader
decoding records does not wait out each request's latency. Memory: at most two chunks a stream; threads: at most
READ_AHEAD_THREADS fetches in flight in a process."""

from __future__ import annotations

import contextlib
import io
import os

READ_AHEAD_THREADS = 4  # chunk fetches in flight at once in a process, over all its read-ahead streams
_fetchers: tuple[int, object] | None = None  # (pid, ThreadPoolExecutor): a forked child makes its own


def _fetcher():
    global _fetchers
    if _fetchers is None or _fetchers[0] != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        _fetchers = (os.getpid(), ThreadPoolExecutor(READ_AHEAD_THREADS, thread_name_prefix="shardsmith-read-ahead"))
    return _fetchers[1]


class ReadAhead(io.RawIOBase):
    """A remote file's stream that, read front to back, has its next chunk (`chunk` bytes, one request) fetched
    by a background thread while the caller works through the current one, so that a reader decoding records
    does not wait for each request's latency. The bytes, `seek`, `tell` and end of file are the wrapped stream's.

    It reads ahead only once a chunk has been read through to its end without a seek: a first chunk, and reads
    at scattered offsets (a record at a time through an index), fetch what the wrapped stream fetches and nothing
    more. At most one fetch is in flight per stream (the wrapped stream is never used by two threads at once), so
    it holds at most two chunks; a fetch's error is raised to the caller when it reaches those bytes. Not for use
    by several threads at once (like the wrapped stream)."""

    def __init__(self, raw, chunk: int):
        super().__init__()
        self._raw, self._chunk = raw, chunk
        self._buffer = b""
        self._at = 0  # next byte of _buffer to hand out
        self._start = raw.tell()  # file offset of _buffer[0]
        self._pending = None  # Future of the chunk that follows _buffer, or None
        self._through = False  # the last chunk was read to its end without a seek: the next ones are wanted too
        self._at_end = False  # _buffer holds the file's last bytes: a chunk came back short

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._start + self._at

    def _settle(self):
        """The pending fetch's bytes (None without one), its error raised; the wrapped stream is free after it."""
        pending, self._pending = self._pending, None
        return pending.result() if pending is not None else None

    def _next_chunk(self) -> None:
        """Moves on to the chunk after _buffer: the one fetched ahead, or one fetched now; starts the next fetch
        when reading has gone through whole chunks."""
        end = self._start + len(self._buffer)
        if self._at_end:
            self._buffer, self._start, self._at = b"", end, 0
            return
        ahead = self._settle()
        self._through = self._through or (bool(self._buffer) and self._at == len(self._buffer))
        self._buffer = ahead if ahead is not None else self._raw.read(self._chunk)
        self._start, self._at = end, 0
        self._at_end = len(self._buffer) < self._chunk
        if self._through and not self._at_end:
            self._pending = _fetcher().submit(self._raw.read, self._chunk)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:  # the rest of the file
            position, parts = self.tell(), [self._buffer[self._at:]]
            ahead = self._settle()
            parts += [ahead, self._raw.read()] if ahead is not None else [self._raw.read()]
            data = b"".join(parts)
            self._start, self._buffer, self._at, self._at_end = position + len(data), b"", 0, True
            return data
        parts = []
        while size > 0:
            if self._at == len(self._buffer):
                self._next_chunk()
                if not self._buffer:
                    break
            piece = self._buffer[self._at:self._at + size]
            self._at += len(piece)
            size -= len(piece)
            parts.append(piece)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readinto(self, buffer) -> int:
        data = self.read(len(buffer))
        buffer[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset, whence = self.tell() + offset, io.SEEK_SET
        if whence == io.SEEK_SET and self._start <= offset <= self._start + len(self._buffer) and self._buffer:
            self._at = offset - self._start  # inside the chunk held: no request
            return offset
        with contextlib.suppress(Exception):  # bytes fetched ahead and not wanted: their error is not the caller's
            self._settle()
        position = self._raw.seek(offset, whence)
        self._start = self._raw.tell() if position is None else position
        self._buffer, self._at, self._through, self._at_end = b"", 0, False, False
        return self._start

    def close(self) -> None:
        """Closes the stream without waiting for a fetch under way (a reader that stops before the end, as a
        DataLoader worker at the end of its part of a shard does, would wait out its latency): the wrapped stream
        is closed when that fetch ends, and its bytes are dropped."""
        if not self.closed:
            pending, self._pending, raw = self._pending, None, self._raw
            if pending is not None and not pending.cancel():
                pending.add_done_callback(lambda _: raw.close())
            else:
                raw.close()
            self._buffer = b""
        super().close()
