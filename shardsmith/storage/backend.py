"""The storage backend protocol: what one kind of place (a local disk, Cloud Storage through Beam, S3) does for the
storage face (`shardsmith/storage/__init__.py`), which picks a backend once per path by its scheme and never
tells places apart itself. docs/extending.md says how to add a scheme and which tests prove it.

Every method takes full paths (local paths or URIs of the backend's scheme) and keeps the face's guarantees:
`write_atomically_from` leaves a path holding its old content or all of the new; nothing creates a missing parent
folder but `make_folders`; reads never decompress.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import BinaryIO, NamedTuple, Protocol


class FileLookup(NamedTuple):  # one per row: a frozen dataclass's constructor costs several times as much
    size: int | None  # None: there is no such file
    not_regular: str = ""  # what the path names when it is not a regular file ("a named pipe (FIFO)")


class StorageBackend(Protocol):
    """One kind of place files live in."""

    remote: bool  # reached by requests (an object store): the face reads whole shards ahead on such a place

    def open_read(self, path: str, allowed_prefixes: tuple[str, ...], buffered: bool, buffer_bytes: int
                  ) -> BinaryIO:
        """`path` opened for binary reading, its bytes as stored. Locally confined to `allowed_prefixes` by its
        real path and unbuffered unless `buffered`; a remote stream fetches `buffer_bytes` a request."""

    def open_stream(self, path: str) -> BinaryIO:
        """A remote `path`'s raw stream, unbuffered, for the face's read-ahead (`read_ahead.ReadAhead`)."""

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Bytes `offset` to `offset + length` (fewer at the end), in one request where the place has requests."""

    def read_bytes(self, path: str) -> bytes | None:
        """A whole file, or None if it does not exist."""

    def exists(self, path: str) -> bool:
        """Whether a file (or, locally, a folder) is at `path`."""

    def is_folder(self, path: str) -> bool:
        """Whether `path` is a folder (on an object store: a prefix holding objects, with no object of its name)."""

    def match(self, pattern: str) -> list[str]:
        """The paths a glob matches; `**` matches across folders."""

    def size(self, path: str) -> int:
        """The file's size in bytes; an error when there is none."""

    def look_up(self, path: str) -> FileLookup:
        """The file's size, or why there is none, never raising."""

    def list_files(self, folder: str) -> list[str]:
        """Every file under `folder`, at any depth, relative to it, sorted; empty when there is no such folder."""

    def list_entries(self, folder: str) -> dict[str, bool]:
        """{entry name: is a folder} of one folder's direct entries; empty if it does not exist."""

    def create(self, path: str, gzip_compressed: bool) -> BinaryIO:
        """`path` opened for binary writing, new or truncated (an object is created when the stream closes)."""

    def write_atomically_from(self, path: str, chunks: Iterable[bytes]) -> None:
        """`path` written as the chunks, consumed one at a time: its old content or all of the new."""

    def gzip_writer(self, raw: BinaryIO):
        """A stream that gzip-compresses into `raw`, with the bytes shardsmith has always written to this place."""

    def touch(self, path: str) -> None:
        """An empty file at `path`, kept as it is if one is there."""

    def make_folder(self, path: str, exist_ok: bool) -> None:
        """One folder (its parent must exist); nothing where folders are prefixes."""

    def make_folders(self, path: str, exist_ok: bool) -> None:
        """A folder and its missing parents; nothing where folders are prefixes."""

    def rename(self, sources: list[str], destinations: list[str]) -> None:
        """Each source moved to its destination, replacing what is there (the destination appears whole)."""

    def delete(self, paths: list[str]) -> None:
        """Deletes files."""

    def remove_empty_folders(self, root: str) -> None:
        """`root` and the folders under it that hold nothing, deepest first; nothing where folders are prefixes."""

    def remove_tree(self, folder: str) -> None:
        """`folder` and everything under it."""


def entries_of(files: list[str]) -> dict[str, bool]:
    """A folder's direct entries from the files under it (relative paths): on an object store a folder is a name
    prefix, so it is listed only when it holds a file."""
    return {f.split("/", 1)[0]: "/" in f for f in files}


class ObjectStore:
    """What every object store does alike, for a backend to inherit: folders are name prefixes (nothing to make,
    and no empty one to remove), a whole-file write is one upload (the object appears only when it completes),
    and a tree is removed object by object. Its subclass gives `create`, `list_files` and `delete`."""

    remote = True

    def create(self, path: str, gzip_compressed: bool) -> BinaryIO:
        raise NotImplementedError

    def list_files(self, folder: str) -> list[str]:
        raise NotImplementedError

    def delete(self, paths: list[str]) -> None:
        raise NotImplementedError

    def list_entries(self, folder: str) -> dict[str, bool]:
        return entries_of(self.list_files(folder))

    def write_atomically_from(self, path: str, chunks: Iterable[bytes]) -> None:
        with self.create(path, False) as out:
            for chunk in chunks:
                out.write(chunk)

    def touch(self, path: str) -> None:
        self.create(path, False).close()

    def gzip_writer(self, raw: BinaryIO):
        from apache_beam.io.filesystem import CompressedFile, CompressionTypes  # the bytes Beam writes to gs://

        return CompressedFile(raw, compression_type=CompressionTypes.GZIP)

    def make_folder(self, path: str, exist_ok: bool) -> None:
        return

    def make_folders(self, path: str, exist_ok: bool) -> None:
        return

    def remove_empty_folders(self, root: str) -> None:
        return

    def remove_tree(self, folder: str) -> None:
        names = self.list_files(folder)
        if names:
            self.delete([f"{folder.rstrip('/')}/{name}" for name in names])
