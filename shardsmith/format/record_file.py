"""The record file behind one face: what every writer, reader, rewriter and compaction knows of the file that
holds the records (the shape of TFDS's `file_adapters` and mosaicml streaming's `format/<fmt>/`).

A format is a `RecordFileFormat`: its name (what metadata.json's `format` records, TFDS's `fileFormat`), the
word its shard files carry (`<name>-<split>.<file_suffix>-SSSSS-of-NNNNN`), how a record is framed (`frame`,
`frame_chunks`: the bytes written before and after it), how records are read back (`iter_records`, a stream;
`unframe`, one whole framed record as an index entry's range holds it; `read_framed`, such a range read from
a file; `tf_dataset`, the tf.data class that reads its files, which `load()` interleaves), the framing's size,
and whether its uncompressed files can be read at an offset (`indexable`).
`RECORD_FILES` is the table, keyed by the format name; `record_file` picks the entry for a metadata.json
(`format`, TFRecord when it records none). TFRecord (shardsmith/format/tfrecord.py) is the one format.

Every reader raises FramingError where a file's framing breaks, whatever the format.

Speed: the fields are the implementation's own functions, so a writer or reader that looks one up once per
shard (`frame_chunks = fmt.frame_chunks`) calls exactly what it would call without the face.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from shardsmith.format import tfrecord
from shardsmith.format.tfrecord import FramingError

__all__ = ["DEFAULT_FORMAT", "RECORD_FILES", "TFRECORD", "FramingError", "RecordFileFormat", "record_file"]


@dataclass(frozen=True)
class RecordFileFormat:
    """One record-file format: the face every module outside shardsmith/format/ uses."""

    name: str  # metadata.json's `format`, TFDS's `fileFormat`
    file_suffix: str  # shard file names: `<name>-<split>.<file_suffix>-SSSSS-of-NNNNN`
    indexable: bool  # an uncompressed file's records can be read at their index entries' offsets
    header_bytes: int  # framing before a record's data
    footer_bytes: int  # framing after it
    frame: Callable[[bytes], tuple[bytes, bytes]]  # (header, footer) to write around a record
    frame_chunks: Callable[[Sequence[bytes]], tuple[bytes, bytes]]  # the same for a record given in chunks
    iter_records: Callable[[BinaryIO], Iterator[bytes]]  # the records of a (decompressed) stream, checked
    unframe: Callable[[bytes, int], bytes]  # the data of one whole framed record at an offset, checked
    read_exact: Callable[[BinaryIO, int], bytes]  # up to n bytes, never allocating more than the file holds
    # The tf.data class that reads its files (`tf.data.<name>(files, compression_type=, buffer_size=)`), which
    # load() interleaves; None: load() streams them through `iter_records` instead. A name, not the class: the
    # format never imports TensorFlow.
    tf_dataset: str | None

    @property
    def framing_bytes(self) -> int:
        """The bytes a record's framing adds to its data."""
        return self.header_bytes + self.footer_bytes

    @property
    def shard_mark(self) -> str:
        """What stands between a shard file's `<name>-<split>` and its numbers."""
        return f".{self.file_suffix}-"

    def read_framed(self, stream: BinaryIO, offset: int, length: int) -> bytes:
        """The `length` framed bytes at `offset` of a seekable file (fewer only where the file ends), unchecked:
        `unframe` checks them."""
        stream.seek(offset)
        return self.read_exact(stream, length)


TFRECORD = RecordFileFormat(
    name="tfrecord",
    file_suffix="tfrecord",
    indexable=True,
    header_bytes=tfrecord.HEADER_BYTES,
    footer_bytes=tfrecord.FOOTER_BYTES,
    frame=tfrecord.frame,
    frame_chunks=tfrecord.frame_chunks,
    iter_records=tfrecord.iter_records,
    unframe=tfrecord.unframe,
    read_exact=tfrecord.read_exact,
    tf_dataset="TFRecordDataset",
)
RECORD_FILES: dict[str, RecordFileFormat] = {TFRECORD.name: TFRECORD}
DEFAULT_FORMAT = TFRECORD.name


def record_file(format_name: str | None) -> RecordFileFormat:
    """The format a metadata.json's `format` names (TFRecord when it names none); ValueError for a format this
    version of shardsmith does not know."""
    found = RECORD_FILES.get(format_name or DEFAULT_FORMAT)
    if found is None:
        raise ValueError(f"record file format {format_name!r} is not one this shardsmith reads "
                         f"({', '.join(RECORD_FILES)}): upgrade shardsmith")
    return found
