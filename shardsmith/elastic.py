"""Elastic resume for `shardsmith.torch.ShardDataset`: `ElasticSampler`, whose epoch order depends on the seed and
the epoch alone, never on how many ranks or DataLoader workers read it, so a job stopped on one machine shape
resumes on any other and reads the rest of the epoch, each record once over every rank.

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

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

STATE_KIND = "shardsmith.ElasticSampler"


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
    """The ElasticSampler state inside a saved StatefulDataLoader state (or the state itself): what a job
    resuming with another number of DataLoader workers loads into its new sampler. ValueError when there is none."""
    found = _find(saved)
    if found is None:
        raise ValueError("no ElasticSampler state in it: was the loader's sampler a shardsmith ElasticSampler?")
    return found


def _find(value) -> dict | None:
    if isinstance(value, dict):
        if value.get("kind") == STATE_KIND:
            return value
        for item in value.values():
            found = _find(item)
            if found is not None:
                return found
    return None
