"""Objects changed only if they are still the version that was read: the compare-and-swap the output folder's
lock needs on an object store (shardsmith/output_folder/lock/lock_files.py). `versioned_object(path)` gives the
one for the path's store; each version read carries a token a write or delete can be made on condition of, failing
and changing nothing once another writer has replaced the object (token 0: only if there is no object yet).

- Cloud Storage (gs://): the token is the object's generation (`if_generation_match`). gcp-storage-emulator
  ignores generation preconditions: the tests there check the lock's flow, not the race.
- S3 (s3://): the token is the object's ETag. A write on token 0 is a PutObject with `If-None-Match: *`, one on
  an ETag a PutObject with `If-Match: <ETag>` (S3 answers 412 PreconditionFailed, or 409 when a concurrent
  conditional write is under way: both are "not written"), a delete a DeleteObject with `If-Match`. An ETag is
  the content's MD5 (single PUT), so two writes of the same bytes have the same token: a writer that needs every
  write to be told apart (the lock's heartbeat) writes different bytes each time. Where a server does not
  implement conditional deletes (NotImplemented), the delete is a read, a comparison and a delete.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectVersion:
    data: bytes
    age_s: float  # seconds since this version was written
    token: object  # what write_if and delete_if take: the generation (gs://), the ETag (s3://)


def versioned_object(path: str):
    """The conditioned object at `path`: a VersionedObject on gs://, an S3VersionedObject on s3://."""
    from shardsmith.storage.s3_objects import is_s3

    return S3VersionedObject(path) if is_s3(path) else VersionedObject(path)


class VersionedObject:
    """One gs:// object, read with its generation and written or deleted on condition of one."""

    def __init__(self, path: str):
        from apache_beam.io.gcp.gcsio import parse_gcs_path

        from shardsmith.storage import gcs_client

        bucket, name = parse_gcs_path(path)
        self._name = name
        self._bucket = gcs_client().bucket(bucket)

    def read(self) -> ObjectVersion | None:
        """The object's current version, or None when there is no object."""
        blob = self._bucket.get_blob(self._name)
        if blob is None:
            return None
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            data = blob.download_as_bytes(if_generation_match=blob.generation)
        except (NotFound, PreconditionFailed):  # replaced or deleted between the two requests: read again
            return self.read()
        return ObjectVersion(data, time.time() - blob.updated.timestamp(), blob.generation)

    def write_if(self, data: bytes, generation) -> bool:
        """Writes `data` if the object is still at `generation` (0: if there is none); whether it was written."""
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._bucket.blob(self._name).upload_from_string(data, if_generation_match=generation)
        except PreconditionFailed:
            return False
        return True

    def delete_if(self, generation) -> None:
        """Deletes the object if it is still at `generation`; nothing when it is gone or was replaced."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        with contextlib.suppress(NotFound, PreconditionFailed):
            self._bucket.blob(self._name).delete(if_generation_match=generation)


_NOT_WRITTEN = ("PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey", "404", "412", "409")


class S3VersionedObject:
    """One s3:// object, read with its ETag (one GetObject: the bytes and the ETag of the same version) and written
    or deleted on condition of one (see the module)."""

    def __init__(self, path: str):
        from shardsmith.storage import s3_objects

        self._s3 = s3_objects
        self._bucket, self._key = s3_objects.split(path)
        self._path = path

    def read(self) -> ObjectVersion | None:
        found = self._s3.get(self._path)
        if found is None:
            return None
        data = found["Body"].read()
        return ObjectVersion(data, time.time() - found["LastModified"].timestamp(), found["ETag"])

    def write_if(self, data: bytes, token) -> bool:
        condition = {"IfNoneMatch": "*"} if token == 0 else {"IfMatch": token}
        try:
            self._s3.client().put_object(Bucket=self._bucket, Key=self._key, Body=data, **condition)
        except Exception as e:
            if self._s3.error_code(e) in _NOT_WRITTEN:
                return False
            raise
        return True

    def delete_if(self, token) -> None:
        try:
            self._s3.client().delete_object(Bucket=self._bucket, Key=self._key, IfMatch=token)
        except Exception as e:
            code = self._s3.error_code(e)
            if code == "NotImplemented":  # a server without conditional deletes: read, compare, delete
                seen = self.read()
                if seen is not None and seen.token == token:
                    self._s3.delete([self._path])
            elif code not in _NOT_WRITTEN:
                raise
