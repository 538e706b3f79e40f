"""Ctrl-C on a terminal: one line and exit 130 in any phase of a build (pipeline/cli.py `main` uses it).

A terminal sends SIGINT to its whole foreground process group. The shard writers start in
process groups of their own, so only the launcher gets it; this module stops them (they are killed: a
shard they were writing stays a temporary file in the unfinished build's folder, which the next run removes).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

# Set once SIGINT reached this process (by the watcher thread, which wakes on every signal): a KeyboardInterrupt
# raised where Python cannot pass it on (a finalizer, a C callback) is printed and dropped, never raised again.
_SEEN = threading.Event()


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if a Ctrl-C reached this process earlier, whether or not its KeyboardInterrupt arrived:
    called before a build starts its pipeline, so a seen Ctrl-C never lets a build run on and publish."""
    if _SEEN.is_set():
        raise KeyboardInterrupt


class Interrupts:
    """Ctrl-C during a command. The build's child processes (the shard writers) are in process groups of
    their own, so a terminal's SIGINT reaches only this process, which stops them at once: from the thread that
    wakes on the signal (the kernel may deliver it to any thread, leaving the main thread blocked on a child's
    reply until it answers), and again in Python's handler, which then raises KeyboardInterrupt as usual. The
    interrupt is remembered: Beam turns a KeyboardInterrupt inside a step into a RuntimeError naming it.
    Installed only over Python's default handler, from the main thread (never over a notebook's)."""

    def __init__(self):
        self.seen = False
        self._installed = False
        self._wakeup: tuple[int, int] | None = None
        self._previous_wakeup_fd = -1
        self._watcher: threading.Thread | None = None

    def __enter__(self) -> Interrupts:
        _SEEN.clear()  # one command's Ctrl-C is not the next one's (a process may run several: tests, notebooks)
        if (threading.current_thread() is not threading.main_thread()
                or signal.getsignal(signal.SIGINT) is not signal.default_int_handler):
            return self
        signal.signal(signal.SIGINT, self._on_interrupt)
        self._installed = True
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        self._wakeup = (read_end, write_end)
        self._previous_wakeup_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        self._watcher = threading.Thread(target=self._watch, args=(read_end,), name="shardsmith-interrupts",
                                         daemon=True)
        self._watcher.start()
        return self

    def _watch(self, read_end: int) -> None:
        while True:
            try:
                received = os.read(read_end, 64)
            except OSError:  # closed by __exit__: the build is ending anyway
                return
            if not received or 0 in received:  # 0: __exit__'s stop
                return
            if signal.SIGINT in received:
                self._stop_children()

    def _stop_children(self) -> None:
        self.seen = True
        _SEEN.set()
        # The module may be in sys.modules half imported (a Ctrl-C while the build imports it): no pool exists yet.
        kill_all_writers = getattr(sys.modules.get("shardsmith.shard_writer.shard_worker"), "kill_all_writers", None)
        if kill_all_writers is not None:
            kill_all_writers()

    def _on_interrupt(self, signum, frame) -> None:
        self._stop_children()
        raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if not self._installed:
            return
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.set_wakeup_fd(self._previous_wakeup_fd)
        read_end, write_end = self._wakeup
        with contextlib.suppress(OSError):
            os.write(write_end, b"\0")
        self._watcher.join(timeout=5)
        if self._watcher.is_alive():  # still stopping writers on a loaded machine: never pull its descriptor away
            return  # (a number closed now could be reused by a file the thread would then read); the process ends
        os.close(write_end)
        os.close(read_end)
