"""Ctrl-C on a terminal stops a local build quietly in any phase: exit 130, one line, no traceback, and the next
run cleans up and publishes.

A terminal's Ctrl-C is SIGINT to its whole foreground process group, children included. The build runs here in a
session of its own on a pseudo-terminal and gets os.killpg(its group, SIGINT), as from a terminal. Each phase is
recognised from the build's own output and files, never from sleeps, and held with SIGSTOP around the signal
so that it lands there: early (the build has just taken the output folder's lock; the launcher is paused),
while reading (the progress line shows rows read and no image written yet; the launcher is paused), and while
writing (the progress line shows images written; the writer processes are paused, so that the signal lands
while they hold shards).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from shardsmith.format.naming import LOCK_FILE

ROOT = Path(__file__).resolve().parents[3]
PHASE_DEADLINE_S = 240.0
PHASE_ATTEMPTS = 3  # builds started to catch a phase that a loaded machine let slip by
EXIT_DEADLINE_S = 120.0
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _children(pid: int) -> dict[int, str]:
    """The build's child processes and their command lines (from /proc)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent = int(stat.rpartition(")")[2].split()[1])
            if parent == pid:
                found[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
    return found


class _TerminalBuild:
    """A build whose stdin, stdout and stderr are a sized pseudo-terminal, in a session of its own."""

    def __init__(self, args: list[str], env: dict[str, str]):
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))
        self._master = master
        self.output = bytearray()
        # SIGINT as a terminal's foreground job has it: a suite started in the background by a shell without job
        # control (`... &`) runs with SIGINT ignored, which a child would inherit, and Ctrl-C would not reach it.
        self.process = subprocess.Popen([sys.executable, "-m", "pipeline", "build", *args], env=env, cwd=ROOT,
                                        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.close(slave)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._master, 65536)
            except OSError:  # EIO: the build and its children closed the terminal
                return
            if not chunk:
                return
            self.output.extend(chunk)

    def text(self, start: int = 0) -> str:
        return _ANSI.sub("", bytes(self.output[start:]).decode("utf-8", "replace"))

    def wait_for(self, what: str, ready: Callable[[], object]):
        deadline = time.monotonic() + PHASE_DEADLINE_S
        while time.monotonic() < deadline:
            found = ready()
            if found:
                return found
            assert self.process.poll() is None, f"the build ended before {what}:\n{self.text()[-3000:]}"
            time.sleep(0.02)
        raise AssertionError(f"no {what} after {PHASE_DEADLINE_S:.0f} s:\n{self.text()[-3000:]}")

    def children(self, module: str) -> list[int]:
        return [pid for pid, command in _children(self.process.pid).items() if module in command]

    def interrupt(self) -> int:
        """Ctrl-C as a terminal sends it; returns where the output stood."""
        mark = len(self.output)
        os.killpg(self.process.pid, signal.SIGINT)
        return mark

    def finish(self) -> int:
        try:
            code = self.process.wait(timeout=EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running {EXIT_DEADLINE_S:.0f} s after Ctrl-C:\n{self.text()[-3000:]}\n"
                                 f"children: {_children(self.process.pid)}") from None
        finally:
            if self.process.poll() is None:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._reader.join(timeout=10)
        os.close(self._master)
        return code


def _lines_after(text: str) -> list[str]:
    """What a person sees: each line as its last carriage-return redraw left it, blank ones dropped."""
    shown = [line.rstrip("\r").split("\r")[-1].strip() for line in text.split("\n")]
    return [line for line in shown if line]


def _pause(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)


