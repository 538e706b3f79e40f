"""A local build's progress on stderr: rows read, images written of the total, images/s and time left; and
the same line for the other long commands (`Task`: compact's records copied, verify's records checked, index's
records indexed, a night's published rows paired), counted into ITEMS_DONE.

Where the numbers come from: the steps that read rows and write images add to counter files in a scratch
folder this module names in SHARDSMITH_PROGRESS_DIR (shardsmith/progress_signal.py), one byte per row or
image; the writer processes inherit the variable. The total is the number of rows placed, known once placement
is done and before any image is read. A watcher thread reads the counters and draws them:

- on a terminal, a live tqdm line redrawn TTY_REFRESH_S apart and removed when the build ends;
- elsewhere (CI, Airflow's task log) a plain line at most NON_TTY_INTERVAL_S apart, and one last line with the
  final counts when the build ends. SHARDSMITH_PROGRESS_INTERVAL (seconds) changes that interval.

Only the local runner is watched (pipeline/cli.py): a remote runner's workers never see the variable, so their
progress is on the job's page. Nothing here reads image bytes or changes what a build writes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from shardsmith import progress_signal as signal

TTY_REFRESH_S = 0.25  # a live line redrawn a few times a second
NON_TTY_INTERVAL_S = 5.0  # plain lines in a log: at most one this often
INTERVAL_ENV = "SHARDSMITH_PROGRESS_INTERVAL"


@dataclass(frozen=True)
class Task:
    """A command other than a build, whose progress is one count of `unit`s `verb` of a total:
    `shardsmith: compact: 1200 of 10000 records copied, 950 records/s, about 9 s left`."""

    command: str
    verb: str
    unit: str = "records"


@dataclass(frozen=True)
class Counts:
    rows_read: int = 0
    written: int = 0
    rejected: int = 0
    total: int = 0  # 0 until the rows are placed (a command: until it knows its items)
    items: int = 0  # a command's items done (0 in a build)
    published_read: int = 0  # an --incremental night: published records whose row lists were read
    published_total: int = 0  # ... of this many (0: not a night)

    @property
    def done(self) -> int:
        done = self.written + self.rejected + self.items
        return min(done, self.total) if self.total else done  # a retried bundle counts twice: clamp

    @classmethod
    def read(cls, folder: str) -> Counts:
        return cls(signal.read(folder, signal.ROWS_READ), signal.read(folder, signal.IMAGES_WRITTEN),
                   signal.read(folder, signal.IMAGES_REJECTED), signal.read(folder, signal.TOTAL),
                   signal.read(folder, signal.ITEMS_DONE), signal.read(folder, signal.PUBLISHED_READ),
                   signal.read(folder, signal.PUBLISHED_TOTAL))

    def published_text(self) -> str:
        """`400000 of 1000000 published rows read`: a night's carry-over, while the row lists are read."""
        read = min(self.published_read, self.published_total)
        return f"{read} of {self.published_total} published rows read" if self.published_total else ""


def plain_line(counts: Counts, rate: float, task: Task | None = None) -> str:
    """`shardsmith: progress: 1200 rows read; 800 of 1200 images written (3 rejected), 95 images/s, about 4 s left`,
    or a `task`'s line."""
    if task is not None:
        text = f"shardsmith: {task.command}: {counts.done}" + (f" of {counts.total}" if counts.total else "")
        text += f" {task.unit} {task.verb}" + (f", {rate:.0f} {task.unit}/s" if rate > 0 else "")
        if counts.total and rate > 0 and counts.done < counts.total:
            text += f", about {_duration((counts.total - counts.done) / rate)} left"
        return text
    text = f"shardsmith: progress: {counts.rows_read} rows read"
    if counts.published_total:
        text += f", {counts.published_text()}"
    if counts.total or counts.done:
        of = f" of {counts.total}" if counts.total else ""
        rejected = f" ({counts.rejected} rejected)" if counts.rejected else ""
        text += f"; {counts.done}{of} images written{rejected}"
        text += f", {rate:.0f} images/s" if rate > 0 else ""
        if counts.total and rate > 0 and counts.done < counts.total:
            text += f", about {_duration((counts.total - counts.done) / rate)} left"
    return text


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    return f"{minutes} min {seconds:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def non_tty_interval() -> float:
    """NON_TTY_INTERVAL_S, or the seconds SHARDSMITH_PROGRESS_INTERVAL gives (tests make it small)."""
    with contextlib.suppress(KeyError, ValueError):
        return max(0.01, float(os.environ[INTERVAL_ENV]))
    return NON_TTY_INTERVAL_S


