"""The check a build makes before each write into its folder (`LockGuard`), and the lock's release.

Guarantee: `LockGuard.check` returns only while the lock as read names this build; otherwise (taken over, gone,
or something else at its path) it raises LockLost, and the build writes nothing more. `release_lock` removes the
lock only when this build holds it: someone else's lock, or anything else at its path, stays.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from shardsmith.output_folder.lock.holder import NotALock, describe, held_by
from shardsmith.output_folder.lock.lock_files import lock_file

# Starts the one-line error of a build whose lock was taken over (pipeline/cli.py prints it as it is).
LOCK_LOST_MARKER = "shardsmith: lock lost: "


class LockLost(RuntimeError):
    """This build's lock was taken over: it must write nothing more. The message, one line, says who holds it."""


@dataclass(frozen=True)
class LockGuard:
    """Picklable: what a step that writes into a build's folder needs to check, first, that the build still
    holds the output folder's lock."""

    output_dir: str
    build_id: str

    def check(self) -> None:
        """Returns if the build still holds the lock; else raises LockLost, naming the holder now."""
        try:
            seen = lock_file(self.output_dir).read()
        except NotALock as e:
            seen, now = None, str(e).split(";")[0]
        else:
            now = f"{describe(seen)} holds it now" if seen is not None else "its lock file is gone"
        if held_by(seen, self.build_id):
            return
        raise LockLost(f"{LOCK_LOST_MARKER}build {self.build_id} no longer holds the lock of {self.output_dir} "
                       f"(taken over with --break_lock?): {now}; this build stopped without writing anything "
                       "more and was not published")


def release_lock(output_dir: str, build_id: str) -> None:
    """Removes the lock if `build_id` holds it; someone else's lock (or anything else at its path) stays."""
    lock = lock_file(output_dir)
    with contextlib.suppress(NotALock):
        seen = lock.read()
        if held_by(seen, build_id):
            lock.delete(seen.token)
