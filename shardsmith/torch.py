"""PyTorch datasets over one split of a shardsmith dataset, without TensorFlow (`pip install shardsmith[torch]`).

- `ShardDataset(out, split)`: a map-style `Dataset`; `dataset[i]` reads record i at random through the shards'
  index files, so any sampler works: `shuffle=True` is an exact global shuffle, and `DistributedSampler` splits
  it across ranks.
- `StreamingShardDataset(out, split)`: an `IterableDataset` that reads shards sequentially. Each epoch it
  shuffles the shard order (seed and `set_epoch(epoch)`, as `DistributedSampler`), lays the split's records out
  in that order and gives each DDP rank, then each DataLoader worker of that rank, one contiguous run of them
  (starting mid-shard through the index): every record goes to exactly one worker of one rank, and ranks' counts
  differ by at most one. Records then pass through a `shuffle_buffer`. Call `set_epoch` before each epoch
  with the default `persistent_workers=False`: persistent workers keep the epoch they were started with.

Both yield `(image, target)`: the image a CHW tensor (uint8, or float32 in 0..1 with `dtype="float32"`), resized
to `image_size` when given; the target the label id (classification) or a multi-hot float32 vector
(multi_label). `transform=` takes the decoded PIL image instead (torchvision's transforms, as `ImageFolder`
passes them) and its result is the image; `target_transform=` takes the target. `features=True` yields a dict:
every record key (as `shardsmith.records` gives them, but text as str: the label text, file name, format, key,
URI and `--feature` strings) plus `image`. Every record's checksums are checked as it
is read (shardsmith/read/record_sequence.py). torch is imported by this module only: `import shardsmith` never does.

Resuming mid-epoch (a preempted job): both have `state_dict()` / `load_state_dict(state)`, the protocol torchdata's
`StatefulDataLoader` uses; it takes each DataLoader worker's state inside that worker after each batch, and gives
it back to the same worker of a new loader. A job stopped after any batch and resumed with the same dataset
arguments, `num_workers` and world size reads the rest of the epoch, in the order it would have read it: each
record of the epoch once, over every worker and rank.
- `StreamingShardDataset`'s state is one worker's of one rank: the build (`build_id`, `split`, `num_records`), the
  order's settings (`seed`, `shuffle`, `shuffle_buffer`), the `epoch`, its place (`rank`, `world_size`, `worker`,
  `num_workers`) and the samples it has `yielded` this epoch. The next iteration after `load_state_dict` continues
  that epoch (whatever `set_epoch` said); the ones after it read `set_epoch`'s from its start. Skipping costs no
  reads and no decoding: the shuffle buffer shuffles positions, so the order is replayed on integers (one random
  draw a position fed to the buffer), the positions still in the buffer at the stop (at most `shuffle_buffer`)
  are read at random through the index, and reading streams on from the first position never fed.
- `ShardDataset`'s state is the build alone: the position is the sampler's, and `StatefulDataLoader` saves its own
  `RandomSampler`'s (`shuffle=True`) and a `torchdata.stateful_dataloader.sampler.StatefulDistributedSampler`'s
  (call its `set_epoch` again on resuming).
- Elastic resume (another number of workers or ranks): `ShardDataset` with `ElasticSampler` (shardsmith/elastic.py),
  whose epoch order depends on the seed and epoch alone; its state, the same in every rank, resumes any shape
  (`elastic_state(saved)` takes it out of a StatefulDataLoader's state for a loader of another `num_workers`).
  `StreamingShardDataset(batch_size=B)` (B the DataLoader's) reads global batches whose order depends on the seed
  and epoch alone (elastic.StreamOrder: B consecutive records of the epoch's layout each, shuffled within, dealt
  to ranks and then workers as their steps take them), so it too resumes on any shape through
  `elastic_state(saved)`; without `batch_size` it reads each worker's run of shards and resumes on the same shape.
- A state of another build (a new one published since) is refused with a one-line ValueError that names the
  `version=` reading the saved build while it is kept; so is one of another split, seed or shuffle, and (at the
  next iteration) one of another rank or worker layout.
"""

from __future__ import annotations

import bisect
import collections
import itertools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from shardsmith import elastic
from shardsmith.elastic import elastic_state  # noqa: F401  (shardsmith.torch.elastic_state, beside the sampler)
from shardsmith.format.example import IMAGE, LABEL, MASK
from shardsmith.format.naming import BUILD_ID
from shardsmith.printable import shown
from shardsmith.read.images import decode_pil, decode_reduced, image_bytes
from shardsmith.read.images import image_size as image_size_of
from shardsmith.read.record_sequence import Records, record_values
from shardsmith.read.version_files import resume_advice

__all__ = ["ShardDataset", "StreamingShardDataset"]

BINARY_KEYS = (IMAGE, MASK)  # bytes keys that are not text: `features=True` keeps them as bytes


