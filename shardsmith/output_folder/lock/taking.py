"""Taking the folder's lock: `acquire_lock`, and `lock_for_command`, the one way every command takes it.

Guarantees: the lock is created only where none is, and another's is taken over only on condition of the lock as
read, so of two builds taking it at once one wins. A lock is taken over at once when its holder is proven gone
(shardsmith/output_folder/lock/holder.py) or it is unreadable and no process holds it; a holder alive on this host
never, --break_lock or not; any other only with --break_lock once its heartbeat is older than LOCK_STALE_AFTER_S.
Every refusal is one line naming the holder and what to do.
"""

from __future__ import annotations

import logging
import time

from shardsmith.output_folder.lock.heartbeat import BuildLock
from shardsmith.output_folder.lock.holder import LockHeld, LockHolder, Seen, describe, held_by
from shardsmith.output_folder.lock.lock_files import lock_file

# A heartbeat older than this means the holder stopped refreshing it (lost machine, killed launcher).
LOCK_STALE_AFTER_S = 600
# How long an unreadable lock that a live process holds is waited for: its creator writes it within microseconds.
UNREADABLE_WAIT_S = 2.0
_LOG = logging.getLogger("shardsmith")


def _settled(lock, seen: Seen) -> tuple[Seen | None, bool | None]:
    """For an unreadable lock: waits up to UNREADABLE_WAIT_S while a live process holds it (its creator still
    writing it). Returns the lock as last read and, if it is still unreadable, whether no process holds it
    (None: this file system cannot tell)."""
    deadline = time.monotonic() + UNREADABLE_WAIT_S
    while True:
        unheld = lock.unheld(seen.token)
        if unheld is not False or time.monotonic() > deadline:
            return seen, unheld
        time.sleep(0.05)
        seen = lock.read()
        if seen is None or LockHolder.from_json(seen.data) is not None:
            return seen, None


def _refusal(output_dir: str, seen: Seen, holder: LockHolder | None, unheld: bool | None,
             break_lock: bool) -> str | None:
    """Why the lock `seen` may not be taken over (one line), or None when it may."""
    if holder is None:
        if unheld or (unheld is None and seen.age_s > UNREADABLE_WAIT_S):
            return None
        held = "a live process holds it" if unheld is False else "it was written a moment ago"
        return f"{output_dir} is locked: its lock file is unreadable and {held}; wait for it to finish"
    if holder.is_gone():
        return None
    if holder.is_alive_here():
        return (f"{output_dir} is being built by {describe(seen)}; its process is alive on this host (running, "
                "stopped or hung): wait for it to finish or end it; --break_lock never takes a live build's lock")
    if seen.age_s <= LOCK_STALE_AFTER_S:
        return (f"{output_dir} is being built by {describe(seen)}; wait for it to finish; --break_lock takes over "
                f"a lock idle for over {LOCK_STALE_AFTER_S} s")
    if break_lock:
        return None
    return f"{output_dir} is being built by {describe(seen)}; pass --break_lock to take it over"


def acquire_lock(output_dir: str, build_id: str, break_lock: bool = False) -> BuildLock:
    """Takes the folder's lock for `build_id` or raises LockHeld naming the holder (NotALock for a symbolic
    link at its path). Never takes the lock of a process alive on this host."""
    lock = lock_file(output_dir)
    mine = LockHolder.this_process(build_id).to_json()
    for _ in range(3):  # a holder may release or another taker may win between our read and our write
        seen = lock.read()  # first, so a store that ignores preconditions (the emulator) still sees a holder
        if seen is None:
            if lock.create(mine) and held_by(lock.read(), build_id):
                return BuildLock(output_dir, build_id, lock)
            continue
        holder = LockHolder.from_json(seen.data)
        unheld = None
        if holder is None:
            seen, unheld = _settled(lock, seen)
            if seen is None or (holder := LockHolder.from_json(seen.data)) is not None:
                continue  # released, or written meanwhile: judge it afresh
        refusal = _refusal(output_dir, seen, holder, unheld, break_lock)
        if refusal:
            raise LockHeld(refusal)
        why = ("its lock file is unreadable and no process holds it" if holder is None else
               "its process is gone" if holder.is_gone() else f"--break_lock: {describe(seen)}")
        _LOG.warning("taking over the lock of %s (%s)", output_dir, why)
        if lock.take_over(seen.token, mine) and held_by(lock.read(), build_id):
            return BuildLock(output_dir, build_id, lock)
    lock.close()
    raise LockHeld(f"{output_dir}: another build took the lock at the same moment; try again")


def lock_for_command(output_dir: str, build_id: str, *, break_lock: bool = False, then: str = "") -> BuildLock:
    """The folder's lock for a command (a build, a compaction, `index`, a tag or card written), taken as
    `acquire_lock` takes it; UsageError in the one wording every command uses while another holds it (with `then`:
    which command to run again once it is free) or the folder cannot be written."""
    from shardsmith.errors import UsageError

    try:
        return acquire_lock(output_dir, build_id, break_lock)
    except LockHeld as e:
        raise UsageError(f"{e} (then run {then} again)" if then else str(e)) from None
    except OSError as e:
        raise UsageError(not_writable(output_dir, e)) from None


def not_writable(output_dir: str, error: OSError) -> str:
    """The line a command says for an output folder it cannot write."""
    return f"output folder {output_dir} is not writable: {str(error).splitlines()[0]}"
