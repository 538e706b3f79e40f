"""A record as the PyTorch datasets yield it (`Samples`): the image decoded to a CHW tensor (or handed to
`transform`), with its target, or every key with `features=True`, text as str.

Guarantee: what a record becomes depends on the record and the dataset's arguments alone, the same in every
DataLoader worker and rank (the object is picklable for worker processes); a task with no single target is refused
at once unless `features=True`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from shardsmith.format.example import IMAGE, LABEL, MASK
from shardsmith.read.images import decode_pil, decode_reduced, image_bytes
from shardsmith.read.images import image_size as image_size_of
from shardsmith.read.record_sequence import Records

BINARY_KEYS = (IMAGE, MASK)  # bytes keys that are not text: `features=True` keeps them as bytes


class Samples:
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
    of a full decode and an antialiased resize (tests/read/test_torch_decode.py)."""
    pixels = torch.from_numpy(decode_reduced(data, size, channels)).permute(2, 0, 1)  # CHW view of HWC
    if size is not None and tuple(pixels.shape[1:]) != size:
        pixels = torch.nn.functional.interpolate(pixels[None], size=size, mode="bilinear", antialias=True,
                                                 align_corners=False)[0]
    return pixels.contiguous()