class _Rate:
    """Images per second since writing was first seen (start-up, reading and placement left out)."""

    def __init__(self):
        self._start: tuple[float, int] | None = None

    def __call__(self, counts: Counts, now: float) -> float:
        done = counts.done
        if self._start is None:
            if done or counts.total:
                self._start = (now, done)
            return 0.0
        start_time, start_done = self._start
        return (done - start_done) / (now - start_time) if now > start_time else 0.0


class _TerminalLine:
    """A tqdm bar of images written, with rows read beside it (a task's: its items)."""

    def __init__(self, stream: TextIO, task: Task | None = None):
        from tqdm import tqdm

        # miniters=1: tqdm's dynamic miniters would skip a redraw whose step is smaller than the last one's.
        desc, unit = (f"shardsmith: {task.command}", f" {task.unit}") if task else ("shardsmith: writing", " images")
        self._task = task
        self._bar = tqdm(total=None, file=stream, unit=unit, desc=desc, leave=False,
                         mininterval=0, miniters=1, dynamic_ncols=True)

    def show(self, counts: Counts) -> None:
        if counts.total and self._bar.total != counts.total:
            self._bar.total = counts.total
        if self._task is None:
            published = f", {counts.published_text()}" if counts.published_total else ""
            self._bar.set_postfix_str(f"{counts.rows_read} rows read{published}", refresh=False)
        self._bar.update(counts.done - self._bar.n)  # redraws: mininterval=0, the watcher paces it

    def above(self, text: str, stream: TextIO) -> None:
        """Writes `text` (whole lines) on `stream`, the same terminal, above the line."""
        with self._bar.get_lock():
            self._bar.clear()
            stream.write(text)
            stream.flush()
            self._bar.refresh()

    def close(self, counts: Counts) -> None:
        self.show(counts)
        self._bar.refresh()  # the final counts, drawn once whatever tqdm's pacing decided
        self._bar.close()  # leave=False: the line is cleared for the summary


class _LogLines:
    def __init__(self, stream: TextIO, interval: float, task: Task | None = None):
        self._task = task
        self._stream = stream
        self._interval = interval
        self._rate = _Rate()
        self._last: tuple[float, Counts] | None = None

    def show(self, counts: Counts) -> None:
        now = time.monotonic()
        rate = self._rate(counts, now)
        if self._last is not None and (now - self._last[0] < self._interval or self._last[1] == counts):
            return
        if self._last is None and counts == Counts():
            return
        self._last = (now, counts)
        print(plain_line(counts, rate, self._task), file=self._stream, flush=True)

    def close(self, counts: Counts) -> None:
        # A command (a task) ends with its own result line; a build's summary follows its last counts.
        if self._task is None and counts != Counts() and (self._last is None or self._last[1] != counts):
            print(plain_line(counts, self._rate(counts, time.monotonic()), self._task), file=self._stream,
                  flush=True)


