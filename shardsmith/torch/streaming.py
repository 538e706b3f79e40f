"""The iterable dataset (`StreamingShardDataset`): a split's shards read in sequence, laid out in an epoch's shard
order and split across ranks and DataLoader workers, through a shuffle buffer; or, with `batch_size`, global
batches whose order depends on the seed and epoch alone (shardsmith/elastic.py).

Guarantees: every record of an epoch goes to exactly one worker of one rank, and ranks' counts differ by at most
one; a state taken after any batch and loaded into a dataset of the same arguments, workers and world size (or, with
`batch_size`, of any shape through `elastic_state`) reads the rest of that epoch in the order it would have read it,
each record once, without decoding the records yielded before the stop.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields

from torch.utils.data import IterableDataset

from shardsmith import elastic
from shardsmith.read.record_sequence import Records, record_values
from shardsmith.torch.build_state import build_identity, check_build, whole_number
from shardsmith.torch.ranks import distributed, this_worker
from shardsmith.torch.samples import Samples


def _part(start: int, stop: int, part: int, parts: int) -> tuple[int, int]:
    """Part `part` of `parts` near-equal contiguous parts of start..stop."""
    size = stop - start
    return start + part * size // parts, start + (part + 1) * size // parts


@dataclass
class _Progress:
    """Where one iterating copy of a StreamingShardDataset is: its epoch, its place in the rank and worker layout,
    and how many samples it has yielded in that epoch."""

    epoch: int
    rank: int
    world_size: int
    worker: int
    num_workers: int
    yielded: int = 0
    skipped: int = 0  # with batch_size: the global batches every rank had read before this iteration began


class StreamingShardDataset(IterableDataset):
    """Iterable: shards read in order, split across ranks and workers without overlap; see the module."""

    def __init__(self, output_dir: str, split: str = "train", *, version: str | None = None,
                 shuffle: bool = True, shuffle_buffer: int = 1024, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None, image_size: int | Sequence[int] | None = None, channels: int = 3,
                 dtype: str = "uint8", transform: Callable | None = None,
                 target_transform: Callable | None = None, features: bool = False, batch_size: int | None = None):
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be a whole number from 1 up (the DataLoader's), not {batch_size!r}")
        self.records = Records(output_dir, split, version)
        self._samples = Samples(self.records, image_size, channels, dtype, transform, target_transform, features)
        self.shuffle, self.shuffle_buffer, self.seed, self.batch_size = shuffle, shuffle_buffer, seed, batch_size
        self.rank, self.world_size = distributed(rank, world_size)
        self.epoch = 0
        # The build read: `version` (a tag resolved to its id), or the one published when the dataset was made
        # (None: before build folders).
        self.build_id: str | None = self.records.version_id or self.records.metadata.build_id
        self._progress: _Progress | None = None  # the latest iteration's
        self._resume: _Progress | None = None  # loaded by load_state_dict, taken by the next iteration
        self._resume_any_layout = False  # the loaded state is elastic_state's: any rank and worker layout

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration reads: its shard order and shuffle (call before each epoch). An
        iteration resuming a loaded state reads the state's epoch instead; the ones after it read this."""
        self.epoch = epoch

    def _rank_range(self) -> tuple[int, int]:
        return _part(0, len(self.records), self.rank, self.world_size)

    def __len__(self) -> int:
        """Records this rank reads in an epoch (all its DataLoader workers together)."""
        if self.batch_size:
            order = self._order(self.epoch)
            return order.records_of(order.worker_batches(0, self.rank, self.world_size, 0, 1))
        start, stop = self._rank_range()
        return stop - start

    def _order(self, epoch: int) -> elastic.StreamOrder:
        assert self.batch_size
        return elastic.StreamOrder(len(self.records), self.batch_size, self.seed, epoch, self.shuffle)

    def shard_order(self) -> list[int]:
        """This epoch's shard order, the same in every rank and worker."""
        return self._shard_order(self.epoch)

    def _shard_order(self, epoch: int) -> list[int]:
        order = list(range(len(self.records.shards)))
        if self.shuffle:
            random.Random(f"{self.seed}/{epoch}").shuffle(order)
        return order

    def state_dict(self) -> dict:
        """Where this copy of the dataset is in its epoch, as plain values: the build (`build_id`, `split`,
        `num_records`), the order's settings (`seed`, `shuffle`, `shuffle_buffer`), the `epoch`, this copy's
        place (`rank`, `world_size`, `worker`, `num_workers`) and the samples it has `yielded` this epoch.
        Inside a DataLoader worker it is that worker's (torchdata's `StatefulDataLoader` asks each worker for its
        own, after each batch); it follows the latest iteration of this object, or the state loaded and not yet
        iterated, or (neither) the start of `set_epoch`'s epoch."""
        progress = self._resume or self._progress
        if progress is None:
            worker_id, num_workers = this_worker()
            progress = _Progress(self.epoch, self.rank, self.world_size, worker_id, num_workers)
        return {"kind": elastic.STREAM_STATE_KIND, **build_identity(self.records, self.build_id),
                "seed": self.seed, "shuffle": self.shuffle, "shuffle_buffer": self.shuffle_buffer,
                "batch_size": self.batch_size, **asdict(progress)}

    def load_state_dict(self, state: dict) -> None:
        """Makes the next iteration go on from `state` (from `state_dict`, of this rank and worker): the rest of
        the saved epoch, each of its records once, none of those yielded before the state was taken decoded
        again. ValueError (one line) when the state is of another build (it names the `version=` to pass),
        split, seed or shuffle; the next iteration raises one when it runs in another rank or worker layout."""
        check_build(self.records, self.build_id, state)
        if state.get("kind") == elastic.STREAM_RESUME_KIND:
            self._load_elastic(state)
            return
        state = {"batch_size": None, "skipped": 0, **state}  # a state saved before batch_size existed
        keys = ("seed", "shuffle", "shuffle_buffer", *(f.name for f in fields(_Progress)))
        missing = [key for key in keys if key not in state]
        if missing:
            raise ValueError(f"not a StreamingShardDataset state: it has no {missing[0]!r}")
        for key, least in PROGRESS_MINIMUMS.items():
            whole_number(state, key, least, "StreamingShardDataset")
        self._check_settings(state, ("seed", "shuffle", "shuffle_buffer", "batch_size"))
        self._resume = _Progress(**{f.name: state[f.name] for f in fields(_Progress)})
        self._resume_any_layout = False

    def _check_settings(self, state: dict, keys: tuple[str, ...]) -> None:
        changed = [f"{key}={state[key]!r} (this dataset: {getattr(self, key)!r})"
                   for key in keys if state[key] != getattr(self, key)]
        if changed:
            raise ValueError(f"the state was saved with {', '.join(changed)}: resume with the same settings, "
                             "or the rest of the epoch would not be the rest of its order")

    def _load_elastic(self, state: dict) -> None:
        """A state from `elastic_state`: the global batches every rank had read, resumed on this layout."""
        for key in ("seed", "shuffle", "batch_size", "epoch", "consumed"):
            if key not in state:
                raise ValueError(f"not an elastic StreamingShardDataset state: it has no {key!r}")
        for key in ("epoch", "consumed", "batch_size"):
            whole_number(state, key, 1 if key == "batch_size" else 0, "elastic StreamingShardDataset")
        self._check_settings(state, ("seed", "shuffle", "batch_size"))
        consumed, batch_size, total = state["consumed"], state["batch_size"], len(self.records)
        if consumed > total or (consumed % batch_size and consumed != total):
            raise ValueError(f"the state says {consumed} of {total} records were read, not a whole number of "
                             f"batches of {batch_size}")
        self._resume = _Progress(state["epoch"], self.rank, self.world_size, 0, 1,
                                 skipped=-(-consumed // batch_size))
        self._resume_any_layout = True

    def __iter__(self) -> Iterator:
        worker_id, num_workers = this_worker()
        resume, self._resume = self._resume, None
        progress = _Progress(self.epoch, self.rank, self.world_size, worker_id, num_workers)
        if resume is not None and self._resume_any_layout:
            progress.epoch, progress.skipped = resume.epoch, resume.skipped
        elif resume is not None:
            here, saved = asdict(progress), asdict(resume)
            layout = ("rank", "world_size", "worker", "num_workers")
            if any(here[key] != saved[key] for key in layout):
                raise ValueError("the state was saved by " + _layout(saved) + ", this is " + _layout(here)
                                 + ": resume with the same world size and DataLoader num_workers, each rank and "
                                 "worker with its own state (StatefulDataLoader keeps each worker's); "
                                 + ("load shardsmith.torch.elastic_state(loader_state) to resume on another shape"
                                    if self.batch_size else "a dataset made with batch_size= (the DataLoader's) "
                                    "resumes on any shape"))
            progress = resume
        self._progress = progress
        return self._read(progress)

    def _read(self, progress: _Progress) -> Iterator:
        """This copy's samples of `progress.epoch`, from sample `progress.yielded` on (counting them there).

        The order is a function of positions alone: the worker's run of the epoch's layout is positions
        0..length-1, and the shuffle buffer shuffles positions, so the order of a resumed epoch is replayed on
        integers, without reading a record. Positions fed to the buffer before the stop and not yet yielded
        (at most `shuffle_buffer`) are read at random through the index; reading streams on from the first
        position never fed. Records are parsed and decoded only as they are yielded."""
        if self.batch_size:
            return self._read_batches(progress)
        return self._read_runs(progress)

    def _read_runs(self, progress: _Progress) -> Iterator:
        start, stop = _part(*self._rank_range(), progress.worker, progress.num_workers)
        if not 0 <= progress.yielded <= stop - start:
            raise ValueError(f"the state says {progress.yielded} samples were yielded of this worker's "
                             f"{stop - start}: it is not of this dataset's layout")
        shards = self._shard_order(progress.epoch)
        positions = _Positions(stop - start)
        order: Iterator[int] = positions
        if self.shuffle and self.shuffle_buffer > 1:
            rng = random.Random(f"{self.seed}/{progress.epoch}/{self.rank}/{progress.worker}")
            order = _shuffled(positions, self.shuffle_buffer, rng)
        collections.deque(itertools.islice(order, progress.yielded), maxlen=0)  # replays the stop's order
        fed = positions.taken  # positions below this were read before the stop; those not yielded are buffered
        at = _Layout(self.records, shards)
        stream = self._stream(start + fed, stop, shards)
        pending: dict[int, bytes] = {}  # streamed, not yet yielded: at most `shuffle_buffer` of them
        streamed = fed
        for position in order:
            if position < fed:
                data = self.records.read(at.record(start + position))
            else:
                while streamed <= position:
                    pending[streamed] = next(stream)
                    streamed += 1
                data = pending.pop(position)
            sample = self._samples(record_values(data, self.records.features))
            progress.yielded += 1
            yield sample

    def _read_batches(self, progress: _Progress) -> Iterator:
        """This copy's global batches of `progress.epoch` (elastic.StreamOrder), from sample `progress.yielded`
        of them on: each batch's records read in one sequential run, then yielded in the batch's own shuffled
        order; a resumed batch's samples before the stop are read but not decoded."""
        order = self._order(progress.epoch)
        batches = order.worker_batches(progress.skipped, progress.rank, progress.world_size, progress.worker,
                                       progress.num_workers)
        if not 0 <= progress.yielded <= order.records_of(batches):
            raise ValueError(f"the state says {progress.yielded} samples were yielded of this worker's "
                             f"{order.records_of(batches)}: it is not of this dataset's layout")
        shards = self._shard_order(progress.epoch)
        done, within = divmod(progress.yielded, order.batch_size)
        for batch in batches[done:]:
            data = [record for start, stop in order.batch_runs(batch) for record in self._stream(start, stop, shards)]
            for at in order.batch_order(batch, len(data))[within:]:
                sample = self._samples(record_values(data[at], self.records.features))
                progress.yielded += 1
                yield sample
            within = 0

    def _stream(self, start: int, stop: int, shards: list[int]) -> Iterator[bytes]:
        """The serialized records at positions start..stop of the layout of `shards`, in order (CRCs checked)."""
        for shard, first, last in self.records.pieces(start, stop, shards):
            yield from self.records.shard_records(shard, first, last)


def _layout(state: dict) -> str:
    return (f"rank {state['rank']} of {state['world_size']}, worker {state['worker']} of "
            f"{state['num_workers']}")


class _Positions(Iterator[int]):
    """0..length-1, counting how many have been taken."""

    def __init__(self, length: int):
        self.length, self.taken = length, 0

    def __next__(self) -> int:
        if self.taken >= self.length:
            raise StopIteration
        self.taken += 1
        return self.taken - 1


class _Layout:
    """Maps a position of the split laid out in a shard order to the record's split-wide index."""

    def __init__(self, records: Records, shards: list[int]):
        self._records, self._shards = records, shards
        self._ends = list(itertools.accumulate(records.shards[shard].num_records for shard in shards))

    def record(self, position: int) -> int:
        k = bisect.bisect_right(self._ends, position)
        shard = self._records.shards[self._shards[k]]
        return shard.start + position - (self._ends[k] - shard.num_records)


# The least value of each whole-number field of a StreamingShardDataset state (a bool is not a number here).
PROGRESS_MINIMUMS = {"epoch": 0, "rank": 0, "world_size": 1, "worker": 0, "num_workers": 1, "yielded": 0,
                     "skipped": 0}

def _shuffled(items: Iterator, buffer_size: int, rng: random.Random) -> Iterator:
    """`items` through a shuffle buffer of `buffer_size`: each item out is a random one of those held. The
    random draws depend only on the number of items, so the same rng gives the same order of positions."""
    buffer = []
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        at = rng.randrange(buffer_size)
        yield buffer[at]
        buffer[at] = item
    rng.shuffle(buffer)
    yield from buffer
