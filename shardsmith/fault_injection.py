"""Fault injection for the kill-and-retry tests: `SHARDSMITH_FAULT=<point>[:<n>]` makes the process kill itself
with SIGKILL at a named point, as a machine loss or an OOM kill would. Unset (always, outside tests), every
call here is a no-op.

Points: `mid_shard:N` (N records into a shard's temporary file), `after_shards:N` (after N shards are renamed
into place in this process), `before_metadata` (after errors.jsonl and labels.txt, before metadata.json),
`before_switch` (the build's own metadata.json written, the top-level one staged, not yet renamed into place),
`mid_rewrite:N` (--incremental: N records into the rewrite of a shard that holds removed rows),
`before_tags_rename` (`tag`/`untag`: tags.json's temporary file written whole, not yet renamed into place).
In a shard writer process, those kill the whole build (FAULT_ALSO_KILL_ENV). Two more kill only the writer,
N records into a shard, as the out-of-memory killer would: `writer_killed:N` in the writers a build starts
first (the pool starts their replacements without it), `writer_killed_always:N` in every writer.
"""

from __future__ import annotations

import os
import signal

FAULT_ENV = "SHARDSMITH_FAULT"
# Set by the shard writer pool in its workers: the process to kill first, so a fault takes the whole build down.
FAULT_ALSO_KILL_ENV = "SHARDSMITH_FAULT_ALSO_KILL"
WRITER_KILLED = "writer_killed"
BEFORE_TAGS_RENAME = "before_tags_rename"
WRITER_KILLED_ALWAYS = "writer_killed_always"
_WRITER_ONLY = (WRITER_KILLED, WRITER_KILLED_ALWAYS)
_counts: dict[str, int] = {}


def _configured() -> tuple[str, int] | None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return None
    point, _, count = spec.partition(":")
    return point, int(count or 1)


def armed() -> bool:
    """Whether a fault is configured in this process: a loop that reaches a point per record asks once."""
    return _configured() is not None


def reached(point: str) -> None:
    """Counts one arrival at `point`; kills the process when the configured count is reached. Arriving at
    `writer_killed` also counts for `writer_killed_always`."""
    configured = _configured()
    if configured is None:
        return
    name, count = configured
    if name != point and not (point == WRITER_KILLED and name == WRITER_KILLED_ALWAYS):
        return
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] >= count:
        also = os.environ.get(FAULT_ALSO_KILL_ENV)
        if also and name not in _WRITER_ONLY:
            os.kill(int(also), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def replacement_environment(env: dict[str, str]) -> dict[str, str]:
    """The environment for a writer that replaces a dead one: without a `writer_killed` fault, so that the
    fault kills each first writer once and the retry can succeed."""
    if env.get(FAULT_ENV, "").partition(":")[0] == WRITER_KILLED:
        return {name: value for name, value in env.items() if name != FAULT_ENV}
    return env
