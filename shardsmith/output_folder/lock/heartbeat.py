"""A held lock (`BuildLock`): refreshed in a daemon thread every LOCK_HEARTBEAT_S while the build runs, then
released.

Guarantees: a beat refreshes the lock only on condition of the lock as read naming this build; once it was taken
over the beats stop (the build's next `LockGuard.check` fails it) and never take it back. Releasing removes the
lock only while this build holds it, and a local holder keeps its lock file's flock until then.
"""

from __future__ import annotations

import logging
import threading

from shardsmith.output_folder.lock.guard import LockGuard, release_lock
from shardsmith.output_folder.lock.holder import held_by
from shardsmith.output_folder.lock.lock_files import lock_file

LOCK_HEARTBEAT_S = 30
_LOG = logging.getLogger("shardsmith")


class BuildLock:
    """A held lock: `start_heartbeat()` refreshes it in a daemon thread until `release()`."""

    def __init__(self, output_dir: str, build_id: str, lock_file=None):
        self.output_dir = output_dir
        self.build_id = build_id
        self._lock_file = lock_file  # keeps the local lock's flock for as long as this build runs
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def guard(self) -> LockGuard:
        return LockGuard(self.output_dir, self.build_id)

    def start_heartbeat(self, every_s: float = LOCK_HEARTBEAT_S) -> None:
        self._thread = threading.Thread(target=self._beat, args=(every_s,), name="shardsmith-lock", daemon=True)
        self._thread.start()

    def _beat(self, every_s: float) -> None:
        lock = lock_file(self.output_dir)
        while not self._stop.wait(every_s):
            try:
                seen = lock.read()
                if seen is None:  # released: the publish step removes the lock as its last act (a lock removed
                    return        # by anything else fails the build at its next lock check, with its own line)
                if not held_by(seen, self.build_id) or not lock.refresh(seen.token):
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
        if self._lock_file is not None:
            self._lock_file.close()