def _resume(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def test_ctrl_c_in_each_phase_exits_130_in_one_line_and_the_rerun_publishes(tmp_path, image_set_factory):
    images = image_set_factory(tmp_path / "data", {label: {"train": 60, "validation": 6, "test": 6}
                                                   for label in ("cat", "dog", "emu")})
    out = tmp_path / "out"
    args = ["--manifest", str(images.manifest), "--output_dir", str(out), "--name", "pets",
            "--num_shards", "train=24,validation=3,test=3", "--writer_processes", "2"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSMITH_", "TF_CPP_"))}
    env["PYTHONPATH"] = str(ROOT)
    env["SHARDSMITH_PROGRESS_INTERVAL"] = "0.1"

    def interrupted(phase: str, signal_when: Callable[[_TerminalBuild], Callable[[], None]]) -> None:
        for _attempt in range(PHASE_ATTEMPTS):
            build = _TerminalBuild(args, env)
            resume = signal_when(build)
            mark = build.interrupt()
            resume()
            code = build.finish()
            if not (code in (0, 130) and (out / "metadata.json").exists()):
                break
            # The build ran through the phase and published before Ctrl-C (which then met it exiting, or not at
            # all): on a loaded machine the progress line the phase waits for can come late, the writing not.
            # Nothing was interrupted mid-phase; start over.
            shutil.rmtree(out)
        else:
            pytest.fail(f"{phase}: the build published before Ctrl-C reached it, {PHASE_ATTEMPTS} times")
        after = build.text(mark)
        assert code == 130, (phase, code, build.text()[-4000:])
        shown = _lines_after(after)
        assert shown and shown[-1] == "shardsmith: interrupted", (phase, after)
        assert len(shown) <= 3, f"{phase}:\n" + "\n".join(shown)  # whole: pytest cuts a long repr
        assert "Traceback" not in build.text() and "Fatal Python error" not in build.text(), (phase, build.text())
        assert not (out / "metadata.json").exists(), phase

    def launcher_paused_once(ready: Callable[[_TerminalBuild], object], what: str):
        def pause_when_ready(build: _TerminalBuild):
            build.wait_for(what, lambda: ready(build))
            _pause([build.process.pid])
            return lambda: _resume([build.process.pid])
        return pause_when_ready

    def while_writing(build: _TerminalBuild):
        # Once the progress line says the build is writing and its writer processes run, they are paused: a
        # build of 216 small images writes them all in less time than a progress line takes to show the first.
        writers = build.wait_for(
            "the writing phase and its writers",
            lambda: "writing:" in build.text() and build.children("shardsmith.shard_writer.shard_worker"))
        _pause(writers)
        return lambda: _resume(writers)

    early = launcher_paused_once(lambda build: (out / LOCK_FILE).exists(), "the output folder's lock")
    while_reading = launcher_paused_once(lambda build: "rows read" in build.text(), "rows read")

    interrupted("early", early)
    interrupted("while reading", while_reading)
    interrupted("while writing", while_writing)

    rerun = subprocess.run([sys.executable, "-m", "pipeline", "build", *args], env=env, cwd=ROOT,
                           capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert (out / "metadata.json").exists()
    assert len(list((out / "builds").iterdir())) == 1, "the interrupted builds' folders were removed"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the drop this test makes
def test_a_ctrl_c_whose_keyboard_interrupt_was_dropped_still_stops_the_build_before_its_pipeline():
    """Python drops an exception raised in a finalizer ("Exception ignored in ..."), a KeyboardInterrupt too; the
    signal itself is remembered, and the build checks it before it starts its pipeline. One command's Ctrl-C is
    not the next one's."""
    import gc

    from pipeline.running.interrupts import Interrupts, raise_if_interrupted

    class RaisesWhenCollected:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # the handler runs here, inside the finalizer, where its exception is dropped

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even if run in `... &`
    try:
        with Interrupts():
            RaisesWhenCollected()
            gc.collect()
            with pytest.raises(KeyboardInterrupt):
                raise_if_interrupted()
        with Interrupts():
            raise_if_interrupted()  # a new command starts without it
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_ctrl_c_while_the_writers_module_is_half_imported_stops_nothing_and_raises_nothing(monkeypatch):
    """The state CI met once: SIGINT's watcher thread found shardsmith.shard_writer.shard_worker in sys.modules before
    the main thread had run its body (so no pool can exist yet), and died with an AttributeError traceback."""
    import types

    from pipeline.running.interrupts import Interrupts

    writer = "shardsmith.shard_writer.shard_worker"
    monkeypatch.setitem(sys.modules, writer, types.ModuleType(writer))
    Interrupts()._stop_children()
