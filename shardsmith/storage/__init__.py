"""Where files live: the one module that reads, writes, lists and deletes files, on a local disk or on an object
store (gs://, s3://). Every other module asks here and never tells them apart itself.

Local paths use the operating system directly; s3:// goes through boto3 (`s3_objects`, configured the standard AWS
way); other URIs go through Beam's FileSystems, imported inside the function that needs it, so a shard writer
process (which imports this) never loads Beam for a local build.
Input files (images, masks) are opened through `local_files.open_regular_file`: judged as opened, never waited
on when they are named pipes, and confined to --allowed_prefixes by their real path.

Guarantees:
- `write_atomically` leaves `path` holding its old content or all of the new, never a part: locally through a
  temporary name beside it (TEMP_PREFIX, removed again if the write fails) and a rename; on an object store as
  one upload, which creates the object only when it completes (a failed upload is cancelled; on s3:// a write
  whose chunks raise creates nothing).
- Nothing here creates a missing parent folder unless asked to (`make_folders`): a writer whose folder was
  removed fails instead of making it again.
- Remote reads never decompress: a `.gz` file reads as the bytes stored.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable
from typing import BinaryIO, NamedTuple

from shardsmith.storage import s3_objects
from shardsmith.storage.local_files import NotARegularFile, kind_of, open_regular_file
from shardsmith.storage.s3_objects import is_s3

# Every file is written under this prefix and renamed into place; such files are never part of a dataset.
TEMP_PREFIX = ".shardsmith-tmp-"
_CLOUD_STORAGE = "gs://"


def is_remote(uri: str) -> bool:
    """Whether a URI names an object store (gs://..., s3://...); else a local path."""
    return "://" in uri


def is_cloud_storage(uri: str) -> bool:
    """Whether a URI names a Cloud Storage object or folder (gs://...)."""
    return uri.startswith(_CLOUD_STORAGE)


def join(folder: str, *names: str) -> str:
    """`folder/name/...` with one slash between parts, for local paths and URIs alike."""
    return "/".join([folder.rstrip("/"), *names])


def parent(path: str) -> str:
    """The folder holding `path` (for local paths and URIs alike)."""
    return path.rstrip("/").rsplit("/", 1)[0]


# Reading ------------------------------------------------------------------------------------------------------

def open_read(path: str, allowed_prefixes: tuple[str, ...] = (), *, buffered: bool = False,
              read_ahead: bool = False) -> BinaryIO:
    """`path` opened for binary reading, its bytes as stored. A local file must be a regular file when opened
    and, with `allowed_prefixes`, lie under one of them by its real path (NotARegularFile,
    OutsideAllowedPrefixes); it is unbuffered unless `buffered` (for many small reads). A remote file with
    `read_ahead` fetches its next READ_AHEAD_BYTES in the background while its reader works through the current
    ones, once it is read front to back (`ReadAhead`; for whole-shard streams)."""
    if not is_remote(path):
        opened = open_regular_file(path, allowed_prefixes)
        return io.BufferedReader(opened) if buffered else opened  # type: ignore[arg-type]
    if is_s3(path):
        raw = s3_objects.ObjectReader(path)
        return ReadAhead(raw) if read_ahead else io.BufferedReader(raw, READ_AHEAD_BYTES)  # type: ignore[return-value]
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    opened = FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    return ReadAhead(opened) if read_ahead else opened  # type: ignore[return-value]


def read_range(path: str, offset: int, length: int) -> bytes:
    """Bytes `offset` to `offset + length` of a file (fewer at its end): locally one `pread`; on gs:// and s3://
    one ranged request for exactly those bytes, where a stream opened to seek and read would fetch READ_AHEAD_BYTES (a
    record read at random through an index would cost 16 MB a record)."""
    if not is_remote(path):
        descriptor = os.open(path, os.O_RDONLY)
        try:
            return os.pread(descriptor, length, offset)
        finally:
            os.close(descriptor)
    if is_s3(path):
        return s3_objects.read_range(path, offset, length)
    if not is_cloud_storage(path) or length <= 0:
        with open_read(path) as stream:
            stream.seek(offset)
            return stream.read(length)
    from apache_beam.io.gcp.gcsio import parse_gcs_path

    bucket, name = parse_gcs_path(path)
    return gcs_client().bucket(bucket).blob(name).download_as_bytes(start=offset, end=offset + length - 1,
                                                                     checksum=None)


# ((pid, STORAGE_EMULATOR_HOST), google.cloud.storage.Client): a forked child makes its own, and so does a change
# of endpoint (each test module's emulator has its own port).
_gcs_clients: tuple[tuple[int, str | None], object] | None = None


def gcs_client():
    """A google.cloud.storage client with Beam's credentials and settings, made once per process and endpoint."""
    global _gcs_clients
    key = (os.getpid(), os.environ.get("STORAGE_EMULATOR_HOST"))
    if _gcs_clients is None or _gcs_clients[0] != key:
        from apache_beam.io.gcp.gcsio import GcsIO

        _gcs_clients = (key, GcsIO().client)
    return _gcs_clients[1]


# A remote read fetches this much a request: Beam's GCS reader's own buffer (apache_beam.io.gcp.gcsio
# DEFAULT_READ_BUFFER_SIZE), so that a chunk is one request.
READ_AHEAD_BYTES = 16 << 20
READ_AHEAD_THREADS = 4  # chunk fetches in flight at once in a process, over all its read-ahead streams
_fetchers: tuple[int, object] | None = None  # (pid, ThreadPoolExecutor): a forked child makes its own


def _fetcher():
    global _fetchers
    if _fetchers is None or _fetchers[0] != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        _fetchers = (os.getpid(), ThreadPoolExecutor(READ_AHEAD_THREADS, thread_name_prefix="shardsmith-read-ahead"))
    return _fetchers[1]


class ReadAhead(io.RawIOBase):
    """A remote file's stream that, read front to back, has its next chunk (READ_AHEAD_BYTES, one request) fetched
    by a background thread while the caller works through the current one, so that a reader decoding records
    does not wait for each request's latency. The bytes, `seek`, `tell` and end of file are the wrapped stream's.

    It reads ahead only once a chunk has been read through to its end without a seek: a first chunk, and reads
    at scattered offsets (a record at a time through an index), fetch what the wrapped stream fetches and nothing
    more. At most one fetch is in flight per stream (the wrapped stream is never used by two threads at once), so
    it holds at most two chunks; a fetch's error is raised to the caller when it reaches those bytes. Not for use
    by several threads at once (like the wrapped stream)."""

    def __init__(self, raw, chunk: int | None = None):
        super().__init__()
        self._raw, self._chunk = raw, chunk or READ_AHEAD_BYTES
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


def read_bytes(path: str) -> bytes | None:
    """A whole file, or None if it does not exist."""
    if not is_remote(path):
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
    if is_s3(path):
        return s3_objects.read_bytes(path)
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(path):
        return None
    with open_read(path) as f:
        return f.read()


def read_small_file(path: str, max_bytes: int,
                    read_remote: Callable[[str], bytes | None] | None = None) -> bytes | None:
    """A whole file of at most `max_bytes`, or None if it does not exist: for small files at the output folder's
    top that anyone could have put there. Locally a symbolic link is never followed and only a regular file is
    read (NotARegularFile otherwise); a larger file raises ValueError. `read_remote(path)` reads a remote file
    instead of this module (load()'s TensorFlow reader), its size checked once read."""
    if is_remote(path) and read_remote is not None:
        data = read_remote(path)
    elif not is_remote(path):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotARegularFile(path, "a symbolic link") from None
            raise
        with os.fdopen(fd, "rb") as f:
            found = os.fstat(f.fileno())
            if not stat.S_ISREG(found.st_mode):
                raise NotARegularFile(path, kind_of(found.st_mode))
            data = f.read(max_bytes + 1)
    else:
        if not exists(path):
            return None
        if size(path) > max_bytes:
            raise ValueError(f"{path} holds more than {max_bytes} bytes")
        data = read_bytes(path)
    if data is None:
        return None
    if len(data) > max_bytes:
        raise ValueError(f"{path} holds more than {max_bytes} bytes")
    return data


def read_bytes_with_tensorflow(path: str) -> bytes | None:
    """A whole file read through TensorFlow's file systems (tf.io.gfile: local, gs:// and whatever TensorFlow
    reads), or None if it does not exist: for `load()`, which reads the shards through tf.data and so needs
    nothing else. TensorFlow has no s3:// file system: an s3:// file is read through this module."""
    if is_s3(path):
        return s3_objects.read_bytes(path)
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def exists(path: str) -> bool:
    """Whether a file (or, locally, a folder) is at `path`."""
    if not is_remote(path):
        return os.path.exists(path)
    if is_s3(path):
        return s3_objects.head(path) is not None
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def is_folder(path: str) -> bool:
    """Whether `path` is a folder: locally a directory; on an object store a name ending in "/", or a prefix that holds
    objects while no object has that name."""
    if not is_remote(path):
        return os.path.isdir(path)
    if path.endswith("/"):
        return True
    if is_s3(path):
        return s3_objects.head(path) is None and s3_objects.has_any(path + "/")
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.get_filesystem(path).metadata(path)
        return False
    except Exception:
        return bool(FileSystems.match([path.rstrip("/") + "/**"], limits=[1])[0].metadata_list)


def match(pattern: str) -> list[str]:
    """The paths a glob matches (local or remote, through Beam's FileSystems or, for s3://, its rules); `**` matches
    across folders."""
    if is_s3(pattern):
        return s3_objects.match(pattern)
    from apache_beam.io.filesystems import FileSystems

    return [m.path for m in FileSystems.match([pattern])[0].metadata_list]


def size(path: str) -> int:
    """The file's size in bytes; an OSError (locally) or Beam's error (remote) when there is none."""
    if not is_remote(path):
        return os.path.getsize(path)
    if is_s3(path):
        return s3_objects.size(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.get_filesystem(path).metadata(path).size_in_bytes


class FileLookup(NamedTuple):  # one per row: a frozen dataclass's constructor costs several times as much
    size: int | None  # None: there is no such file
    not_regular: str = ""  # what the path names when it is not a regular file ("a named pipe (FIFO)")


def look_up(path: str) -> FileLookup:
    """The file's size in bytes, or why there is none, never raising. Locally one stat (about 20 times cheaper
    than Beam's FileSystems), which also says when the path names a named pipe, a device or a folder (whoever
    opens it later checks again: the path may change before then)."""
    if not is_remote(path):
        try:
            found = os.stat(path)
        except (OSError, ValueError):  # ValueError: a NUL in the path
            return FileLookup(None)
        if not stat.S_ISREG(found.st_mode):
            return FileLookup(None, kind_of(found.st_mode))
        return FileLookup(found.st_size)
    try:
        return FileLookup(size(path))
    except Exception:  # Beam raises BeamIOError/OSError subclasses that differ by filesystem
        return FileLookup(None)


# Listing ------------------------------------------------------------------------------------------------------

def list_files(folder: str) -> list[str]:
    """Every file under `folder`, at any depth, relative to it, sorted; empty when there is no such folder."""
    if not is_remote(folder):
        found = []
        for dirpath, _, names in os.walk(folder):
            relative = os.path.relpath(dirpath, folder)
            found.extend(name if relative == "." else f"{relative}/{name}" for name in names)
        return sorted(found)
    prefix = folder.rstrip("/") + "/"
    if is_s3(folder):
        return sorted(uri[len(prefix):] for uri in s3_objects.list_keys(prefix) if len(uri) > len(prefix))
    from apache_beam.io.filesystems import FileSystems

    try:
        matched = FileSystems.match([prefix + "**"])[0].metadata_list
    except Exception:
        return []
    return sorted(m.path[len(prefix):] for m in matched if len(m.path) > len(prefix))


def list_entries(folder: str) -> dict[str, bool]:
    """{entry name: is a folder} of one folder's direct entries; empty if it does not exist. On an object store a
    folder is a name prefix, so it is listed only when it holds a file."""
    if is_remote(folder):
        return {f.split("/", 1)[0]: "/" in f for f in list_files(folder)}
    try:
        with os.scandir(folder) as entries:
            return {e.name: e.is_dir(follow_symlinks=False) for e in entries}
    except (FileNotFoundError, NotADirectoryError):
        return {}


# Writing ------------------------------------------------------------------------------------------------------

def temporary_path(path: str) -> str:
    """A fresh temporary name beside `path` (TEMP_PREFIX, the name, a 16-digit hex token)."""
    folder, name = path.rsplit("/", 1)
    return f"{folder}/{TEMP_PREFIX}{name}.{secrets.token_hex(8)}"


def write_atomically(path: str, data: bytes) -> None:
    """Writes `path` so that it holds either its old content or all of `data`, never a part (see the module)."""
    write_atomically_from(path, (data,))


def write_atomically_from(path: str, chunks: Iterable[bytes]) -> None:
    """Writes `path` as the concatenation of `chunks`, consumed one at a time (never all in memory); `path` holds
    either its old content or all of it. Locally a failed write removes its temporary file; on s3:// it uploads
    nothing."""
    if is_remote(path):
        with create(path) as out:
            for chunk in chunks:
                out.write(chunk)
        return
    temp = temporary_path(path)
    try:
        with open(temp, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temp)
        raise


def write_bytes(path: str, data: bytes) -> None:
    """Writes `path` in place (a reader may see it part-written locally; an object store's upload is whole)."""
    with create(path) as out:
        out.write(data)


def create(path: str, *, gzip_compressed: bool = False) -> BinaryIO:
    """`path` opened for binary writing, new or truncated; on an object store the object is created when the
    stream closes, with gzip's MIME type for `gzip_compressed` bytes (compressing is the caller's,
    `gzip_writer`). On s3:// a `with` block that raises creates no object."""
    if not is_remote(path):
        return open(path, "wb")  # noqa: SIM115 (the caller closes it)
    if is_s3(path):
        kind = "application/x-gzip" if gzip_compressed else "application/octet-stream"
        return s3_objects.ObjectWriter(path, kind)  # type: ignore[return-value]
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    kind = CompressionTypes.GZIP if gzip_compressed else CompressionTypes.UNCOMPRESSED
    return FileSystems.create(path, mime_type=CompressionTypes.mime_type(kind),
                              compression_type=CompressionTypes.UNCOMPRESSED)


def gzip_writer(raw: BinaryIO, path: str):
    """A stream that gzip-compresses into `raw` (opened by `create(path)`), with the bytes shardsmith has always
    written there: locally gzip with mtime=0, no file name and zlib's default level 6; on an object store Beam's
    own gzip stream (CompressedFile). Closing it writes the trailer."""
    if not is_remote(path):
        import gzip

        return gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6)
    from apache_beam.io.filesystem import CompressedFile, CompressionTypes

    return CompressedFile(raw, compression_type=CompressionTypes.GZIP)


def touch(path: str) -> None:
    """An empty file at `path`, kept as it is if one is there (locally its folder must exist)."""
    if is_remote(path):
        create(path).close()
        return
    os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def make_folder(path: str, *, exist_ok: bool = False) -> None:
    """Makes one local folder (its parent must exist); nothing on an object store, where folders are prefixes."""
    if is_remote(path):
        return
    try:
        os.mkdir(path)
    except FileExistsError:
        if not exist_ok:
            raise


def make_folders(path: str, *, exist_ok: bool = False) -> None:
    """Makes a local folder and its missing parents; nothing on an object store."""
    if not is_remote(path):
        os.makedirs(path, exist_ok=exist_ok)


def rename(sources: list[str], destinations: list[str]) -> None:
    """Moves each source to its destination, replacing what is there: one atomic rename locally (the parent must
    exist), a copy and a delete on an object store (the copy appears whole)."""
    if not sources:
        return
    if not is_remote(sources[0]):
        for source, destination in zip(sources, destinations, strict=True):
            os.replace(source, destination)
        return
    if is_s3(sources[0]):
        for source, destination in zip(sources, destinations, strict=True):
            s3_objects.copy(source, destination)
        s3_objects.delete(sources)
        return
    from apache_beam.io.filesystems import FileSystems

    FileSystems.rename(sources, destinations)


# Deleting -----------------------------------------------------------------------------------------------------

def delete(paths: list[str]) -> None:
    """Deletes files; locally and on s3:// one already gone is no error."""
    if not paths:
        return
    if not is_remote(paths[0]):
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        return
    if is_s3(paths[0]):
        s3_objects.delete(paths)
        return
    from apache_beam.io.filesystems import FileSystems

    FileSystems.delete(paths)


def remove_empty_folders(root: str) -> None:
    """Removes `root` and the folders under it that hold nothing, deepest first (locally; an object store has no
    empty folders). A folder that holds anything stays."""
    if is_remote(root):
        return
    for dirpath, _, _ in sorted(os.walk(root), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):  # not empty
            os.rmdir(dirpath)


def remove_tree(folder: str) -> None:
    """Removes `folder` and everything under it; what cannot be removed locally is left."""
    if not is_remote(folder):
        shutil.rmtree(folder, ignore_errors=True)
        return
    delete([join(folder, f) for f in list_files(folder)])
