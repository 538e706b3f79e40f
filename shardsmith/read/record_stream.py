"""Reading a build's records back without TensorFlow: each shard streamed (decompressed for .gz) with its
checksums checked, each record parsed by the format's own Example class. Used by verify and inspect.

Memory: one record at a time (plus a 1 MiB read buffer); never a shard.
"""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.format.example import (
    BOX_KEYS,
    BOX_LABEL,
    BOX_LABEL_TEXT,
    FILENAME,
    IMAGE,
    LABEL,
    MASK,
    URI,
    feature_values,
)
from shardsmith.format.metadata_schema import Metadata
from shardsmith.format.record_file import RecordFileFormat, record_file
from shardsmith.output_folder import dataset_dir, shard_file_path
from shardsmith.rows import placing_label_id

READ_CHUNK = 1 << 20  # bytes hashed at a time when the rest of a stream is read


def open_shard(path: str, compression: str):
    """A binary stream of the shard's TFRecord bytes: the raw file, or its gzip decompression (streamed)."""
    return decompressed(open_raw(path), compression)


def open_raw(path: str):
    """The shard file's bytes as stored (local or gs://), buffered for the framing's small reads."""
    return storage.open_read(path, buffered=True)


def decompressed(raw, compression: str):
    """The TFRecord bytes of a raw shard stream: itself, or its gzip decompression (streamed)."""
    return gzip.GzipFile(fileobj=raw, mode="rb") if compression == "gzip" else raw


class HashingReader:
    """A binary stream whose bytes pass through `digest` (SHA-256 unless given: hashlib's update/hexdigest) as
    they are read; `rest_hexdigest()` reads what is left and gives the digest of the whole stream. Every other
    attribute is the stream's."""

    def __init__(self, stream, digest=None):
        self._stream = stream
        self._digest = digest if digest is not None else hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self._digest.update(data)
        return data

    def rest_hexdigest(self) -> str:
        while self.read(READ_CHUNK):
            pass
        return self._digest.hexdigest()

    def __enter__(self) -> HashingReader:
        return self

    def __exit__(self, *exc) -> None:
        self._stream.close()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def shard_records(path: str, compression: str, file_format: RecordFileFormat) -> Iterator[bytes]:
    """Every record of one shard file, streamed, checksums checked."""
    with open_shard(path, compression) as stream:
        yield from file_format.iter_records(stream)


@dataclass(frozen=True)
class Record:
    shard: int
    label: int  # the label the record was placed by (with several labels, the rarest; see transforms/labels.py)
    filename: str
    encoded: bytes = b""
    boxes: tuple[tuple[float, float, float, float, str], ...] = ()  # detection: (xmin, ymin, xmax, ymax, label)
    mask: bytes = b""  # segmentation: the class-id PNG


def placed_label(values: dict[str, list], metadata: Metadata) -> int:
    """The label id a record was placed by: its only label, or the rarest of several (lowest id on ties)."""
    return placing_label_id(values[BOX_LABEL if BOX_LABEL in values else LABEL], metadata.label_image_counts)


# The keys a Record is made of: the rest of a record is left unparsed (a third of a whole parse, on a photo).
RECORD_KEYS = (FILENAME, LABEL, BOX_LABEL)
RECORD_IMAGE_KEYS = (*RECORD_KEYS, IMAGE, URI, *BOX_KEYS, BOX_LABEL_TEXT, MASK)


def split_records(output_dir: str, metadata: Metadata, split: str, with_images: bool = False) -> Iterator[Record]:
    """Every record of a split in shard order, parsed with shardsmith's own Example class (only RECORD_KEYS, and
    with images RECORD_IMAGE_KEYS)."""
    compression, file_format = metadata.compression_or_default, record_file(metadata.format)
    keys = RECORD_IMAGE_KEYS if with_images else RECORD_KEYS
    for index, shard in enumerate(metadata.splits[split].shards):
        for data in shard_records(shard_file_path(dataset_dir(output_dir, metadata), shard), compression,
                                  file_format):
            values = feature_values(data, keys)
            filename = values[FILENAME][0].decode("utf-8", "replace")
            if not with_images:
                yield Record(index, placed_label(values, metadata), filename)
                continue
            yield Record(index, placed_label(values, metadata), filename, _image_bytes(values), _boxes(values),
                         values[MASK][0] if MASK in values else b"")


def _boxes(values: dict[str, list]) -> tuple:
    if BOX_LABEL_TEXT not in values:
        return ()
    texts = [t.decode("utf-8", "replace") for t in values[BOX_LABEL_TEXT]]
    corners = [values[key] for key in BOX_KEYS]
    return tuple(zip(*corners, texts, strict=True))


def _image_bytes(values: dict[str, list]) -> bytes:
    """The record's image: its bytes, or (--image_mode path) the file at image/uri; b"" if that is gone."""
    if IMAGE in values:
        return values[IMAGE][0]
    from shardsmith.images.load_images import ImageRejected, read_input_file

    try:
        return read_input_file(values[URI][0].decode(), 1 << 62)
    except (OSError, ImageRejected):  # ImageRejected: no longer a regular file
        return b""
