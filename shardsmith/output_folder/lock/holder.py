"""The lock's record: who holds it (`LockHolder`: build id, host, process and its start time, when it started),
written as JSON, and the lock as last read (`Seen`: its bytes, its heartbeat's age, its version).

Guarantee: a holder is called gone only when this host can prove its process ended (it ran here and its pid is
free, or now names a process started at another time); a holder on another host is never called gone. A record
that cannot be parsed (cut short by a kill while it was written) reads as no holder, never as someone else's.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, fields


class LockHeld(Exception):
    """Another build holds the folder; the message says which, since when, and what to do."""


class NotALock(LockHeld):
    """Something other than a plain file shardsmith wrote is at the lock's path (a symbolic link): left alone."""


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
        """The holder, or None for a lock cut short by a kill while it was being written (fields a later
        version adds are ignored)."""
        try:
            values = json.loads(data.decode("utf-8"))
            return cls(**{f.name: values[f.name] for f in fields(cls)})
        except (ValueError, TypeError, KeyError, UnicodeDecodeError):
            return None

    def is_alive_here(self) -> bool:
        """True when the holder ran on this host and its process still exists (running, stopped or hung)."""
        return self.host == socket.gethostname() and not self.is_gone()

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
class Seen:
    """The lock as read from its storage (shardsmith/output_folder/lock/lock_files.py)."""

    data: bytes
    age_s: float
    token: object  # what a conditional refresh, take-over or delete needs: the content (local), the generation
    # (gs://) or the ETag (s3://)


def held_by(seen: Seen | None, build_id: str) -> bool:
    """Whether the lock as read is `build_id`'s."""
    if seen is None:
        return False
    holder = LockHolder.from_json(seen.data)
    return holder is not None and holder.build_id == build_id


def describe(seen: Seen) -> str:
    """Who holds the lock as read and when it last beat, as the lock's messages name them."""
    holder = LockHolder.from_json(seen.data)
    who = (f"build {holder.build_id} (process {holder.pid} on {holder.host}, started {holder.started})"
           if holder else "a build whose lock file is unreadable")
    return f"{who}; last heartbeat {seen.age_s:.0f} s ago"
