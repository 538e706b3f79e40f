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
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import socket
import stat
import threading
import time
from dataclasses import asdict, dataclass, fields

from shardsmith.format.naming import LOCK_FILE
from shardsmith.storage import is_remote, join
from shardsmith.storage.object_generations import versioned_object

LOCK_HEARTBEAT_S = 30
# A heartbeat older than this means the holder stopped refreshing it (lost machine, killed launcher).
LOCK_STALE_AFTER_S = 600
# How long an unreadable lock that a live process holds is waited for: its creator writes it within microseconds.
UNREADABLE_WAIT_S = 2.0
# Starts the one-line error of a build whose lock was taken over (pipeline/cli.py prints it as it is).
LOCK_LOST_MARKER = "shardsmith: lock lost: "
_LOG = logging.getLogger("shardsmith")


class LockHeld(Exception):
    """Another build holds the folder; the message says which, since when, and what to do."""


class NotALock(LockHeld):
    """Something other than a plain file shardsmith wrote is at the lock's path (a symbolic link): left alone."""


class LockLost(RuntimeError):
    """This build's lock was taken over: it must write nothing more. The message, one line, says who holds it."""


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
class _Seen:
    data: bytes
    age_s: float
    token: object  # what a conditional refresh, take-over or delete needs: the content (local), the generation
    # (gs://) or the ETag (s3://)


class _LocalLock:
    """The lock file, never followed through a symbolic link. The holder keeps an flock on the file it created
    (`held_fd`, closed by `close`), so a file a crash left unreadable can be told from one being written."""

    def __init__(self, path: str):
        self.path = path
        self.held_fd: int | None = None

    def _open(self) -> int | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise NotALock(_not_a_lock(self.path, "a symbolic link")) from None
            raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise NotALock(_not_a_lock(self.path, "not a plain file"))
        return fd

    def read(self) -> _Seen | None:
        fd = self._open()
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read()
            return _Seen(data, time.time() - os.fstat(f.fileno()).st_mtime, data)

    def unheld(self, token) -> bool | None:
        """Whether no process holds the (unreadable) lock `token`: True, False, or None where this file system
        has no flock."""
        fd = self._open()
        if fd is None:
            return False  # gone meanwhile: the caller reads it again
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError:
            return None
        finally:
            os.close(fd)
        return self._still(token)

    def create(self, data: bytes) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o644)
        except FileExistsError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another process took this empty file for a dead creator's: it wins
            os.close(fd)
            return False
        except OSError:
            pass  # no flock here: an unreadable lock is then judged by its age alone
        try:
            os.write(fd, data)
        except BaseException:
            os.close(fd)  # an empty lock no process holds: the next build takes it over at once
            raise
        self.close()
        self.held_fd = fd
        return True

    def close(self) -> None:
        if self.held_fd is not None:
            os.close(self.held_fd)
            self.held_fd = None

    def _still(self, token) -> bool:
        seen = self.read()
        return seen is not None and seen.token == token

    def refresh(self, token) -> bool:
        if not self._still(token):
            return False
        os.utime(self.path, follow_symlinks=False)
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


def _not_a_lock(path: str, what: str) -> str:
    return (f"{path} is {what}, not a lock shardsmith wrote; it is left as it is (never followed or removed): "
            "remove it yourself or choose another --output_dir")


class _ObjectLock:
    """The lock on an object store: one object, changed only on condition of the version last read (its generation
    on gs://, its ETag on s3://)."""

    def __init__(self, path: str):
        self._object = versioned_object(path)

    def read(self) -> _Seen | None:
        version = self._object.read()
        return None if version is None else _Seen(version.data, version.age_s, version.token)

    def create(self, data: bytes) -> bool:
        return self._object.write_if(data, 0)

    def refresh(self, token) -> bool:
        """Rewrites the lock with a new heartbeat time, on condition of `token`: new bytes each beat, so that on
        s3:// (where the token is the content's ETag) a take-over read before a beat fails after it, as it does on
        gs:// (where every write is a new generation)."""
        seen = self.read()
        return seen is not None and seen.token == token and self._object.write_if(_beat(seen.data), token)

    def take_over(self, token, data: bytes) -> bool:
        return self._object.write_if(data, token)

    def unheld(self, token) -> bool:
        return True  # an object is written whole or not at all: no live build's lock is ever unreadable

    def close(self) -> None:
        pass

    def delete(self, token) -> None:
        self._object.delete_if(token)


