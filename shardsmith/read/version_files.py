"""What every reader opens after the version (shardsmith/output_folder/opening.py `open_version`, which turns a
build id or a tag's name into a build folder): the read-side commands' `--version` folder, a split's shard files,
and the cheap checks that those files are the ones metadata.json lists. Used by `load()`, `records()` (and
through it the PyTorch and Grain readers and `index`), `verify`, `inspect` and `shardsmith.tfds_dirs`.

Guarantees: every reader says the same one line for the same version (open_version's). A split's shard files are
those metadata.json lists, in shard order, never globbed, and each lies in the version's folder.

The shard checks (`check_shards`, for `load()`) read through TensorFlow's file systems, imported inside them,
except on gs://, where they ask Cloud Storage for each object's metadata (its size and CRC32C) and read no shard
byte: the shard's first block is then fetched once, by whoever reads the shard.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.format.metadata_schema import Metadata, ShardEntry
from shardsmith.format.naming import canonical_split
from shardsmith.output_folder import dataset_dir, open_version, shard_file_path
from shardsmith.storage import is_s3

SHARDS_CHECKED_AT_ONCE = 16  # check_shards: shards whose first record is read at once (on gs://, a request each)


def resume_advice(output_dir: str, build_id: str) -> str:
    """What a reader whose saved state is of version `build_id` can do: pass `version=` while the version is
    kept (and tag it, so that it stays), or, when retention removed it or it is not there, nothing but start over."""
    try:
        open_version(output_dir, build_id)
    except (FileNotFoundError, ValueError) as e:
        return f"it cannot be resumed ({str(e).split(';')[0]})"
    return (f"pass version={build_id!r} to resume it (kept now; `shardsmith tag {output_dir} {build_id} NAME` keeps "
            "it from retention)")


def version_folder(output_dir: str, version: str | None) -> str:
    """The folder the read-side commands read for `--version` (None: `output_dir`, the published build): the
    version's build folder, whose own metadata.json describes it; UsageError (one line, the same as every
    reader's, from `open_version`) for a name that is not a kept version or a tag."""
    output_dir = os.fspath(output_dir).rstrip("/")
    if version is None:
        return output_dir
    try:
        return open_version(output_dir, version).folder
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None


@dataclass(frozen=True)
class ShardFile:
    """A shard's entry in metadata.json and its file in the build's folder."""

    path: str
    entry: ShardEntry


def split_name(split: str, metadata: Metadata) -> str:
    """The dataset's name for `split`: the split itself, or what a spelling `build` accepts (val, eval,
    training, TEST, ...) means; an unknown one is left for split_shards to refuse."""
    if split in metadata.splits:
        return split
    return canonical_split(split) or split


def split_shards(output_dir: str, metadata: Metadata, split: str) -> list[ShardFile]:
    """The split's shards from metadata.json, in shard order, each with its file in the build's folder.
    Raises ValueError for an unknown split or a file name that would leave the folder."""
    splits = metadata.splits
    if split not in splits:
        raise ValueError(f"split {split!r} is not in this dataset; it has {', '.join(splits) or 'no splits'}")
    folder = dataset_dir(output_dir, metadata)
    return [ShardFile(shard_file_path(folder, shard), shard) for shard in splits[split].shards]


class DatasetChanged(RuntimeError):
    """A shard file is not what metadata.json says: the build was retired, replaced or damaged under a reader."""


