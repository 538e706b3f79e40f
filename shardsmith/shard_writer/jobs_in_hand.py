"""The jobs a stage has sent to its build's writer pool (shardsmith/shard_writer/shard_worker.py) and not yet taken
back: the one way a DoFn keeps a bounded number in hand while it goes on with its input.

Guarantees: answers come back in the order the jobs were sent, each with the tag it was sent with; at most
`per_process` jobs per writer process are in hand once `send` returns (it waits for the oldest beyond that), so
what a stage holds in flight is bounded whatever its input; every wait is the pool's, which has a deadline per job.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future


class JobsInHand:
    """Jobs sent to `pool`, oldest first. `send` hands one over and yields the (tag, answer) pairs ready: every
    finished job at the front, then the oldest ones while more than `per_process` per process are in hand;
    `all` yields the rest, waiting for each."""

    def __init__(self, pool, per_process: int):
        self._pool = pool
        self._per_process = per_process
        self._jobs: deque[tuple[object, Future]] = deque()

    def send(self, tag: object, *job) -> Iterator[tuple[object, object]]:
        self._jobs.append((tag, self._pool.submit(*job)))
        while self._jobs and (self._jobs[0][1].done() or len(self._jobs) > self._per_process * self._pool.processes):
            yield self._answer()

    def all(self) -> Iterator[tuple[object, object]]:
        while self._jobs:
            yield self._answer()

    def _answer(self) -> tuple[object, object]:
        tag, future = self._jobs.popleft()
        return tag, future.result()

    def __len__(self) -> int:
        return len(self._jobs)