class Progress:
    """Watches a local build's counters (a `task`'s) while in its with-block and draws them on `stream` (stderr).
    On a terminal, what the command prints on stdout meanwhile (verify's line per shard) goes above the line."""

    def __init__(self, stream: TextIO | None = None, task: Task | None = None, published_total: int = 0):
        self._task = task
        self._published_total = published_total  # an --incremental night: the published records it pairs
        self._given = stream
        self._stream: TextIO = stream or sys.stderr
        self._own_stream: TextIO | None = None
        self._folder = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._view = None
        self._redirect = contextlib.ExitStack()

    def __enter__(self) -> Progress:
        self._folder = tempfile.mkdtemp(prefix="shardsmith-progress-")
        os.environ[signal.PROGRESS_DIR_ENV] = self._folder
        if self._published_total:
            signal.set_total(self._published_total, signal.PUBLISHED_TOTAL)
        if self._given is None:
            self._stream = self._own_stream = _stderr_copy()
        tty = _isatty(self._stream)
        if tty:
            self._view = _TerminalLine(self._stream, self._task)  # draws the line at once
        else:
            self._view = _LogLines(self._stream, non_tty_interval(), self._task)
        try:
            if tty:
                _log_above(self._redirect, self._stream)
                if _isatty(sys.stdout):
                    above = _AboveTheLine(sys.stdout, self._view)
                    self._redirect.callback(above.finish)  # after stdout is restored: a last unended line
                    self._redirect.enter_context(contextlib.redirect_stdout(above))
            pace = TTY_REFRESH_S if tty else min(TTY_REFRESH_S, non_tty_interval())
            self._thread = threading.Thread(target=self._watch, args=(pace,), name="shardsmith-progress",
                                            daemon=True)
            self._thread.start()
        except BaseException:  # a Ctrl-C before the with-block's body: __exit__ will not run; clear the line
            self._close_view()
            raise
        return self

    def _watch(self, pace: float) -> None:
        while not self._stop.wait(pace):
            self._view.show(Counts.read(self._folder))

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._close_view()

    def _close_view(self) -> None:
        """Draws the last counts and clears the live line, then removes what __enter__ set up."""
        if os.environ.get(signal.PROGRESS_DIR_ENV) == self._folder:
            del os.environ[signal.PROGRESS_DIR_ENV]
        self._view.close(Counts.read(self._folder))
        self._redirect.close()
        if self._own_stream is not None and self._own_stream is not sys.stderr:
            self._own_stream.close()
        signal.forget(self._folder)
        shutil.rmtree(self._folder, ignore_errors=True)


@contextlib.contextmanager
def task_progress(task: Task, total: int | None = None, local: bool = True):
    """A command's progress line while in the with-block (nothing for a remote job, whose page shows it); `total`
    when the launcher knows it (the command may set it itself: signal.set_total)."""
    if not local:
        yield
        return
    with Progress(task=task):
        if total is not None:
            signal.set_total(total)
        yield


def _log_above(stack: contextlib.ExitStack, stream: TextIO) -> None:
    """Log lines print above the live line (tqdm clears it, writes the line, redraws it) on the line's stream."""
    from tqdm.contrib.logging import _TqdmLoggingHandler, logging_redirect_tqdm

    stack.enter_context(logging_redirect_tqdm())
    for handler in logging.getLogger().handlers:
        if isinstance(handler, _TqdmLoggingHandler):
            handler.stream = stream


class _AboveTheLine:
    """stdout while a live line is drawn on the same terminal: whole lines are written above it (the line is
    cleared, they are written, it is drawn again), so the command's own output and the line never share a row."""

    def __init__(self, stream: TextIO, line: _TerminalLine):
        self._stream = stream
        self._line = line
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            lines, self._pending = self._pending.rsplit("\n", 1)
            self._line.above(lines + "\n", self._stream)
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def finish(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _stderr_copy() -> TextIO:
    """stderr on a file descriptor of its own: the quiet TensorFlow import (shardsmith/tensorflow_import.py)
    points descriptor 2 at a temporary file while TensorFlow loads, which may happen mid-build; the progress
    line must neither land in it nor glue itself to the load-time lines that import filters out."""
    sys.stderr.flush()
    try:
        copy = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1, encoding="utf-8", errors="replace")
    except (AttributeError, OSError, ValueError):  # a stderr without a descriptor (captured by a test)
        return sys.stderr
    return _LateWritesDropped(copy)


class _LateWritesDropped:
    """A stream that drops what is written to it once it is closed, instead of raising: a runner's thread may
    still log a line (through tqdm's handler, which then also clears the live line) after a Ctrl-C closed the
    progress line's stream, and logging would print that ValueError's traceback under "interrupted"."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except ValueError:  # closed
            return 0

    def flush(self) -> None:
        with contextlib.suppress(ValueError):
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def _isatty(stream: TextIO) -> bool:
    """A terminal a live line can be drawn on: one that says it is a terminal and, if it has a size, is not 0
    columns wide (a pseudo-terminal no one sized, as under `script` in CI)."""
    try:
        if not stream.isatty():
            return False
    except (AttributeError, ValueError):
        return False
    try:
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):  # no file descriptor (a test's stream): trust isatty()
        return True
