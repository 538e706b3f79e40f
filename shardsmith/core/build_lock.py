"""One build at a time per output folder: a lock object created atomically at the folder's top level.

The lock holds the build id, host, process and start time; its modification time is the heartbeat, refreshed
every LOCK_HEARTBEAT_S by the launcher while the job runs. A second build finds it and stops (exit 2) naming
the holder. A holder is known to be gone when it ran on this host and its process no longer exists; then the
lock is taken over at once (a scheduler's re-run after a kill -9). Any other lock is taken over only with
--break_lock and only once its heartbeat is older than LOCK_STALE_AFTER_S. The publish step checks that its
build still holds the lock before it replaces metadata.json, so a build whose lock was broken never publishes.

Atomicity: locally, O_CREAT|O_EXCL; on Cloud Storage, `if_generation_match=0` to create and the generation
read to refresh, take over or delete. (gcp-storage-emulator ignores generation preconditions, so on it only
the read-then-create check holds.) A Dataflow retry of a bundle belongs to the same build id: the same holder.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass

from shardsmith.format.naming import LOCK_FILE, is_remote, join

LOCK_HEARTBEAT_S = 30
# A heartbeat older than this means the holder stopped refreshing it (lost machine, killed launcher).
LOCK_STALE_AFTER_S = 600
_LOG = logging.getLogger("shardsmith")


class LockHeld(Exception):
    """Another build holds the folder; the message says which, since when, and what to do."""


@dataclass(frozen=True)
class LockHolder:
    build_id: str
    host: str
    pid: int
    pid_started: str  # the process's start time (Linux /proc), so a reused pid is not taken for the holder
    started: str

    @classmethod
    def this_process(cls, build_id: str) -> LockHolder:
        return cls(build_id, socket.gethostname(), os.getpid(), _process_start(os.getpid()) or "",
                   time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def to_json(self) -> bytes:
        return (json.dumps(asdict(self), indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> LockHolder | None:
        try:
            return cls(**json.loads(data.decode("utf-8")))
        except (ValueError, TypeError, UnicodeDecodeError):
            return None  # a lock cut short by a kill while it was being written

    def is_gone(self) -> bool:
        """True only when this host can prove the holder's process has ended."""
        if self.host != socket.gethostname():
            return False
        started = _process_start(self.pid)
        if started is None:
            return _pid_is_free(self.pid)
        return started != self.pid_started


def _process_start(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None


def _pid_is_free(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@dataclass(frozen=True)
class _Seen:
    data: bytes
    age_s: float
    token: object  # what a conditional refresh, take-over or delete needs: the content (local), the generation


class _LocalLock:
    def __init__(self, path: str):
        self.path = path

    def read(self) -> _Seen | None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            return _Seen(data, time.time() - os.stat(self.path).st_mtime, data)
        except FileNotFoundError:
            return None

    def create(self, data: bytes) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        return True

    def _still(self, token) -> bool:
        seen = self.read()
        return seen is not None and seen.token == token

    def refresh(self, token) -> bool:
        if not self._still(token):
            return False
        os.utime(self.path)
        return True

    def take_over(self, token, data: bytes) -> bool:
        if not self._still(token):
            return False
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)
        return self.create(data)

    def delete(self, token) -> None:
        if self._still(token):
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.path)


class _GcsLock:
    def __init__(self, path: str):
        from apache_beam.io.gcp.gcsio import GcsIO, parse_gcs_path

        bucket, name = parse_gcs_path(path)
        self._blob_name = name
        self._bucket = GcsIO().client.bucket(bucket)

    def read(self) -> _Seen | None:
        blob = self._bucket.get_blob(self._blob_name)
        if blob is None:
            return None
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            data = blob.download_as_bytes(if_generation_match=blob.generation)
        except (NotFound, PreconditionFailed):
            return self.read()
        return _Seen(data, time.time() - blob.updated.timestamp(), blob.generation)

    def _upload(self, data: bytes, generation) -> bool:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._bucket.blob(self._blob_name).upload_from_string(data, if_generation_match=generation)
        except PreconditionFailed:
            return False
        return True

    def create(self, data: bytes) -> bool:
        return self._upload(data, 0)

    def refresh(self, token) -> bool:
        seen = self.read()
        return seen is not None and seen.token == token and self._upload(seen.data, token)

    def take_over(self, token, data: bytes) -> bool:
        return self._upload(data, token)

    def delete(self, token) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        with contextlib.suppress(NotFound, PreconditionFailed):
            self._bucket.blob(self._blob_name).delete(if_generation_match=token)


