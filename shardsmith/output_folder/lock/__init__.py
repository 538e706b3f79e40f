"""One build at a time per output folder: a lock object created atomically at the folder's top level.

The lock holds the build id, host, process and start time; its modification time is the heartbeat, refreshed
every LOCK_HEARTBEAT_S by the launcher while the job runs. A second build finds it and stops (exit 2) naming
the holder. A holder is known to be gone when it ran on this host and its process no longer exists; then the
lock is taken over at once (a scheduler's re-run after a kill -9). A holder on this host whose process is
alive (running, stopped or hung) is never taken over, --break_lock or not. Any other lock is taken over only
with --break_lock and only once its heartbeat is older than LOCK_STALE_AFTER_S. A build checks that it still
holds the lock (`LockGuard.check`) before each shard, before transform_fn, errors.jsonl and labels.txt, and
before it publishes: a build whose lock was broken writes nothing more (its folder, removed by the new
holder, is never recreated) and stops with LockLost.

A lock that cannot be parsed (empty: its writer died between creating and writing it) is taken over at once
when no process holds it: locally a live holder keeps an flock on its lock file from the instant it creates it
(and a creator still writing is waited for, up to UNREADABLE_WAIT_S); on Cloud Storage and S3 a lock object
is written whole or not at all, so no live build's lock is ever unreadable. A symbolic link (or anything but a
plain file) at the lock's path is not a lock shardsmith wrote: it is refused (NotALock) and never followed,
written through or deleted.

Atomicity: locally, O_CREAT|O_EXCL; on Cloud Storage, `if_generation_match=0` to create and the generation
read to refresh, take over or delete (gcp-storage-emulator ignores generation preconditions, so on it only
the read-then-create check holds); on S3, PutObject with `If-None-Match: *` to create and `If-Match` on the
ETag read to refresh (each heartbeat writes new bytes, so a new ETag), take over or delete
(shardsmith/storage/object_generations.py). A Dataflow retry of a bundle belongs to the same build id: the
same holder.

The modules, by concern:
- holder: the lock's record (`LockHolder`: who holds it, its JSON) and whether this host can prove its process
  gone or alive; the lock as read (`Seen`) and whose it is.
- lock_files: the lock on each kind of storage, created, refreshed, taken over and deleted atomically.
- guard: `LockGuard`, the check a build makes before each write, and `release_lock`.
- taking: `acquire_lock` (when a lock may be taken over, and the refusal's line) and `lock_for_command`.
- heartbeat: `BuildLock`, a held lock refreshed until it is released.
"""

from shardsmith.output_folder.lock.guard import LOCK_LOST_MARKER, LockGuard, LockLost, release_lock
from shardsmith.output_folder.lock.heartbeat import LOCK_HEARTBEAT_S, BuildLock
from shardsmith.output_folder.lock.holder import LockHeld, LockHolder, NotALock
from shardsmith.output_folder.lock.taking import (
    LOCK_STALE_AFTER_S,
    UNREADABLE_WAIT_S,
    acquire_lock,
    lock_for_command,
    not_writable,
)

__all__ = [
    "LOCK_HEARTBEAT_S", "LOCK_LOST_MARKER", "LOCK_STALE_AFTER_S", "UNREADABLE_WAIT_S", "BuildLock", "LockGuard",
    "LockHeld", "LockHolder", "LockLost", "NotALock", "acquire_lock", "lock_for_command", "not_writable",
    "release_lock",
]
