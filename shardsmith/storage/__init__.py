"""Where files live: the one module that reads, writes, lists and deletes files, on a local disk or on an object
store (gs://). Every other module asks here and never tells the two apart itself.

Local paths use the operating system directly; other URIs go through Beam's FileSystems, imported inside the
function that needs it, so a shard writer process (which imports this) never loads Beam for a local build.
Input files (images, masks) are opened through `local_files.open_regular_file`: judged as opened, never waited
on when they are named pipes, and confined to --allowed_prefixes by their real path.

Guarantees:
- `write_atomically` leaves `path` holding its old content or all of the new, never a part: locally through a
  temporary name beside it (TEMP_PREFIX, removed again if the write fails) and a rename; on an object store as
  one upload, which creates the object only when it completes (a failed upload is cancelled).
- Nothing here creates a missing parent folder unless asked to (`make_folders`): a writer whose folder was
  removed fails instead of making it again.
- Remote reads never decompress: a `.gz` file reads as the bytes stored.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import shutil
import stat
from collections.abc import Iterable
from typing import BinaryIO, NamedTuple

from shardsmith.storage.local_files import kind_of, open_regular_file

# Every file is written under this prefix and renamed into place; such files are never part of a dataset.
TEMP_PREFIX = ".shardsmith-tmp-"
_CLOUD_STORAGE = "gs://"


def is_remote(uri: str) -> bool:
    """Whether a URI names an object store (gs://...), read through Beam's FileSystems; else a local path."""
    return "://" in uri


def is_cloud_storage(uri: str) -> bool:
    """Whether a URI names a Cloud Storage object or folder (gs://...)."""
    return uri.startswith(_CLOUD_STORAGE)


def join(folder: str, *names: str) -> str:
    """`folder/name/...` with one slash between parts, for local paths and gs:// URIs alike."""
    return "/".join([folder.rstrip("/"), *names])


def parent(path: str) -> str:
    """The folder holding `path` (for local paths and URIs alike)."""
    return path.rstrip("/").rsplit("/", 1)[0]


# Reading ------------------------------------------------------------------------------------------------------

def open_read(path: str, allowed_prefixes: tuple[str, ...] = (), *, buffered: bool = False) -> BinaryIO:
    """`path` opened for binary reading, its bytes as stored. A local file must be a regular file when opened
    and, with `allowed_prefixes`, lie under one of them by its real path (NotARegularFile,
    OutsideAllowedPrefixes); it is unbuffered unless `buffered` (for many small reads)."""
    if not is_remote(path):
        opened = open_regular_file(path, allowed_prefixes)
        return io.BufferedReader(opened) if buffered else opened  # type: ignore[arg-type]
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes | None:
    """A whole file, or None if it does not exist."""
    if not is_remote(path):
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(path):
        return None
    with open_read(path) as f:
        return f.read()


def read_bytes_with_tensorflow(path: str) -> bytes | None:
    """A whole file read through TensorFlow's file systems (tf.io.gfile: local, gs:// and whatever TensorFlow
    reads), or None if it does not exist: for `load()`, which reads the shards through tf.data and so needs
    nothing else."""
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path, "rb") as f:
        return f.read()


def exists(path: str) -> bool:
    """Whether a file (or, locally, a folder) is at `path`."""
    if not is_remote(path):
        return os.path.exists(path)
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.exists(path)


def is_folder(path: str) -> bool:
    """Whether `path` is a folder: locally a directory; on gs:// a name ending in "/", or a prefix that holds
    objects while no object has that name."""
    if not is_remote(path):
        return os.path.isdir(path)
    if path.endswith("/"):
        return True
    from apache_beam.io.filesystems import FileSystems

    try:
        FileSystems.get_filesystem(path).metadata(path)
        return False
    except Exception:
        return bool(FileSystems.match([path.rstrip("/") + "/**"], limits=[1])[0].metadata_list)


def match(pattern: str) -> list[str]:
    """The paths a glob matches (local or remote, through Beam's FileSystems); `**` matches across folders."""
    from apache_beam.io.filesystems import FileSystems

    return [m.path for m in FileSystems.match([pattern])[0].metadata_list]


def size(path: str) -> int:
    """The file's size in bytes; an OSError (locally) or Beam's error (remote) when there is none."""
    if not is_remote(path):
        return os.path.getsize(path)
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
    from apache_beam.io.filesystems import FileSystems

    prefix = folder.rstrip("/") + "/"
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
    either its old content or all of it. Locally a failed write removes its temporary file."""
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
    `gzip_writer`)."""
    if not is_remote(path):
        return open(path, "wb")  # noqa: SIM115 (the caller closes it)
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
    from apache_beam.io.filesystems import FileSystems

    FileSystems.rename(sources, destinations)


# Deleting -----------------------------------------------------------------------------------------------------

def delete(paths: list[str]) -> None:
    """Deletes files; locally one already gone is no error."""
    if not paths:
        return
    if not is_remote(paths[0]):
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
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
