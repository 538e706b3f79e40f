"""Runs a command's steps (argv lists) one after the other, or prints them (--dry-run).

Guarantees: a dry run prints each step on one line of stdout, its words as a POSIX shell reads them back
(`shlex.split` gives the argv again), and runs nothing. A real run logs each step to stderr before it starts,
stops at the first that fails and returns that step's exit status (128+N for a step killed by signal N, 127 for
a program that is not installed); a Ctrl-C reaches the running step, which decides how to stop.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import TextIO

_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./^-]+")


def show(words: list[str]) -> str:
    """The words as one shell line: plain, or in single quotes when a shell would read them otherwise."""
    return " ".join(word if _PLAIN.fullmatch(word) else "'" + word.replace("'", "'\\''") + "'" for word in words)


def _wait(process: subprocess.Popen) -> int:
    while True:
        try:
            status = process.wait()
        except KeyboardInterrupt:
            continue  # the step got the same Ctrl-C; its own exit status tells how it went
        return 128 - status if status < 0 else status


def run_steps(steps: list[list[str]], prog: str, dry_run: bool, out: TextIO | None = None) -> int:
    """Prints (dry run) or runs `steps`; the exit status of the command."""
    out = out or sys.stdout
    for step in steps:
        if dry_run:
            print(show(step), file=out)
            continue
        print(f"{prog}: {show(step)}", file=sys.stderr, flush=True)
        try:
            process = subprocess.Popen(step)
        except FileNotFoundError:
            print(f"{prog}: {step[0]}: command not found", file=sys.stderr)
            return 127
        status = _wait(process)
        if status:
            return status
    return 0
