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
every record key (as `shardsmith.records` gives them) plus `image`. Every record's checksums are checked as it
is read (shardsmith/read/sequence.py). torch is imported by this module only: `import shardsmith` never does.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

from shardsmith.format.example import LABEL
from shardsmith.read.images import decode_image, decode_pil, image_bytes
from shardsmith.read.sequence import Records

__all__ = ["ShardDataset", "StreamingShardDataset"]


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
        self.transform, self.target_transform, self.features = transform, target_transform, features

    def __call__(self, record: dict):
        data = image_bytes(record)
        if self.transform is not None:
            image = self.transform(decode_pil(data, self.image_size, self.channels))
        else:
            image = torch.from_numpy(decode_image(data, self.image_size, self.channels)).permute(2, 0, 1)
            image = image.contiguous() if self.dtype == "uint8" else image.float().div_(255.0)
        if self.features:
            return {**record, "image": image}
        label = record[LABEL]
        if self.task == "multi_label":
            label = torch.zeros(self.num_labels, dtype=torch.float32).index_fill_(0, torch.as_tensor(label), 1.0)
        return image, (self.target_transform(label) if self.target_transform else label)


class ShardDataset(Dataset):
    """Map-style: record i of the split (shard order), read at random through the index; see the module."""

    def __init__(self, output_dir: str, split: str = "train", *, version: str | None = None,
                 image_size: int | Sequence[int] | None = None, channels: int = 3, dtype: str = "uint8",
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 features: bool = False):
        self.records = Records(output_dir, split, version)
        self._samples = _Samples(self.records, image_size, channels, dtype, transform, target_transform, features)

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int):
        return self._samples(self.records[i])


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


class StreamingShardDataset(IterableDataset):
    """Iterable: shards read in order, split across ranks and workers without overlap; see the module."""

    def __init__(self, output_dir: str, split: str = "train", *, version: str | None = None,
                 shuffle: bool = True, shuffle_buffer: int = 1024, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None, image_size: int | Sequence[int] | None = None, channels: int = 3,
                 dtype: str = "uint8", transform: Callable | None = None,
                 target_transform: Callable | None = None, features: bool = False):
        self.records = Records(output_dir, split, version)
        self._samples = _Samples(self.records, image_size, channels, dtype, transform, target_transform, features)
        self.shuffle, self.shuffle_buffer, self.seed = shuffle, shuffle_buffer, seed
        self.rank, self.world_size = _distributed(rank, world_size)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch the next iteration reads: its shard order and shuffle (call before each epoch)."""
        self.epoch = epoch

    def _rank_range(self) -> tuple[int, int]:
        return _part(0, len(self.records), self.rank, self.world_size)

    def __len__(self) -> int:
        """Records this rank reads in an epoch (all its DataLoader workers together)."""
        start, stop = self._rank_range()
        return stop - start

    def shard_order(self) -> list[int]:
        """This epoch's shard order, the same in every rank and worker."""
        order = list(range(len(self.records.shards)))
        if self.shuffle:
            random.Random(f"{self.seed}/{self.epoch}").shuffle(order)
        return order

    def __iter__(self) -> Iterator:
        worker = get_worker_info()
        worker_id, num_workers = (worker.id, worker.num_workers) if worker is not None else (0, 1)
        start, stop = _part(*self._rank_range(), worker_id, num_workers)
        records = self.records.iter_range(start, stop, self.shard_order())
        if self.shuffle and self.shuffle_buffer > 1:
            rng = random.Random(f"{self.seed}/{self.epoch}/{self.rank}/{worker_id}")
            records = _shuffled(records, self.shuffle_buffer, rng)
        for record in records:
            yield self._samples(record)


def _shuffled(items: Iterator, buffer_size: int, rng: random.Random) -> Iterator:
    """`items` through a shuffle buffer of `buffer_size`: each item out is a random one of those held."""
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
