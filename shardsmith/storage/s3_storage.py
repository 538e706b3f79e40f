"""Amazon S3 (s3://) as a storage backend (shardsmith/storage/backend.py), over `s3_objects` (boto3, configured the
standard AWS way). There is no rename: a copy, whole, then a delete; an upload creates its object only when it
completes, and a write whose chunks raise creates nothing."""

from __future__ import annotations

import io
from typing import BinaryIO

from shardsmith.storage import s3_objects
from shardsmith.storage.backend import FileLookup, ObjectStore


class S3Objects(ObjectStore):
    """Objects in S3 buckets."""

    def open_read(self, path: str, allowed_prefixes: tuple[str, ...], buffered: bool, buffer_bytes: int
                  ) -> BinaryIO:
        return io.BufferedReader(self.open_stream(path), buffer_bytes)  # type: ignore[return-value, arg-type]

    def open_stream(self, path: str) -> BinaryIO:
        return s3_objects.ObjectReader(path)  # type: ignore[return-value]

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        return s3_objects.read_range(path, offset, length)

    def read_bytes(self, path: str) -> bytes | None:
        return s3_objects.read_bytes(path)

    def exists(self, path: str) -> bool:
        return s3_objects.head(path) is not None

    def is_folder(self, path: str) -> bool:
        return path.endswith("/") or (s3_objects.head(path) is None and s3_objects.has_any(path + "/"))

    def match(self, pattern: str) -> list[str]:
        return s3_objects.match(pattern)

    def size(self, path: str) -> int:
        return s3_objects.size(path)

    def look_up(self, path: str) -> FileLookup:
        try:
            return FileLookup(self.size(path))
        except Exception:  # boto3's errors differ by cause: any of them means no file to read
            return FileLookup(None)

    def list_files(self, folder: str) -> list[str]:
        prefix = folder.rstrip("/") + "/"
        return sorted(uri[len(prefix):] for uri in s3_objects.list_keys(prefix) if len(uri) > len(prefix))

    def create(self, path: str, gzip_compressed: bool) -> BinaryIO:
        kind = "application/x-gzip" if gzip_compressed else "application/octet-stream"
        return s3_objects.ObjectWriter(path, kind)  # type: ignore[return-value]

    def rename(self, sources: list[str], destinations: list[str]) -> None:
        for source, destination in zip(sources, destinations, strict=True):
            s3_objects.copy(source, destination)
        s3_objects.delete(sources)

    def delete(self, paths: list[str]) -> None:
        s3_objects.delete(paths)

