"""One shard written by two writer processes, so that the last shard of a local build does not keep one core
busy while the others have nothing left to write.

The shard's rows, in record order, are cut in two (`cut`). The head writer writes the first part into the shard's
temporary file, closes it and reports how far it got (`HeadPart`: the file's length and running CRC32C, and its
records' index, row list, counts and outcome). Meanwhile the tail writer reads, checks and encodes the second
part, holding the framed records in memory (`PreparedTail`). Given the head's report, it appends them at the
file's end, continues the checksum, writes the index file and row list of the whole shard and renames it into
place (`finish_shared`).

Guarantees: the shard's bytes, index file, row list and result are those `write_shard_file` writes from the same
rows; each image is read once and written once, by one of the two. The tail writer checks the file it opened:
its size must be the head's length, else nothing is renamed. A failure of either part leaves at most a temporary
file (removed when the build is published) and the launcher writes the shard whole instead
(shardsmith/core/shard_worker.py). Memory: the tail writer holds its part's framed records, at most
MAX_SHARED_TAIL_BYTES of images. Only a local, uncompressed shard is shared (`can_share`): appending at an offset
needs a local file, and a gzip stream cannot be continued by another process.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.core.rows import PlacedRow
from shardsmith.core.shard_file import (
    ShardOutcome,
    ShardOutput,
    ShardRecords,
    WriterConfig,
    finished,
    placed_in_order,
    published,
    shard_output,
    shard_records,
)
from shardsmith.format.file_checksum import Crc32c
from shardsmith.format.naming import shard_file_name

# A shard with fewer rows is written whole: cutting it saves less than the second process costs to take it up.
MIN_ROWS_TO_SHARE = 64
# Bounds the image bytes the tail writer holds in memory until the head's end is known.
MAX_SHARED_TAIL_BYTES = 256 << 20


class SharedShardError(RuntimeError):
    """The two parts of a shared shard do not fit together (the head's file is not as the head left it)."""


@dataclass
class HeadPart:
    """What the head writer left: its temporary file, that file's length and running CRC32C, and its records."""

    temp_path: str
    length: int
    crc32c: int
    records: ShardRecords


@dataclass
class PreparedTail:
    """The tail's framed records (each as its pieces, in order) and what writing them will have produced."""

    pieces: list[tuple[bytes, ...]]
    records: ShardRecords


def can_share(config: WriterConfig, head: list[PlacedRow], tail: list[PlacedRow]) -> bool:
    """Whether the shard cut into `head` and `tail` may be written by two processes (the module's docstring)."""
    if len(head) + len(tail) < MIN_ROWS_TO_SHARE or not head or not config.file_format.indexable:
        return False
    if config.records.compression == "gzip" or storage.is_remote(config.output_dir):
        return False
    return sum(max(p.row.size, 0) for p in tail) <= MAX_SHARED_TAIL_BYTES


def cut(dealt: Iterable[Iterable[PlacedRow]]) -> tuple[list[PlacedRow], list[PlacedRow]]:
    """A shard's rows in record order, cut in two halves (head, tail)."""
    ordered = placed_in_order(dealt)
    middle = len(ordered) // 2
    return ordered[:middle], ordered[middle:]


def write_head(config: WriterConfig, split: str, rows: list[PlacedRow]) -> HeadPart:
    """Writes the head's records into a new temporary file of the shard and closes it, unrenamed."""
    if config.lock is not None:
        config.lock.check()
    ordered = placed_in_order([rows])
    output = shard_output(config, split, ordered)
    try:
        with output.open_temporary() as out:
            records = shard_records(config, split, ordered, out.write_all)
            crc32c = out.running_crc32c()
    except BaseException:
        output.discard_temporary()
        raise
    return HeadPart(output.temp_path, records.index.end, crc32c, records)


def prepare_tail(config: WriterConfig, split: str, rows: list[PlacedRow]) -> PreparedTail:
    """Reads, checks and encodes the tail's rows, keeping their framed records in memory."""
    pieces: list[tuple[bytes, ...]] = []
    records = shard_records(config, split, placed_in_order([rows]), pieces.append)
    return PreparedTail(pieces, records)


def finish_shared(config: WriterConfig, split: str, shard: int, num_shards: int, head: HeadPart,
                  tail: PreparedTail) -> ShardOutcome:
    """Appends the tail's records to the head's file, then writes the whole shard's index file and row list and
    renames it into place. SharedShardError (and nothing renamed) when the file is not the head's length."""
    if config.lock is not None:
        config.lock.check()
    final_name = shard_file_name(config.name, split, shard, num_shards, config.records.compression,
                                 config.generation, config.file_format)
    output = ShardOutput(config.output_dir, final_name, config.records.compression, temp_path=head.temp_path)
    try:
        with open(head.temp_path, "r+b") as file:
            size = os.fstat(file.fileno()).st_size
            if size != head.length:
                raise SharedShardError(f"{head.temp_path} holds {size} bytes where the head writer wrote "
                                       f"{head.length}")
            file.seek(head.length)
            checksum = Crc32c(start=head.crc32c)
            for pieces in tail.pieces:
                for piece in pieces:
                    checksum.update(piece)
                    file.write(piece)
        output.checksum = checksum.hexdigest()
        records = head.records.then(tail.records)
        index_file = finished(output, records, config)
    except BaseException:
        output.discard_temporary()
        raise
    return published(output, records, index_file, split, shard, num_shards)