def _lock_file(output_dir: str):
    path = join(output_dir, LOCK_FILE)
    return _GcsLock(path) if is_remote(path) else _LocalLock(path)


def _held_by(seen: _Seen | None, build_id: str) -> bool:
    if seen is None:
        return False
    holder = LockHolder.from_json(seen.data)
    return holder is not None and holder.build_id == build_id


def holds_lock(output_dir: str, build_id: str) -> bool:
    """Whether `build_id` holds the folder's lock now (checked by the publish step before it publishes)."""
    return _held_by(_lock_file(output_dir).read(), build_id)


def release_lock(output_dir: str, build_id: str) -> None:
    """Removes the lock if `build_id` holds it; someone else's lock stays."""
    lock = _lock_file(output_dir)
    seen = lock.read()
    if _held_by(seen, build_id):
        lock.delete(seen.token)


def _describe(seen: _Seen) -> str:
    holder = LockHolder.from_json(seen.data)
    who = (f"build {holder.build_id} (process {holder.pid} on {holder.host}, started {holder.started})"
           if holder else "a build whose lock file is unreadable")
    return f"{who}; last heartbeat {seen.age_s:.0f} s ago"


def acquire_lock(output_dir: str, build_id: str, break_lock: bool = False) -> BuildLock:
    """Takes the folder's lock for `build_id` or raises LockHeld naming the holder."""
    lock = _lock_file(output_dir)
    mine = LockHolder.this_process(build_id).to_json()
    for _ in range(3):  # a holder may release or another taker may win between our read and our write
        seen = lock.read()  # first, so a store that ignores preconditions (the emulator) still sees a holder
        if seen is None:
            if lock.create(mine) and _held_by(lock.read(), build_id):
                return BuildLock(output_dir, build_id)
            continue
        holder = LockHolder.from_json(seen.data)
        gone = holder is not None and holder.is_gone()
        stale = seen.age_s > LOCK_STALE_AFTER_S
        if not gone and not (break_lock and stale):
            hint = ("pass --break_lock to take it over" if stale else
                    f"wait for it to finish; --break_lock takes over a lock idle for over {LOCK_STALE_AFTER_S} s")
            raise LockHeld(f"{output_dir} is being built by {_describe(seen)}; {hint}")
        _LOG.warning("taking over the lock of %s (%s)", output_dir,
                     "its process is gone" if gone else f"--break_lock: {_describe(seen)}")
        if lock.take_over(seen.token, mine) and _held_by(lock.read(), build_id):
            return BuildLock(output_dir, build_id)
    raise LockHeld(f"{output_dir}: another build took the lock at the same moment; try again")


class BuildLock:
    """A held lock: `start_heartbeat()` refreshes it in a daemon thread until `release()`."""

    def __init__(self, output_dir: str, build_id: str):
        self.output_dir = output_dir
        self.build_id = build_id
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start_heartbeat(self, every_s: float = LOCK_HEARTBEAT_S) -> None:
        self._thread = threading.Thread(target=self._beat, args=(every_s,), name="shardsmith-lock", daemon=True)
        self._thread.start()

    def _beat(self, every_s: float) -> None:
        lock = _lock_file(self.output_dir)
        while not self._stop.wait(every_s):
            try:
                seen = lock.read()
                if not _held_by(seen, self.build_id) or not lock.refresh(seen.token):
                    _LOG.error("the lock of %s was taken over; this build will not publish", self.output_dir)
                    return
            except Exception as e:  # a passing storage error: the next beat tries again
                _LOG.warning("could not refresh the lock of %s: %s", self.output_dir, e)

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def release(self) -> None:
        self.stop_heartbeat()
        release_lock(self.output_dir, self.build_id)
