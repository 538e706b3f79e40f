"""Fault injection for the kill-and-retry tests: `SHARDSMITH_FAULT=<point>[:<n>]` makes the process kill itself
with SIGKILL at a named point, as a machine loss or an OOM kill would. Unset (always, outside tests), every
call here is a no-op.

Points: `mid_shard:N` (N records into a shard's temporary file), `after_shards:N` (after N shards are renamed
into place in this process), `before_metadata` (after errors.jsonl and labels.txt, before metadata.json),
`before_switch` (the build's own metadata.json written, the top-level one staged, not yet renamed into place).
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "SHARDSMITH_FAULT"
# Set by the shard writer pool in its workers: the process to kill first, so a fault takes the whole build down.
FAULT_ALSO_KILL_ENV = "SHARDSMITH_FAULT_ALSO_KILL"
_counts: dict[str, int] = {}


def _configured() -> tuple[str, int] | None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return None
    point, _, count = spec.partition(":")
    return point, int(count or 1)


def reached(point: str) -> None:
    """Counts one arrival at `point`; kills the process when the configured count is reached."""
    configured = _configured()
    if configured is None or configured[0] != point:
        return
    _counts[point] = _counts.get(point, 0) + 1
    if _counts[point] >= configured[1]:
        also = os.environ.get(FAULT_ALSO_KILL_ENV)
        if also:
            os.kill(int(also), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)
