"""One input of a build (a manifest file or a folder of class folders) and the one place a manifest file is opened.

`open_manifest` is every manifest format's way to its bytes: local files directly, other URIs (gs://) through
Beam's FileSystems, imported only then, so that the CLI checks local manifests before it imports Beam.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import BinaryIO

from shardsmith.core.local_files import NotARegularFile, open_regular_file
from shardsmith.errors import UsageError
from shardsmith.format.naming import is_remote


@dataclass(frozen=True)
class Source:
    """One input: a manifest file or a class folder, with its position in the sorted input list."""

    path: str
    index: int
    kind: str  # the kind of its reader (formats.READERS): "csv", "jsonl", "folder", ...


def open_manifest(path: str) -> BinaryIO:
    """A local file as Beam's LocalFileSystem opens it (uncompressed, binary, seekable), without importing Beam
    (the header check runs before the CLI imports it); other URIs through Beam's FileSystems. A local path that
    is not a regular file when opened is a UsageError, at once."""
    if not is_remote(path):
        try:
            return open_regular_file(path)
        except NotARegularFile as e:  # replaced since resolve_sources looked: never wait on a named pipe
            raise UsageError(f"manifest {path} is {e.kind}, not a regular file") from None
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)
