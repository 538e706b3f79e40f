"""Progress counters a local build's launcher can watch (pipeline/running/progress.py draws them), with no display here.

When the launcher sets SHARDSMITH_PROGRESS_DIR, the steps that read rows and write images append one byte per
row or image to a counter file in that folder (opened O_APPEND, so writes from the launcher, the shard writer
processes and Beam's local workers never interleave badly), and the placement writes the number of rows placed.
A counter's value is its file's size. Unset, as on every remote worker, each call is one environment lookup.

Guarantees: nothing here touches the dataset, its bytes or its files; a failed write is ignored. Counters are
advisory: a retried bundle counts its rows again, so a reader clamps them at the total.
"""

from __future__ import annotations

import contextlib
import os

PROGRESS_DIR_ENV = "SHARDSMITH_PROGRESS_DIR"
ROWS_READ = "rows_read"
IMAGES_WRITTEN = "images_written"
IMAGES_REJECTED = "images_rejected"
TOTAL = "total"  # rows placed, to be written: a decimal number, written once (a command: its items to do)
ITEMS_DONE = "items_done"  # a command other than a build (compact, verify, index): the records it has done
PUBLISHED_READ = "published_read"  # an --incremental night: the published version's records whose row lists were read
PUBLISHED_TOTAL = "published_total"  # ... of this many: a decimal number, written once
# A shard writer adds to images_written once per this many images (and once at the shard's end): a write per
# image cost as much as framing the record.
IMAGES_PER_PROGRESS_WRITE = 32
_ONE = b"\x01"

_open: dict[str, int] = {}  # counter path -> file descriptor, per process


def _path(counter: str) -> str | None:
    folder = os.environ.get(PROGRESS_DIR_ENV)
    return os.path.join(folder, counter) if folder else None


def add(counter: str, n: int = 1) -> None:
    """Adds `n` to `counter` if a launcher is watching."""
    path = _path(counter)
    if path is None or n <= 0:
        return
    with contextlib.suppress(OSError):
        fd = _open.get(path)
        if fd is None:
            fd = _open[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.write(fd, _ONE * n)


class Tally:
    """Counts into `counter` in steps of `every`; `flush` adds what is left (call it where the work ends)."""

    def __init__(self, counter: str, every: int = IMAGES_PER_PROGRESS_WRITE):
        self._counter = counter
        self._every = every
        self._pending = 0

    def add(self) -> None:
        self._pending += 1
        if self._pending >= self._every:
            self.flush()

    def flush(self) -> None:
        add(self._counter, self._pending)
        self._pending = 0


def set_total(total: int, counter: str = TOTAL) -> None:
    """Records the number of rows placed (images to write), or a command's items to do (or, as PUBLISHED_TOTAL,
    a night's published records); the same value on every retry."""
    path = _path(counter)
    if path is None:
        return
    with contextlib.suppress(OSError):
        temp = f"{path}.{os.getpid()}"
        with open(temp, "w") as f:
            f.write(str(int(total)))
        os.replace(temp, path)


def read(folder: str, counter: str) -> int:
    """A counter's value (0 before anything was counted)."""
    path = os.path.join(folder, counter)
    try:
        if counter in (TOTAL, PUBLISHED_TOTAL):
            with open(path) as f:
                return int(f.read() or 0)
        return os.path.getsize(path)
    except (OSError, ValueError):
        return 0


def forget(folder: str) -> None:
    """Closes this process's files in `folder` (the launcher, when it stops watching)."""
    for path in [p for p in _open if os.path.dirname(p) == folder]:
        with contextlib.suppress(OSError):
            os.close(_open.pop(path))
