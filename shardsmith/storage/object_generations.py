"""Cloud Storage objects changed only if they are still the version that was read: the compare-and-swap the
output folder's lock needs on gs:// (shardsmith/core/build_lock.py). Every object version has a generation
number; a write or delete made on condition of a generation fails, changing nothing, once another writer has
replaced the object (a write on generation 0: only if there is no object yet).

gcp-storage-emulator ignores generation preconditions: the tests there check the lock's flow, not the race.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectVersion:
    data: bytes
    age_s: float  # seconds since this version was written
    generation: int


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

    def write_if(self, data: bytes, generation: int) -> bool:
        """Writes `data` if the object is still at `generation` (0: if there is none); whether it was written."""
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._bucket.blob(self._name).upload_from_string(data, if_generation_match=generation)
        except PreconditionFailed:
            return False
        return True

    def delete_if(self, generation: int) -> None:
        """Deletes the object if it is still at `generation`; nothing when it is gone or was replaced."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        with contextlib.suppress(NotFound, PreconditionFailed):
            self._bucket.blob(self._name).delete(if_generation_match=generation)
