"""shardsmith: balanced, shuffled, sharded TFRecords from an image manifest.

`shardsmith.load(out, split)` reads a finished build back as a `tf.data.Dataset`; `shardsmith.published_dir(out)`
is the folder of the build `out` publishes (for TFDS's builder_from_directory, labels.txt, errors.jsonl).
Importing this package is cheap: TensorFlow is imported when `load` runs, not before.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["load", "published_dir"]


def load(*args, **kwargs):
    """The dataset at `output_dir` as a tf.data.Dataset (see its docstring)."""
    from shardsmith.read.load import load as _load

    return _load(*args, **kwargs)


def published_dir(output_dir):
    """The folder of the build `output_dir` publishes (the one metadata.json names)."""
    from shardsmith.format.build_folder import published_dir as _published_dir

    return _published_dir(output_dir)