def _beat(data: bytes) -> bytes:
    """The lock's JSON with its `heartbeat` (the time, to the microsecond) set to now; unparsable bytes as they
    are (readers ignore the field: LockHolder.from_json)."""
    try:
        values = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return data
    if not isinstance(values, dict):
        return data
    values["heartbeat"] = f"{time.time():.6f}"
    return (json.dumps(values, indent=2) + "\n").encode("utf-8")


def _lock_file(output_dir: str):
    path = join(output_dir, LOCK_FILE)
    return _ObjectLock(path) if is_remote(path) else _LocalLock(path)


def _held_by(seen: _Seen | None, build_id: str) -> bool:
    if seen is None:
        return False
    holder = LockHolder.from_json(seen.data)
    return holder is not None and holder.build_id == build_id


@dataclass(frozen=True)
class LockGuard:
    """Picklable: what a step that writes into a build's folder needs to check, first, that the build still
    holds the output folder's lock."""

    output_dir: str
    build_id: str

    def check(self) -> None:
        """Returns if the build still holds the lock; else raises LockLost, naming the holder now."""
        try:
            seen = _lock_file(self.output_dir).read()
        except NotALock as e:
            seen, now = None, str(e).split(";")[0]
        else:
            now = f"{_describe(seen)} holds it now" if seen is not None else "its lock file is gone"
        if _held_by(seen, self.build_id):
            return
        raise LockLost(f"{LOCK_LOST_MARKER}build {self.build_id} no longer holds the lock of {self.output_dir} "
                       f"(taken over with --break_lock?): {now}; this build stopped without writing anything "
                       "more and was not published")


def release_lock(output_dir: str, build_id: str) -> None:
    """Removes the lock if `build_id` holds it; someone else's lock (or anything else at its path) stays."""
    lock = _lock_file(output_dir)
    with contextlib.suppress(NotALock):
        seen = lock.read()
        if _held_by(seen, build_id):
            lock.delete(seen.token)


def _describe(seen: _Seen) -> str:
    holder = LockHolder.from_json(seen.data)
    who = (f"build {holder.build_id} (process {holder.pid} on {holder.host}, started {holder.started})"
           if holder else "a build whose lock file is unreadable")
    return f"{who}; last heartbeat {seen.age_s:.0f} s ago"


def _settled(lock, seen: _Seen) -> tuple[_Seen | None, bool | None]:
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


def _refusal(output_dir: str, seen: _Seen, holder: LockHolder | None, unheld: bool | None,
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
        return (f"{output_dir} is being built by {_describe(seen)}; its process is alive on this host (running, "
                "stopped or hung): wait for it to finish or end it; --break_lock never takes a live build's lock")
    if seen.age_s <= LOCK_STALE_AFTER_S:
        return (f"{output_dir} is being built by {_describe(seen)}; wait for it to finish; --break_lock takes over "
                f"a lock idle for over {LOCK_STALE_AFTER_S} s")
    if break_lock:
        return None
    return f"{output_dir} is being built by {_describe(seen)}; pass --break_lock to take it over"


def acquire_lock(output_dir: str, build_id: str, break_lock: bool = False) -> BuildLock:
    """Takes the folder's lock for `build_id` or raises LockHeld naming the holder (NotALock for a symbolic
    link at its path). Never takes the lock of a process alive on this host."""
    lock = _lock_file(output_dir)
    mine = LockHolder.this_process(build_id).to_json()
    for _ in range(3):  # a holder may release or another taker may win between our read and our write
        seen = lock.read()  # first, so a store that ignores preconditions (the emulator) still sees a holder
        if seen is None:
            if lock.create(mine) and _held_by(lock.read(), build_id):
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
               "its process is gone" if holder.is_gone() else f"--break_lock: {_describe(seen)}")
        _LOG.warning("taking over the lock of %s (%s)", output_dir, why)
        if lock.take_over(seen.token, mine) and _held_by(lock.read(), build_id):
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
        lock = _lock_file(self.output_dir)
        while not self._stop.wait(every_s):
            try:
                seen = lock.read()
                if seen is None:  # released: the publish step removes the lock as its last act (a lock removed
                    return        # by anything else fails the build at its next lock check, with its own line)
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
        if self._lock_file is not None:
            self._lock_file.close()