class _Samples:
    """Turns a record (a dict from Records) into what the datasets yield; picklable for worker processes."""

    def __init__(self, records: Records, image_size, channels: int, dtype: str, transform: Callable | None,
                 target_transform: Callable | None, features: bool):
        if dtype not in ("uint8", "float32"):
            raise ValueError(f"dtype must be 'uint8' or 'float32', not {dtype!r}")
        self.task = records.metadata.task_or_default
        if not features and self.task not in ("classification", "multi_label"):
            raise ValueError(f"a {self.task} dataset has no single target: pass features=True for every key")
        self.num_labels = len(records.labels)
        self.image_size, self.channels, self.dtype = image_size, channels, dtype
        self.size = image_size_of(image_size)
        self.transform, self.target_transform, self.features = transform, target_transform, features
        self.text_keys = text_keys(records.features)

    def __call__(self, record: dict):
        data = image_bytes(record)
        if self.transform is not None:
            image = self.transform(decode_pil(data, self.image_size, self.channels))
        else:
            image = decoded_tensor(data, self.size, self.channels)
            image = image if self.dtype == "uint8" else image.float().div_(255.0)
        if self.features:
            return {**record, **as_text(record, self.text_keys), "image": image}
        label = record[LABEL]
        if self.task == "multi_label":
            label = torch.zeros(self.num_labels, dtype=torch.float32).index_fill_(0, torch.as_tensor(label), 1.0)
        return image, (self.target_transform(label) if self.target_transform else label)


def text_keys(features: dict[str, str]) -> tuple[str, ...]:
    """The keys of `features` (metadata.json's) that hold text: every bytes key but the image's and a mask's."""
    return tuple(key for key, kind in features.items() if kind in ("bytes", "bytes_list") and key not in BINARY_KEYS)


def as_text(record: dict, keys: tuple[str, ...]) -> dict:
    """The record's text keys as str (a list of str for a list), as torch users expect of text; UTF-8, as the
    build wrote it, a byte it cannot decode shown as U+FFFD."""
    def text(value):
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    return {key: [text(item) for item in record[key]] if isinstance(record[key], list) else text(record[key])
            for key in keys if key in record}


def decoded_tensor(data: bytes, size: tuple[int, int] | None, channels: int) -> torch.Tensor:
    """The image in `data` as a CHW uint8 tensor, resized to `size` when given: decoded as small as `size` allows
    (`decode_reduced`: a JPEG at libjpeg-turbo's reduced scale), then resized by torch's bilinear filter with
    antialiasing (its uint8 kernels, on channels-last pixels, the layout the decoder gives). Within a few levels
    of a full decode and an antialiased resize (tests/shardsmith/test_torch_decode.py)."""
    pixels = torch.from_numpy(decode_reduced(data, size, channels)).permute(2, 0, 1)  # CHW view of HWC
    if size is not None and tuple(pixels.shape[1:]) != size:
        pixels = torch.nn.functional.interpolate(pixels[None], size=size, mode="bilinear", antialias=True,
                                                 align_corners=False)[0]
    return pixels.contiguous()


class ShardDataset(Dataset):
    """Map-style: record i of the split (shard order), read at random through the index; see the module."""

    def __init__(self, output_dir: str, split: str = "train", *, version: str | None = None,
                 image_size: int | Sequence[int] | None = None, channels: int = 3, dtype: str = "uint8",
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 features: bool = False):
        self.records = Records(output_dir, split, version)
        self._samples = _Samples(self.records, image_size, channels, dtype, transform, target_transform, features)
        # The build read: `version` (a tag resolved to its id), or the one published when the dataset was made
        # (None: before build folders).
        self.build_id: str | None = self.records.version_id or self.records.metadata.build_id

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        return self._samples(self.records[i])

    def state_dict(self) -> dict:
        """The build identity (`build_id`, `split`, `num_records`). The position in the epoch is the sampler's:
        torchdata's `StatefulDataLoader` saves its own `RandomSampler`'s (`shuffle=True`) and a
        `StatefulDistributedSampler`'s beside this."""
        return _build_identity(self.records, self.build_id)

    def load_state_dict(self, state: dict) -> None:
        """Checks that `state` was saved reading this build and split: ValueError (one line, naming the
        `version=` that reads the saved build) when not, since the sampler's indices would then pick other
        records."""
        _check_build(self.records, self.build_id, state)


class ElasticSampler(elastic.ElasticSampler):
    """A `ShardDataset`'s sampler whose epoch order depends on the seed and epoch alone: a job stopped on W workers
    and R ranks resumes on any W' and R' (shardsmith/elastic.py). `rank` and `world_size` default to
    torch.distributed's, as `StreamingShardDataset`'s do."""

    def __init__(self, dataset: ShardDataset, *, shuffle: bool = True, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None):
        rank, world_size = _distributed(rank, world_size)
        super().__init__(dataset, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size)


