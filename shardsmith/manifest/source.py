"""One input of a build (a manifest file or a folder of class folders) and the one place a manifest file is opened.

`open_manifest` is every manifest format's way to its bytes, through the storage module (which imports Beam's
FileSystems only for gs://, so that the CLI checks local manifests before it imports Beam).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.storage.local_files import NotARegularFile


@dataclass(frozen=True)
class Source:
    """One input: a manifest file or a class folder, with its position in the sorted input list."""

    path: str
    index: int
    kind: str  # the kind of its reader (formats.READERS): "csv", "jsonl", "folder", ...


def open_manifest(path: str) -> BinaryIO:
    """A manifest opened for reading (uncompressed, binary; a local one seekable). A local path that is not a
    regular file when opened is a UsageError, at once."""
    try:
        return storage.open_read(path)
    except NotARegularFile as e:  # replaced since resolve_sources looked: never wait on a named pipe
        raise UsageError(f"manifest {path} is {e.kind}, not a regular file") from None
