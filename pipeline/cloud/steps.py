"""Runs a command's steps (argv lists) one after the other, or prints them (--dry-run).

Guarantees: a dry run prints each step on one line of stdout, its words as a POSIX shell reads them back
(`shlex.split` gives the argv again), and runs nothing. A real run logs each step to stderr before it starts,
stops at the first that fails and returns that step's exit status (128+N for a step killed by signal N, 127 for
a program that is not installed); a Ctrl-C reaches the running step, which decides how to stop.
Checks (commands.Check) run before any step, their output captured, each with a deadline; a failed one is one
line naming the problem and what the check said.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pipeline.cloud.commands import Check

CHECK_TIMEOUT_S = 60.0
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


def failed_check(checks: list[Check]) -> str | None:
    """The problem of the first check that fails (with the first line it printed on stderr), else None."""
    for check in checks:
        try:
            done = subprocess.run(check.argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S)
        except FileNotFoundError:
            return f"{check.argv[0]}: command not found ({check.problem})"
        except subprocess.TimeoutExpired:
            return f"{check.problem} (`{show(check.argv)}` gave no answer in {CHECK_TIMEOUT_S:.0f} s)"
        if done.returncode or (check.needs_output and not done.stdout.strip()):
            said = next((line.strip() for line in done.stderr.splitlines() if line.strip()), "")
            return check.problem + (f" ({check.argv[0]} said: {said})" if done.returncode and said else "")
    return None
