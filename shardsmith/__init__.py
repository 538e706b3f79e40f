"""shardsmith: balanced, shuffled, sharded TFRecords from an image manifest.

`shardsmith.load(out, split)` reads a finished build back as a `tf.data.Dataset`; `shardsmith.records(out, split)`
as a sequence of dicts, without TensorFlow (`shardsmith.torch` and `shardsmith.grain` build on it);
`shardsmith.decode_image(data, size)` decodes a record's image with Pillow; `shardsmith.published_dir(out)` is the
folder of the build `out` publishes (for labels.txt, errors.jsonl); `shardsmith.tfds_dirs(out)` the folders
TFDS's `builder_from_directories` reads the version from.
Importing this package is cheap: TensorFlow is imported when `load` runs, not before.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["decode_image", "load", "published_dir", "records", "tfds_dirs"]


def load(*args, **kwargs):
    """The dataset at `output_dir` as a tf.data.Dataset (see its docstring)."""
    from shardsmith.read.load import load as _load

    return _load(*args, **kwargs)


def published_dir(output_dir):
    """The folder of the build `output_dir` publishes (the one metadata.json names)."""
    from shardsmith.output_folder import published_dir as _published_dir

    return _published_dir(output_dir)


def tfds_dirs(output_dir, version=None):
    """The folders to pass to `tfds.builder_from_directories` to read the published version (or the kept
    `version`) with TensorFlow Datasets (shardsmith/read/tfds_folders.py)."""
    from shardsmith.read.tfds_folders import tfds_dirs as _tfds_dirs

    return _tfds_dirs(output_dir, version)


def records(output_dir, split="train", version=None):
    """A split's records as a sequence of dicts, TensorFlow-free, CRCs checked (shardsmith/read/record_sequence.py)."""
    from shardsmith.read.record_sequence import records as _records

    return _records(output_dir, split, version)


def decode_image(data, size=None, channels=3):
    """An encoded image as a height x width x channels uint8 numpy array, with Pillow (shardsmith/read/images.py)."""
    from shardsmith.read.images import decode_image as _decode_image

    return _decode_image(data, size, channels)
