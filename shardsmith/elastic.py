"""Elastic resume: epoch orders that depend on the seed and the epoch alone, never on how many ranks or DataLoader
workers read them, so a job stopped on one machine shape resumes on any other and reads the rest of the epoch,
each record once over every rank. `ElasticSampler` for `shardsmith.torch.ShardDataset` (below), and
`StreamOrder` for `StreamingShardDataset(batch_size=...)` (after it).

The epoch is one permutation of the split's record indices (numpy's PCG64 seeded with the seed and the epoch;
the identity without `shuffle`). With R ranks, rank r reads positions r, r + R, r + 2R, ... of what is left of
it, so when every rank has yielded k indices (ranks step together in data-parallel training) the epoch's first
k * R positions are read, whatever R is. The state (`state_dict`) is that count, `consumed`, with the epoch and
the build: the same in every rank, so any rank's state resumes every rank of a new shape, and a new R' splits
the rest as above. DataLoader workers do not change the order: a map-style dataset's indices come from the
sampler in the main process, and the loader hands batches back in sampler order.

With torchdata's `StatefulDataLoader` the sampler's state is saved inside the loader's (taken when each batch's
indices were handed out, so it counts the batches the loop received) and a loader of the same `num_workers`
restores it. A loader of another `num_workers` refuses the loader state (torchdata checks the count), so on a
new shape take the sampler's state out of the saved loader state (`elastic_state`), load it into the new
sampler and start a new loader. Guarantees: the same seed, epoch and number of records give the same order on
any machine; memory is one index per record (8 bytes) for the epoch's permutation.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

STATE_KIND = "shardsmith.ElasticSampler"
STREAM_STATE_KIND = "shardsmith.StreamingShardDataset"  # a worker's state, as the dataset saves it
STREAM_RESUME_KIND = "shardsmith.StreamingShardDataset.elastic"  # a whole loader's, made by elastic_state


@dataclass
class _Progress:
    epoch: int
    skipped: int  # positions of the epoch read before this iteration started (every rank's)
    yielded: int = 0  # indices this rank has yielded in this iteration


def epoch_order(num_records: int, seed: int, epoch: int, shuffle: bool = True) -> np.ndarray:
    """The epoch's record indices in reading order, the same on every machine for the same arguments."""
    if not shuffle:
        return np.arange(num_records, dtype=np.int64)
    return np.random.Generator(np.random.PCG64([seed, epoch])).permutation(num_records)


