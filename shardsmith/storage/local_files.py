"""Opening a local input file so that what is checked is the file that was opened, not a path looked at earlier:
between a check and a read, a folder can become a symlink out of --allowed_prefixes and a file can become a
named pipe, which a plain open() would wait on forever.

`open_regular_file` opens without waiting (O_NONBLOCK: a named pipe with no writer opens at once), then asks the
open descriptor what it is (fstat) and, with allowed prefixes, where it is (the kernel's path of the descriptor,
/proc/self/fd/N): a swap after the open cannot change either answer. Beam-free and TensorFlow-free.

Cost, measured as CPU time per 20 kB image read through load_images.read_bytes (now read_input_file; best of 15
passes over 2,000 warm files): 19.5 us with the plain open() before, 17.5 us now (unbuffered), 24.5 us with
--allowed_prefixes (the readlink of the descriptor).
"""

from __future__ import annotations

import functools
import os
import stat
from collections.abc import Callable, Sequence
from typing import BinaryIO

# Reads of a file whose size is not known beforehand go this many bytes at a time.
READ_CHUNK_BYTES = 1 << 20
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0)


class NotARegularFile(OSError):
    """The path named a named pipe, a device, a folder or a socket when it was opened; `kind` says which."""

    def __init__(self, path: str, kind: str):
        super().__init__(f"{path} is {kind}, not a regular file")
        self.path = path
        self.kind = kind


class OutsideAllowedPrefixes(OSError):
    """The file that was opened lies under none of the allowed prefixes (a symlink or folder on its path changed,
    or its real path cannot be told)."""

    def __init__(self, path: str):
        super().__init__(f"{path} is outside the allowed prefixes when opened")
        self.path = path


def kind_of(mode: int) -> str:
    """What a non-regular file is, in words people read ("a named pipe (FIFO)")."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a special file"


def open_regular_file(path: str, allowed_prefixes: tuple[str, ...] = ()) -> BinaryIO:
    """The local file at `path`, opened for binary reading, if the opened file is a regular file and, when
    `allowed_prefixes` (real paths ending in "/") are given, its real path lies under one of them. Never waits on
    a named pipe. Raises NotARegularFile, OutsideAllowedPrefixes, or the OSError of the open itself."""
    fd, _ = _open_checked(path, allowed_prefixes)
    # O_NONBLOCK means nothing for a regular file's reads; it stays set. Unbuffered: callers read in sizes they
    # choose, and a buffer would only be one more copy.
    return os.fdopen(fd, "rb", buffering=0)


def read_regular_file(path: str, allowed_prefixes: tuple[str, ...], first_read: int, max_bytes: int) -> bytes:
    """The bytes of the local file at `path`, opened and judged as `open_regular_file` does, read with
    `read_to_limit`; the opened file's fstat tells when the first read reached its end. One read per image when
    `first_read` is the size looked up before, plus one: about 3 us less per image than reading through a file
    object (tests/benchmarks/writer_cpu.py)."""
    fd, opened = _open_checked(path, allowed_prefixes)
    try:
        return read_to_limit(functools.partial(os.read, fd), first_read, max_bytes, opened.st_size)
    finally:
        os.close(fd)


def read_to_limit(read: Callable[[int], bytes], first_read: int, max_bytes: int, size: int = -1) -> bytes:
    """What `read(n)` calls give until the end of the stream or the first read past `max_bytes` (the caller sees
    the length and rejects it). The first asks for `first_read` bytes; when it returns fewer, and exactly `size`
    (the file's size as opened, when known), that was the end, and no second read asks again."""
    data = read(first_read)
    if len(data) < first_read and len(data) == size:
        return data
    chunks, total = [data], len(data)
    while chunks[-1] and total <= max_bytes:
        chunks.append(read(min(READ_CHUNK_BYTES, max_bytes + 1 - total)))
        total += len(chunks[-1])
    chunks = [chunk for chunk in chunks if chunk]
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _open_checked(path: str, allowed_prefixes: tuple[str, ...]) -> tuple[int, os.stat_result]:
    """`open_regular_file`'s descriptor and the fstat it judged, the descriptor the caller's to close."""
    fd = os.open(path, _OPEN_FLAGS)
    try:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise NotARegularFile(path, kind_of(opened.st_mode))
        if allowed_prefixes:
            real = _real_path_of(fd, path, opened)
            if real is None or not real.startswith(allowed_prefixes):
                raise OutsideAllowedPrefixes(path)
        return fd, opened
    except BaseException:
        os.close(fd)
        raise


def _real_path_of(fd: int, path: str, opened: os.stat_result) -> str | None:
    """The real path of the file open at `fd`: the kernel's own (Linux), else the real path of `path` when that
    still names the same file (device and inode); None when neither can be told."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        pass
    real = os.path.realpath(path)
    try:
        now = os.stat(real)
    except OSError:
        return None
    return real if (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino) else None


def write_pieces(fd: int, pieces: Sequence[bytes]) -> None:
    """Writes `pieces` one after the other at the descriptor's position, in one `writev` when the kernel takes them
    all (it may take fewer bytes: the rest follows, from where it stopped)."""
    left = list(pieces)
    while left:
        written = os.writev(fd, left)
        while left and written >= len(left[0]):
            written -= len(left[0])
            left.pop(0)
        if written:
            left[0] = memoryview(left[0])[written:]