def _distributed(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world size): as given, else torch.distributed's when it is initialised, else (0, 1)."""
    if rank is None and world_size is None and torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    rank, world_size = rank or 0, world_size or 1
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    return rank, world_size


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
        self._samples = _Samples(self.records, image_size, channels, dtype, transform, target_transform, features)
        self.shuffle, self.shuffle_buffer, self.seed, self.batch_size = shuffle, shuffle_buffer, seed, batch_size
        self.rank, self.world_size = _distributed(rank, world_size)
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
            worker_id, num_workers = _worker()
            progress = _Progress(self.epoch, self.rank, self.world_size, worker_id, num_workers)
        return {"kind": elastic.STREAM_STATE_KIND, **_build_identity(self.records, self.build_id),
                "seed": self.seed, "shuffle": self.shuffle, "shuffle_buffer": self.shuffle_buffer,
                "batch_size": self.batch_size, **asdict(progress)}

    def load_state_dict(self, state: dict) -> None:
        """Makes the next iteration go on from `state` (from `state_dict`, of this rank and worker): the rest of
        the saved epoch, each of its records once, none of those yielded before the state was taken decoded
        again. ValueError (one line) when the state is of another build (it names the `version=` to pass),
        split, seed or shuffle; the next iteration raises one when it runs in another rank or worker layout."""
        _check_build(self.records, self.build_id, state)
        if state.get("kind") == elastic.STREAM_RESUME_KIND:
            self._load_elastic(state)
            return
        state = {"batch_size": None, "skipped": 0, **state}  # a state saved before batch_size existed
        keys = ("seed", "shuffle", "shuffle_buffer", *(f.name for f in fields(_Progress)))
        missing = [key for key in keys if key not in state]
        if missing:
            raise ValueError(f"not a StreamingShardDataset state: it has no {missing[0]!r}")
        for key, least in PROGRESS_MINIMUMS.items():
            _whole_number(state, key, least, "StreamingShardDataset")
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
            _whole_number(state, key, 1 if key == "batch_size" else 0, "elastic StreamingShardDataset")
        self._check_settings(state, ("seed", "shuffle", "batch_size"))
        consumed, batch_size, total = state["consumed"], state["batch_size"], len(self.records)
        if consumed > total or (consumed % batch_size and consumed != total):
            raise ValueError(f"the state says {consumed} of {total} records were read, not a whole number of "
                             f"batches of {batch_size}")
        self._resume = _Progress(state["epoch"], self.rank, self.world_size, 0, 1,
                                 skipped=-(-consumed // batch_size))
        self._resume_any_layout = True

    def __iter__(self) -> Iterator:
        worker_id, num_workers = _worker()
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


def _worker() -> tuple[int, int]:
    """(this DataLoader worker's id, the number of workers): (0, 1) outside one."""
    worker = get_worker_info()
    return (worker.id, worker.num_workers) if worker is not None else (0, 1)


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


def _build_identity(records: Records, build_id: str | None) -> dict:
    return {"build_id": build_id, "split": records.split, "num_records": len(records)}


# The least value of each whole-number field of a StreamingShardDataset state (a bool is not a number here).
PROGRESS_MINIMUMS = {"epoch": 0, "rank": 0, "world_size": 1, "worker": 0, "num_workers": 1, "yielded": 0,
                     "skipped": 0}


def _whole_number(state: dict, key: str, least: int, kind: str) -> None:
    """ValueError, one line, unless `state[key]` is an int (not a bool) of at least `least`."""
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"not a {kind} state: its {key!r} is {shown(repr(value))[:80]}, a whole number "
                         f"from {least} up is expected")


def _check_build(records: Records, build_id: str | None, state: dict) -> None:
    """ValueError, one line, unless `state` was saved reading this build's split."""
    if not isinstance(state, dict):
        raise ValueError(f"not a shardsmith.torch dataset state: a {type(state).__name__}, not a dict")
    missing = [key for key in ("build_id", "split", "num_records") if key not in state]
    if missing:
        raise ValueError(f"not a shardsmith.torch dataset state: it has no {missing[0]!r}")
    saved, here = state["build_id"], build_id
    if saved is not None and not (isinstance(saved, str) and BUILD_ID.fullmatch(saved)):
        raise ValueError(f"not a shardsmith.torch dataset state: its 'build_id' {shown(repr(saved))[:80]} is not a "
                         "build id (like 20261124T211052Z-44b3a31b)")
    if not isinstance(state["split"], str):
        raise ValueError(f"not a shardsmith.torch dataset state: its 'split' is {shown(repr(state['split']))[:80]}")
    _whole_number(state, "num_records", 0, "shardsmith.torch dataset")
    if saved != here:
        how = resume_advice(records.output_dir, saved) if saved else "it cannot be reopened by version"
        raise ValueError(f"the state was saved reading build {saved} of {records.output_dir}, this dataset reads "
                         f"build {here}: {how}, or start the epoch over without the state")
    if (state["split"], state["num_records"]) != (records.split, len(records)):
        raise ValueError(f"the state is of split {state['split']!r} ({state['num_records']} records), this "
                         f"dataset reads {records.split!r} ({len(records)} records) of build {here}")


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