class ElasticSampler:
    """Indices of a `ShardDataset`'s split for one rank, in the epoch order of `epoch_order`; see the module.
    Pass it as a DataLoader's `sampler`, call `set_epoch` before each epoch, and resume with `load_state_dict`
    on any number of ranks and workers. Ranks' shares of an epoch differ by at most one index (use the
    DataLoader's `drop_last`, or torch's `Join`, where every rank must take the same number of steps)."""

    def __init__(self, dataset, *, shuffle: bool = True, seed: int = 0, rank: int = 0, world_size: int = 1):
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
        self.num_records = len(dataset)
        self.build_id: str | None = getattr(dataset, "build_id", None)
        records = getattr(dataset, "records", None)
        self.split: str | None = getattr(records, "split", None)
        self.output_dir: str | None = getattr(records, "output_dir", None)
        self.shuffle, self.seed, self.rank, self.world_size = shuffle, seed, rank, world_size
        self.epoch = 0
        self._progress: _Progress | None = None  # the latest iteration's
        self._resume: _Progress | None = None  # loaded, taken by the next iteration

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iteration reads from its start (one resuming a loaded state reads the state's)."""
        self.epoch = epoch

    def _next(self) -> _Progress:
        return self._resume or _Progress(self.epoch, 0)

    def __len__(self) -> int:
        """Indices this rank yields in the next iteration."""
        left = self.num_records - self._next().skipped
        return max(0, (left - self.rank + self.world_size - 1) // self.world_size)

    def __iter__(self) -> Iterator[int]:
        progress, self._resume = self._next(), None
        self._progress = progress
        order = epoch_order(self.num_records, self.seed, progress.epoch, self.shuffle)
        for index in order[progress.skipped + self.rank::self.world_size]:
            progress.yielded += 1
            yield int(index)

    def state_dict(self) -> dict:
        """The epoch and the positions of it every rank together has read (`consumed`: this rank's yielded
        indices times the world size, past those skipped when the iteration started), with the build, the
        record count and the order's settings: plain values, the same in every rank that has yielded as many."""
        progress = self._resume or self._progress or _Progress(self.epoch, 0)
        return {"kind": STATE_KIND, "build_id": self.build_id, "split": self.split, "num_records": self.num_records,
                "seed": self.seed, "shuffle": self.shuffle, "epoch": progress.epoch,
                "consumed": min(self.num_records, progress.skipped + progress.yielded * self.world_size)}

    def load_state_dict(self, state: dict) -> None:
        """Makes the next iteration read the rest of the saved epoch, split over this sampler's ranks. ValueError
        (one line) when the state is not an ElasticSampler's, or is of another build, split, record count, seed or
        shuffle: its positions would then name other records."""
        if not isinstance(state, dict) or state.get("kind") != STATE_KIND:
            raise ValueError("not an ElasticSampler state (shardsmith.elastic.elastic_state finds one inside a "
                             "StatefulDataLoader's)")
        for key in ("epoch", "consumed", "num_records", "seed"):
            value = state.get(key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"not an ElasticSampler state: its {key!r} is {value!r}, a whole number from 0 "
                                 "up is expected")
        saved = state.get("build_id")
        if saved != self.build_id and isinstance(saved, str) and self.output_dir is not None:
            from shardsmith.read.version_files import resume_advice

            raise ValueError(f"the state was saved reading build {saved} of {self.output_dir}, this sampler's "
                             f"dataset reads build {self.build_id}: {resume_advice(self.output_dir, saved)}, or "
                             "start the epoch over without the state")
        here = {"build_id": self.build_id, "split": self.split, "num_records": self.num_records,
                "seed": self.seed, "shuffle": self.shuffle}
        changed = [f"{key} {state.get(key)!r} (this sampler: {value!r})" for key, value in here.items()
                   if state.get(key) != value]
        if changed:
            raise ValueError(f"the state was saved with {', '.join(changed)}: resume on the same build and split "
                             "with the same seed and shuffle, or its positions would name other records")
        if state["consumed"] > self.num_records:
            raise ValueError(f"the state says {state['consumed']} of {self.num_records} records were read")
        self._resume = _Progress(state["epoch"], state["consumed"])


def elastic_state(saved) -> dict:
    """The shape-free state inside a saved StatefulDataLoader state (or a state itself): what a job resuming with
    another number of DataLoader workers or ranks loads before it starts a new loader. For an `ElasticSampler`,
    the sampler's state; for a `StreamingShardDataset(batch_size=...)`, the global batches consumed, counted from
    the loader's steps (`stream_resume_state`). ValueError when there is neither."""
    found = _find(saved)
    if found is not None:
        return found
    if _stream_states(saved):
        return stream_resume_state(saved)
    raise ValueError("no ElasticSampler or StreamingShardDataset(batch_size=...) state in it: was the loader's "
                     "sampler a shardsmith ElasticSampler, or its dataset a StreamingShardDataset?")


def _find(value) -> dict | None:
    if isinstance(value, dict):
        if value.get("kind") == STATE_KIND:
            return value
        for item in value.values():
            found = _find(item)
            if found is not None:
                return found
    return None


@dataclass(frozen=True)
class StreamOrder:
    """One epoch of a split read as a stream, cut into global batches, the same for every machine shape.

    The epoch's layout is the split's records taken shard by shard in the epoch's shard order, rotated to start
    at a position drawn from the seed and epoch (so batches are cut at other places each epoch). Global batch k
    is positions k * batch_size .. (k + 1) * batch_size of it (the last may be short), its records shuffled
    among themselves by a draw of (seed, epoch, k). Batches are dealt as DataLoader steps take them: after
    `skipped` batches already read, rank r of R takes the next ones at r, r + R, ..., and its worker w of W the
    rank's steps w, w + W, ...: the batches numbered skipped + r + w * R + t * R * W. When every rank has taken
    T steps, batches skipped .. skipped + T * R are read, whatever R and W are, which is what makes a resume
    on another shape read the rest exactly once. Reading stays sequential: a batch is one contiguous run of at
    most two shards' records (three where a shard is shorter than a batch)."""

    num_records: int
    batch_size: int
    seed: int
    epoch: int
    shuffle: bool

    @property
    def num_batches(self) -> int:
        return -(-self.num_records // self.batch_size)

    @functools.cached_property
    def _start(self) -> int:
        """The layout position the epoch starts at (one draw per epoch)."""
        if not self.shuffle or not self.num_records:
            return 0
        return random.Random(f"{self.seed}/{self.epoch}/start").randrange(self.num_records)

    def batch_runs(self, batch: int) -> list[tuple[int, int]]:
        """Global batch `batch` as runs (start, stop) of positions in the unrotated layout, in reading order."""
        first = batch * self.batch_size
        size = min(self.batch_size, self.num_records - first)
        start = (self._start + first) % self.num_records
        if start + size <= self.num_records:
            return [(start, start + size)]
        return [(start, self.num_records), (0, start + size - self.num_records)]

    def batch_order(self, batch: int, size: int) -> list[int]:
        """The order in which the batch's `size` records are yielded: indices into the batch as read."""
        order = list(range(size))
        if self.shuffle:
            random.Random(f"{self.seed}/{self.epoch}/batch/{batch}").shuffle(order)
        return order

    def worker_batches(self, skipped: int, rank: int, world_size: int, worker: int, num_workers: int) -> range:
        """The global batches worker `worker` of `num_workers` in rank `rank` of `world_size` reads, in order."""
        return range(skipped + rank + worker * world_size, self.num_batches, world_size * num_workers)

    def records_of(self, batches: range) -> int:
        """How many records the batches hold (only the epoch's last batch may be short)."""
        if batches and batches[-1] == self.num_batches - 1:
            return (len(batches) - 1) * self.batch_size + self.num_records - batches[-1] * self.batch_size
        return len(batches) * self.batch_size


def _stream_states(value) -> list[dict]:
    """Every StreamingShardDataset(batch_size=...) worker state in a saved loader state."""
    if isinstance(value, dict):
        if value.get("kind") == STREAM_STATE_KIND and value.get("batch_size") is not None:
            return [value]
        return [found for item in value.values() for found in _stream_states(item)]
    return []


def _loader_steps(saved) -> tuple[int | None, int]:
    """(batches the loader had yielded when it was saved, of them those its worker states were taken at):
    torchdata's StatefulDataLoader counts them, and snapshots worker states every `snapshot_every_n_steps`."""
    if isinstance(saved, dict) and isinstance(saved.get("_snapshot"), dict):
        at = saved["_snapshot"].get("_snapshot_step")
        since = saved.get("_steps_since_snapshot", 0)
        if isinstance(at, int) and isinstance(since, int):
            return at + since, at
    if isinstance(saved, dict) and isinstance(saved.get("_num_yielded"), int):
        return saved["_num_yielded"], saved["_num_yielded"]
    return None, 0


def stream_resume_state(saved) -> dict:
    """From a StatefulDataLoader's saved state over a `StreamingShardDataset(batch_size=...)` (or one such
    dataset's own state, taken between batches outside a loader), the shape-free state: the build, the order's
    settings, the epoch and `consumed`, the records of the global batches read by every rank (the loader's
    steps times the world size, past those skipped when its iteration began). The same in every rank that has
    taken as many steps. ValueError (one line) when the worker states disagree, or do not add up to the steps,
    as when the DataLoader's batch_size is not the dataset's."""
    states = _stream_states(saved)
    if not states:
        raise ValueError("no StreamingShardDataset(batch_size=...) state in it")
    first = states[0]
    shared = ("build_id", "split", "num_records", "seed", "shuffle", "batch_size", "epoch", "skipped", "rank",
              "world_size", "num_workers")
    for state in states[1:]:
        differ = [key for key in shared if state.get(key) != first.get(key)]
        if differ:
            raise ValueError(f"the worker states differ in {differ[0]!r}: they are not of one loader")
    order = StreamOrder(first["num_records"], first["batch_size"], first["seed"], first["epoch"], first["shuffle"])
    rank, world_size, num_workers = first["rank"], first["world_size"], first["num_workers"]
    steps, snapshot_steps = _loader_steps(saved)
    if steps is None:  # a dataset's own state, outside a loader: one worker, between batches
        yielded = first["yielded"]
        mine = order.worker_batches(first["skipped"], rank, world_size, 0, 1)
        steps = snapshot_steps = -(-yielded // order.batch_size)
        if yielded % order.batch_size and yielded != order.records_of(mine):
            raise ValueError(f"the state was taken after {yielded} samples, inside a batch of "
                             f"{order.batch_size}: take it between batches, as StatefulDataLoader does")
    skipped = first["skipped"]
    read_by_rank = range(skipped + rank, min(order.num_batches, skipped + snapshot_steps * world_size), world_size)
    expected = order.records_of(read_by_rank)
    if len(states) == num_workers and sum(state["yielded"] for state in states) != expected:
        raise ValueError(f"the loader took {snapshot_steps} steps but its workers yielded "
                         f"{sum(state['yielded'] for state in states)} samples, not {expected}: the DataLoader's "
                         f"batch_size must be the dataset's ({order.batch_size})")
    consumed_batches = min(order.num_batches, first["skipped"] + steps * world_size)
    return {"kind": STREAM_RESUME_KIND, **{key: first[key] for key in shared[:6]}, "epoch": first["epoch"],
            "consumed": min(order.num_records, consumed_batches * order.batch_size)}
