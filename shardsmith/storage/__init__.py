"""Where files live: the one face through which every module reads, writes, lists and deletes files, on a local
disk or an object store, never telling them apart itself. A path's scheme picks its backend once
(`backend_for`): no scheme is the local disk (`local_disk.py`), `s3://` is S3 (`s3_storage.py`, boto3, configured
the standard AWS way), and any other (`gs://`) is Beam's FileSystems (`beam_files.py`, Beam imported only when
such a path is used, so a shard writer process of a local build never loads it). Each backend keeps the protocol
in `backend.py`; docs/extending.md says how to add a scheme.

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

import errno
import os
import stat
from collections.abc import Callable, Iterable
from typing import BinaryIO

from shardsmith.storage.backend import FileLookup, StorageBackend
from shardsmith.storage.beam_files import CLOUD_STORAGE, BeamFiles, StoredObject, cloud_object, gcs_client
from shardsmith.storage.local_disk import TEMP_PREFIX, LocalDisk, temporary_path
from shardsmith.storage.local_files import NotARegularFile, kind_of
from shardsmith.storage.read_ahead import READ_AHEAD_THREADS, ReadAhead
from shardsmith.storage.s3_objects import is_s3
from shardsmith.storage.s3_storage import S3Objects

__all__ = ["TEMP_PREFIX", "READ_AHEAD_BYTES", "READ_AHEAD_THREADS", "FileLookup", "ReadAhead", "StorageBackend",
           "StoredObject", "backend_for", "cloud_object", "gcs_client", "temporary_path"]

LOCAL_DISK: StorageBackend = LocalDisk()
BEAM_FILES: StorageBackend = BeamFiles()  # every scheme not in BACKENDS
BACKENDS: dict[str, StorageBackend] = {"s3": S3Objects()}  # by URI scheme

# A remote read fetches this much a request: Beam's GCS reader's own buffer (apache_beam.io.gcp.gcsio
# DEFAULT_READ_BUFFER_SIZE), so that a chunk is one request.
READ_AHEAD_BYTES = 16 << 20


def backend_for(path: str) -> StorageBackend:
    """The backend of a path: by its URI scheme, the local disk without one."""
    scheme, found, _ = path.partition("://")
    if not found:
        return LOCAL_DISK
    return BACKENDS.get(scheme, BEAM_FILES)


def is_remote(uri: str) -> bool:
    """Whether a URI names an object store (gs://..., s3://...); else a local path."""
    return "://" in uri


def is_cloud_storage(uri: str) -> bool:
    """Whether a URI names a Cloud Storage object or folder (gs://...)."""
    return uri.startswith(CLOUD_STORAGE)


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
    backend = backend_for(path)
    if read_ahead and backend.remote:
        return ReadAhead(backend.open_stream(path), READ_AHEAD_BYTES)  # type: ignore[return-value]
    return backend.open_read(path, allowed_prefixes, buffered, READ_AHEAD_BYTES)


def read_range(path: str, offset: int, length: int) -> bytes:
    """Bytes `offset` to `offset + length` of a file (fewer at its end): locally one `pread`; on gs:// and s3://
    one ranged request for exactly those bytes, where a stream opened to seek and read would fetch READ_AHEAD_BYTES (a
    record read at random through an index would cost 16 MB a record)."""
    return backend_for(path).read_range(path, offset, length)


def read_bytes(path: str) -> bytes | None:
    """A whole file, or None if it does not exist."""
    return backend_for(path).read_bytes(path)


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
        return read_bytes(path)
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def exists(path: str) -> bool:
    """Whether a file (or, locally, a folder) is at `path`."""
    return backend_for(path).exists(path)


def is_folder(path: str) -> bool:
    """Whether `path` is a folder: locally a directory; on an object store a name ending in "/", or a prefix that holds
    objects while no object has that name."""
    return backend_for(path).is_folder(path)


def match(pattern: str) -> list[str]:
    """The paths a glob matches (local or remote, through Beam's FileSystems or, for s3://, its rules); `**` matches
    across folders."""
    return backend_for(pattern).match(pattern)


def size(path: str) -> int:
    """The file's size in bytes; an OSError (locally) or the backend's error (remote) when there is none."""
    return backend_for(path).size(path)


def look_up(path: str) -> FileLookup:
    """The file's size in bytes, or why there is none, never raising. Locally one stat (about 20 times cheaper
    than Beam's FileSystems), which also says when the path names a named pipe, a device or a folder (whoever
    opens it later checks again: the path may change before then)."""
    return backend_for(path).look_up(path)


# Listing ------------------------------------------------------------------------------------------------------

def list_files(folder: str) -> list[str]:
    """Every file under `folder`, at any depth, relative to it, sorted; empty when there is no such folder."""
    return backend_for(folder).list_files(folder)


def list_entries(folder: str) -> dict[str, bool]:
    """{entry name: is a folder} of one folder's direct entries; empty if it does not exist. On an object store a
    folder is a name prefix, so it is listed only when it holds a file."""
    return backend_for(folder).list_entries(folder)


# Writing ------------------------------------------------------------------------------------------------------

def write_atomically(path: str, data: bytes) -> None:
    """Writes `path` so that it holds either its old content or all of `data`, never a part (see the module)."""
    write_atomically_from(path, (data,))


def write_atomically_from(path: str, chunks: Iterable[bytes]) -> None:
    """Writes `path` as the concatenation of `chunks`, consumed one at a time (never all in memory); `path` holds
    either its old content or all of it. Locally a failed write removes its temporary file; on s3:// it uploads
    nothing."""
    backend_for(path).write_atomically_from(path, chunks)


def write_bytes(path: str, data: bytes) -> None:
    """Writes `path` in place (a reader may see it part-written locally; an object store's upload is whole)."""
    with create(path) as out:
        out.write(data)


def create(path: str, *, gzip_compressed: bool = False) -> BinaryIO:
    """`path` opened for binary writing, new or truncated; on an object store the object is created when the
    stream closes, with gzip's MIME type for `gzip_compressed` bytes (compressing is the caller's,
    `gzip_writer`). On s3:// a `with` block that raises creates no object."""
    return backend_for(path).create(path, gzip_compressed)


def gzip_writer(raw: BinaryIO, path: str):
    """A stream that gzip-compresses into `raw` (opened by `create(path)`), with the bytes shardsmith has always
    written there: locally gzip with mtime=0, no file name and zlib's default level 6; on an object store Beam's
    own gzip stream (CompressedFile). Closing it writes the trailer."""
    return backend_for(path).gzip_writer(raw)


def touch(path: str) -> None:
    """An empty file at `path`, kept as it is if one is there (locally its folder must exist)."""
    backend_for(path).touch(path)


def make_folder(path: str, *, exist_ok: bool = False) -> None:
    """Makes one local folder (its parent must exist); nothing on an object store, where folders are prefixes."""
    backend_for(path).make_folder(path, exist_ok)


def make_folders(path: str, *, exist_ok: bool = False) -> None:
    """Makes a local folder and its missing parents; nothing on an object store."""
    backend_for(path).make_folders(path, exist_ok)


def rename(sources: list[str], destinations: list[str]) -> None:
    """Moves each source to its destination, replacing what is there: one atomic rename locally (the parent must
    exist), a copy and a delete on an object store (the copy appears whole)."""
    if sources:
        backend_for(sources[0]).rename(sources, destinations)


# Deleting -----------------------------------------------------------------------------------------------------

def delete(paths: list[str]) -> None:
    """Deletes files; locally and on s3:// one already gone is no error."""
    if paths:
        backend_for(paths[0]).delete(paths)


def remove_empty_folders(root: str) -> None:
    """Removes `root` and the folders under it that hold nothing, deepest first (locally; an object store has no
    empty folders). A folder that holds anything stays."""
    backend_for(root).remove_empty_folders(root)


def remove_tree(folder: str) -> None:
    """Removes `folder` and everything under it; what cannot be removed locally is left."""
    backend_for(folder).remove_tree(folder)
