"""Cloud Storage (gs://), and any other scheme Beam's FileSystems knows, as a storage backend
(shardsmith/storage/backend.py). Beam is imported inside each method, so a process that reads only local files
(a shard writer of a local build) never loads it. Ranged reads on gs:// go through Cloud Storage's Python client
with Beam's credentials, one request for exactly the bytes asked for."""

from __future__ import annotations

import os
from typing import BinaryIO, NamedTuple

from shardsmith.storage.backend import FileLookup, ObjectStore

CLOUD_STORAGE = "gs://"

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


class StoredObject(NamedTuple):
    """What Cloud Storage says of an object without reading it."""

    size: int
    crc32c: str | None  # its CRC32C, big-endian hex as format/file_checksum.py writes it; None when not given


def cloud_object(path: str) -> StoredObject | None:
    """A gs:// object's size and CRC32C from one metadata request (no byte of it fetched); None if it is missing."""
    import base64

    from apache_beam.io.gcp.gcsio import parse_gcs_path

    bucket, name = parse_gcs_path(path)
    found = gcs_client().bucket(bucket).get_blob(name)
    if found is None:
        return None
    return StoredObject(found.size, base64.b64decode(found.crc32c).hex() if found.crc32c else None)


class BeamFiles(ObjectStore):
    """Objects behind Beam's FileSystems (gs:// first of all)."""

    def open_read(self, path: str, allowed_prefixes: tuple[str, ...], buffered: bool, buffer_bytes: int
                  ) -> BinaryIO:
        return self.open_stream(path)  # Beam's stream buffers its reads itself

    def open_stream(self, path: str) -> BinaryIO:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED)  # type: ignore[return-value]

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        if not path.startswith(CLOUD_STORAGE) or length <= 0:
            with self.open_read(path, (), False, 0) as stream:
                stream.seek(offset)
                return stream.read(length)
        from apache_beam.io.gcp.gcsio import parse_gcs_path

        bucket, name = parse_gcs_path(path)
        return gcs_client().bucket(bucket).blob(name).download_as_bytes(start=offset, end=offset + length - 1,
                                                                         checksum=None)

    def read_bytes(self, path: str) -> bytes | None:
        if not self.exists(path):
            return None
        with self.open_read(path, (), False, 0) as f:
            return f.read()

    def exists(self, path: str) -> bool:
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.exists(path)

    def is_folder(self, path: str) -> bool:
        from apache_beam.io.filesystems import FileSystems

        if path.endswith("/"):
            return True
        try:
            FileSystems.get_filesystem(path).metadata(path)
            return False
        except Exception:
            return bool(FileSystems.match([path.rstrip("/") + "/**"], limits=[1])[0].metadata_list)

    def match(self, pattern: str) -> list[str]:
        from apache_beam.io.filesystems import FileSystems

        return [m.path for m in FileSystems.match([pattern])[0].metadata_list]

    def size(self, path: str) -> int:
        from apache_beam.io.filesystems import FileSystems

        return FileSystems.get_filesystem(path).metadata(path).size_in_bytes

    def look_up(self, path: str) -> FileLookup:
        try:
            return FileLookup(self.size(path))
        except Exception:  # Beam raises BeamIOError/OSError subclasses that differ by filesystem
            return FileLookup(None)

    def list_files(self, folder: str) -> list[str]:
        from apache_beam.io.filesystems import FileSystems

        prefix = folder.rstrip("/") + "/"
        try:
            matched = FileSystems.match([prefix + "**"])[0].metadata_list
        except Exception:
            return []
        return sorted(m.path[len(prefix):] for m in matched if len(m.path) > len(prefix))

    def create(self, path: str, gzip_compressed: bool) -> BinaryIO:
        from apache_beam.io.filesystem import CompressionTypes
        from apache_beam.io.filesystems import FileSystems

        kind = CompressionTypes.GZIP if gzip_compressed else CompressionTypes.UNCOMPRESSED
        return FileSystems.create(path, mime_type=CompressionTypes.mime_type(kind),  # type: ignore[return-value]
                                  compression_type=CompressionTypes.UNCOMPRESSED)

    def rename(self, sources: list[str], destinations: list[str]) -> None:
        from apache_beam.io.filesystems import FileSystems

        FileSystems.rename(sources, destinations)

    def delete(self, paths: list[str]) -> None:
        from apache_beam.io.filesystems import FileSystems

        FileSystems.delete(paths)

