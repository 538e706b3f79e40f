"""Fixtures of the running tests: a command run with its stderr (and stdout, unless piped) on a real, sized
pseudo-terminal, read to its end on a thread, with a deadline on every wait."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TERMINAL_DEADLINE_S = 300  # a command on the terminal ends within this, or the test fails saying so


@dataclass
class TerminalRun:
    returncode: int
    terminal: str  # everything drawn on the terminal, as text
    stdout: str  # the command's stdout, when it was a pipe


@pytest.fixture
def on_terminal() -> Callable[..., TerminalRun]:
    """on_terminal(args, env, pipe_stdout=False): runs `python -m pipeline ARGS` from the repository root with
    stderr on a 40x150 pseudo-terminal (stdout too, unless `pipe_stdout`), and returns what it drew."""
    import fcntl
    import pty
    import struct
    import termios

    def run(args: list[str], env: dict[str, str], pipe_stdout: bool = False) -> TerminalRun:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 150, 0, 0))
        drawn = bytearray()

        def read_all() -> None:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    return
                if not chunk:
                    return
                drawn.extend(chunk)

        reader = threading.Thread(target=read_all, daemon=True)
        reader.start()
        try:
            with subprocess.Popen([sys.executable, "-m", "pipeline", *args], env=env, cwd=ROOT,
                                  stdout=subprocess.PIPE if pipe_stdout else slave, stderr=slave, text=True) as command:
                os.close(slave)
                try:
                    out, _ = command.communicate(timeout=TERMINAL_DEADLINE_S)
                except subprocess.TimeoutExpired:
                    command.kill()
                    pytest.fail(f"`shardsmith {' '.join(args)}` on a terminal did not end within "
                                f"{TERMINAL_DEADLINE_S} s")
            reader.join(timeout=30)
            assert not reader.is_alive(), "the terminal was still open 30 s after the command ended"
        finally:
            os.close(master)
        return TerminalRun(command.returncode, drawn.decode("utf-8", "replace"), out or "")

    return run
