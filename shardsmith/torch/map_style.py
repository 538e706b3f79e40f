"""The map-style dataset (`ShardDataset`): record i of a split read at random through the shards' index files,
and its sampler for elastic resume (`ElasticSampler`).

Guarantee: `dataset[i]` is record i of the split in shard order, whatever sampler picks it; its state is the build
alone (the position is the sampler's), and a state of another build or split is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch.utils.data import Dataset

from shardsmith import elastic
from shardsmith.read.record_sequence import Records
from shardsmith.torch.build_state import build_identity, check_build
from shardsmith.torch.ranks import distributed
from shardsmith.torch.samples import Samples


class ShardDataset(Dataset):
    """Map-style: record i of the split (shard order), read at random through the index; see the module."""

    def __init__(self, output_dir: str, split: str = "train", *, version: str | None = None,
                 image_size: int | Sequence[int] | None = None, channels: int = 3, dtype: str = "uint8",
                 transform: Callable | None = None, target_transform: Callable | None = None,
                 features: bool = False):
        self.records = Records(output_dir, split, version)
        self._samples = Samples(self.records, image_size, channels, dtype, transform, target_transform, features)
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
        return build_identity(self.records, self.build_id)

    def load_state_dict(self, state: dict) -> None:
        """Checks that `state` was saved reading this build and split: ValueError (one line, naming the
        `version=` that reads the saved build) when not, since the sampler's indices would then pick other
        records."""
        check_build(self.records, self.build_id, state)


class ElasticSampler(elastic.ElasticSampler):
    """A `ShardDataset`'s sampler whose epoch order depends on the seed and epoch alone: a job stopped on W workers
    and R ranks resumes on any W' and R' (shardsmith/elastic.py). `rank` and `world_size` default to
    torch.distributed's, as `StreamingShardDataset`'s do."""

    def __init__(self, dataset: ShardDataset, *, shuffle: bool = True, seed: int = 0, rank: int | None = None,
                 world_size: int | None = None):
        rank, world_size = distributed(rank, world_size)
        super().__init__(dataset, shuffle=shuffle, seed=seed, rank=rank, world_size=world_size)