def check_shards(shards: list[ShardFile], compression: str) -> None:
    """Each shard file exists with the byte count metadata.json records and is the file this build wrote, the
    shards in parallel, before any record is read. On gs:// with a recorded `crc32c`: the object's size and
    CRC32C, from one metadata request (Cloud Storage's own checksum of the object: no byte of the shard is
    fetched, and any other file of the same size differs). Otherwise: the size, and the `first_key`
    (image/key/sha256) of its first record, read through TensorFlow's file systems (`compression`: tf.data's
    "GZIP" or ""). Raises DatasetChanged naming the first shard, in shard order, that differs. Metadata written
    before `crc32c` and `first_key` existed is checked for sizes only."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, min(len(shards), SHARDS_CHECKED_AT_ONCE))) as pool:
        for problem in pool.map(lambda shard: _shard_problem(shard, compression), shards):
            if problem:
                raise DatasetChanged(problem)


def _size_problem(shard: ShardFile) -> str | None:
    if is_s3(shard.path):  # TensorFlow has no s3:// file system: shardsmith.storage's
        size = storage.look_up(shard.path).size
    else:
        import tensorflow as tf

        try:
            size = tf.io.gfile.stat(shard.path).length
        except tf.errors.NotFoundError:
            size = None
    if size is None:
        return f"{shard.path} is missing: the dataset was changed or removed"
    if size != shard.entry.num_bytes:
        return (f"{shard.path} holds {size} bytes, metadata.json says {shard.entry.num_bytes}: the file was changed "
                "or cut short")
    return None


def _shard_problem(shard: ShardFile, compression: str) -> str | None:
    if storage.is_cloud_storage(shard.path) and shard.entry.crc32c is not None:
        checked = _cloud_object_problem(shard)
        if checked is not None:
            return checked or None
    problem = _size_problem(shard)
    expected = shard.entry.first_key
    if problem or expected is None:
        return problem
    return first_key_problem(shard.path, _first_key(shard.path, compression), expected)


def _cloud_object_problem(shard: ShardFile) -> str | None:
    """Why the gs:// object is not the shard metadata.json lists, from its metadata alone (one request): "" when
    it is, None when Cloud Storage gives no CRC32C for it (the caller then reads its first record)."""
    found = storage.cloud_object(shard.path)
    if found is None:
        return f"{shard.path} is missing: the dataset was changed or removed"
    if found.size != shard.entry.num_bytes:
        return (f"{shard.path} holds {found.size} bytes, metadata.json says {shard.entry.num_bytes}: the file was "
                "changed or cut short")
    crc32c = found.crc32c
    if crc32c is None:
        return None
    if crc32c != shard.entry.crc32c:
        return (f"{shard.path}: its CRC32C is {crc32c}, metadata.json says {shard.entry.crc32c}: {NOT_OURS}")
    return ""


NOT_OURS = "not the file this build wrote (copied in from another build?)"


def first_key_problem(path: str, key: str | None, expected: str | None) -> str | None:
    """Why a shard whose first record carries image/key/sha256 `key` (None: none readable) is not the file
    metadata.json lists with `expected` (None: metadata from before first keys; nothing is checked); None when
    it is. Every reader says this same line."""
    if expected is None or key == expected:
        return None
    found = "no readable first record" if key is None else f"first record is image {key[:16]}..."
    return f"{path}: its {found}, metadata.json says {expected[:16]}... (image/key/sha256): {NOT_OURS}"


def _first_key(path: str, compression: str) -> str | None:
    """The image/key/sha256 of a shard's first record, read with the TF-free framing reader through tf.io.gfile
    (local or gs://; shardsmith.storage for s3://); None when the first record cannot be read or carries none."""
    import gzip
    import zlib

    import tensorflow as tf
    from google.protobuf.message import DecodeError

    from shardsmith.format.example import SHA256, parse_example
    from shardsmith.format.record_file import TFRECORD, FramingError

    opener = storage.open_read if is_s3(path) else lambda p: tf.io.gfile.GFile(p, "rb")
    try:
        with opener(path) as raw:
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "GZIP" else raw
            first = next(TFRECORD.iter_records(stream), None)
            values = parse_example(first) if first is not None else {}
    except (FramingError, DecodeError, OSError, EOFError, zlib.error, tf.errors.OpError):
        return None
    keys = values.get(SHA256) or [None]
    return keys[0].decode("utf-8", "replace") if keys[0] is not None else None
