"""A shard's record index, `<shard file name>.idx` beside the shard: one line per record, in file order,

    <offset> <length>\\n

where offset is the byte position of the record's length field in the (uncompressed) shard and length the
record's whole size with its 16 framing bytes (12 + data + 4). This is the text format NVIDIA DALI's
`readers.tfrecord` and the `tfrecord` package read (their `tfrecord2idx` writes it), so either reads a
shardsmith shard at random with the file the build wrote. Gzip shards have no index: offsets into a gzip
stream cannot be sought.

The writer computes an index from the records as it frames them (`RecordIndex.add`), never by reading the file
back; `verify` and `shardsmith index` compute it from the records they read, with the same method.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from shardsmith.format.record_file import TFRECORD

FRAMING_BYTES = TFRECORD.framing_bytes  # DALI's and the `tfrecord` package's index counts TFRecord's framing


class IndexFileError(ValueError):
    """An index file that is not one: the message names the file and the line, in one line."""


@dataclass
class RecordIndex:
    """The (offset, length) of each record of one shard, in file order."""

    offsets: list[int] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    def add(self, data_length: int) -> None:
        """Appends the record that follows the last one, holding `data_length` bytes of data."""
        offset = self.offsets[-1] + self.lengths[-1] if self.offsets else 0
        self.offsets.append(offset)
        self.lengths.append(data_length + FRAMING_BYTES)

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return zip(self.offsets, self.lengths, strict=True)

    @property
    def end(self) -> int:
        """The byte after the last record: the shard's size when the index covers it whole."""
        return self.offsets[-1] + self.lengths[-1] if self.offsets else 0

    def to_bytes(self) -> bytes:
        """The index file's bytes: ASCII, one `offset length` line per record, each ending in a newline."""
        return "".join(f"{offset} {length}\n" for offset, length in self).encode("ascii")

    @classmethod
    def parse(cls, data: bytes, path: str) -> RecordIndex:
        """The index held by an index file's bytes; IndexFileError, naming `path` and the line, when a line is
        not two whole numbers or a record does not start where the one before it ends."""
        index = cls()
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        for number, line in enumerate(lines, start=1):
            parts = line.split()
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                raise IndexFileError(f"{path} line {number} is {line[:60]!r}, not '<offset> <length>'")
            offset, length = int(parts[0]), int(parts[1])
            if offset != index.end or length < FRAMING_BYTES:
                raise IndexFileError(f"{path} line {number}: record at {offset} of {length} bytes does not follow "
                                     f"the one before it (which ends at {index.end})")
            index.offsets.append(offset)
            index.lengths.append(length)
        return index
