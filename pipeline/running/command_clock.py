"""When the running command started, for the time a build's summary reports: the process's start for
`shardsmith ...` (interpreter start-up and imports are part of the wait), the call of `main()` when a program
calls it. pipeline/cli.py sets it for the time of a command; None outside one."""

from __future__ import annotations

import os
import time

_started: float | None = None


def command_started() -> float | None:
    """time.monotonic() when the running command started; None outside `main()`."""
    return _started


def set_command_started(started: float | None) -> None:
    """Sets (or, with None, clears) when the running command started."""
    global _started
    _started = started


def process_age_s() -> float:
    """Seconds since this process started (Linux's /proc/self/stat, in clock ticks since boot); 0.0 where that
    cannot be read."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rpartition(")")[2].split()  # the command name before ")" may hold spaces
        started_s = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime
        return max(0.0, time.clock_gettime(time.CLOCK_BOOTTIME) - started_s)
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
