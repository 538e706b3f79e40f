"""The lock on each kind of storage: read, created, refreshed, taken over and deleted, each change made only on
condition of the lock as last read.

Guarantees: locally, the lock file is created with O_CREAT|O_EXCL, its creator keeps an flock on it for as long as
it holds it (so a file a crash left unreadable can be told from one being written), and it is never followed
through a symbolic link, written through or removed when it is not a plain file (NotALock). On Cloud Storage and
S3 the lock is one object, created only where none is and changed only on condition of the version read (its
generation on gs://, its ETag on s3://; shardsmith/storage/object_generations.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time

from shardsmith.format.naming import LOCK_FILE
from shardsmith.output_folder.lock.holder import NotALock, Seen
from shardsmith.storage import is_remote, join
from shardsmith.storage.object_generations import versioned_object


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

    def read(self) -> Seen | None:
        fd = self._open()
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            data = f.read()
            return Seen(data, time.time() - os.fstat(f.fileno()).st_mtime, data)

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

    def read(self) -> Seen | None:
        version = self._object.read()
        return None if version is None else Seen(version.data, version.age_s, version.token)

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


def lock_file(output_dir: str) -> _LocalLock | _ObjectLock:
    """The lock of the output folder `output_dir`, on its kind of storage."""
    path = join(output_dir, LOCK_FILE)
    return _ObjectLock(path) if is_remote(path) else _LocalLock(path)
