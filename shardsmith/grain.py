"""JAX input pipelines through Grain (`pip install grain`): a split of a shardsmith dataset as a Grain
`RandomAccessDataSource`, read at random through the shards' index files, without TensorFlow.

`ShardSource(out, split)` is the source (`__len__`, `__getitem__`, a `__repr__` for Grain's checkpoints;
picklable, for Grain's worker processes): item i is `{"image": uint8 array height x width x channels, "label":
int}` for record i of the split (`features=True`: every record key too), decoded as `shardsmith.torch` decodes
(a JPEG at libjpeg-turbo's reduced scale, as small as `image_size` allows: shardsmith/read/images.py
`decode_reduced`) and resized to `image_size` when given (Pillow's antialiased bilinear filter, within one level
of `shardsmith.torch`'s image on every pixel; without simplejpeg, Pillow's reduced-scale decode). `dataset(out,
split, seed=..., batch_size=...)` is the usual pipeline on it: an exact global shuffle per epoch (Grain's own, by
index), decode, batch. Grain is imported only by `dataset`: the source itself needs nothing but shardsmith, so it
also serves a plain numpy loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from shardsmith.format.example import LABEL
from shardsmith.read.images import decode_resized, image_bytes
from shardsmith.read.images import image_size as size_of
from shardsmith.read.record_sequence import Records

__all__ = ["ShardSource", "dataset"]


class ShardSource:
    """Record i of a split as {"image", "label"} numpy values; see the module's docstring."""

    def __init__(self, output_dir: str, split: str = "train", *, version: str | None = None,
                 image_size: int | Sequence[int] | None = None, channels: int = 3, features: bool = False):
        self.records = Records(output_dir, split, version)
        self.image_size, self.channels, self.features = image_size, channels, features
        self._size = size_of(image_size)
        if channels not in (1, 3, 4):
            raise ValueError(f"channels must be 1, 3 or 4, not {channels!r}")

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> dict:
        record = self.records[i]
        image = decode_resized(image_bytes(record), self._size, self.channels)
        if self.features:
            return {**record, "image": image}
        return {"image": image, "label": record[LABEL]}

    def __repr__(self) -> str:
        return (f"ShardSource({self.records.output_dir!r}, {self.records.split!r}, build "
                f"{self.records.folder.rsplit('/', 1)[-1]!r}, image_size={self.image_size!r}, "
                f"channels={self.channels}, features={self.features})")


def dataset(output_dir: str, split: str = "train", *, seed: int = 0, batch_size: int = 32,
            image_size: int | Sequence[int] | None = None, num_epochs: int = 1, shuffle: bool = True,
            drop_remainder: bool = False, version: str | None = None):
    """A `grain.MapDataset` of batches ({"image": uint8 [batch, height, width, 3], "label": int64 [batch]}) over
    `num_epochs` epochs: each epoch the whole split in a new order (Grain's shuffle by index, from `seed`), each
    record once, decoded, batched. `image_size` is needed to batch images of different sizes."""
    import grain

    records = grain.MapDataset.source(ShardSource(output_dir, split, version=version, image_size=image_size))
    if shuffle:
        records = records.shuffle(seed=seed)
    return records.repeat(num_epochs).batch(batch_size, drop_remainder=drop_remainder)
