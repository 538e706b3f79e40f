"""One shard written in parts at once, by several writer processes, then joined: so that the last shard of a local
build does not keep one core busy while the others have nothing left to write.

The shard's rows, in record order, are cut into consecutive runs (`cut`). Each part is written like a whole shard
(`write_part`: read, check, encode, frame) into a temporary file of the shard, and left unrenamed. Once all are
written, `join_parts` copies the later parts' bytes onto the end of the first's file (in the kernel,
`copy_file_range`: the bytes never come back to Python), works out the whole file's CRC32C from the parts'
(`crc32c_of_joined`), writes the shard's index file and row list and renames it into place; the later parts'
files are removed.

Guarantees: the shard's bytes, index file, row list and outcome are those `write_shard_file` writes from the same
rows (tests/stages/test_split_shard.py); each image is read once. The later parts' records are written twice: into
their part file, then copied by the kernel into the shard's, and the part file is removed at once (locally, usually
before its pages reach the disk); only the last shard of a build is written so. `join_parts` checks the files it
opened: each must be as long as its part's writer left it, else nothing is renamed. A failed part or join leaves
temporary files only, removed when the build is published, and the build fails as when a whole shard fails. Only a
local, uncompressed shard of a record format with an index is split (`num_parts`): an object store cannot append,
and a gzip stream cannot be cut in two.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.format.file_checksum import crc32c_of_joined
from shardsmith.rows import PlacedRow, RowBatch, SealedBatch
from shardsmith.shard_writer.shard_file import ShardOutcome, ShardRecords, placed_in_order, shard_output, write_records
from shardsmith.shard_writer.writer_config import WriterConfig

# Each part holds at least this many rows (a shard of fewer than twice as many is written whole): a smaller part
# saves less than handing it to another process and joining it costs.
MIN_ROWS_PER_PART = 32
# Bytes copied per copy_file_range call, and per read and write where the kernel cannot copy between the files.
COPY_CHUNK_BYTES = 16 << 20


class SplitShardError(RuntimeError):
    """A part's file is not as its writer left it (another process changed it): the shard is not renamed."""


@dataclass
class ShardPart:
    """What writing one part left: its temporary file, that file's CRC32C, and its records."""

    temp_path: str
    crc32c: int
    records: ShardRecords

    @property
    def length(self) -> int:
        """The file's length as its writer left it: the end of its last record."""
        return self.records.index.end


def num_parts(config: WriterConfig, num_rows: int, processes: int) -> int:
    """Into how many parts a shard of `num_rows` rows written with `config` by `processes` writer processes is cut:
    one per process, each of at least MIN_ROWS_PER_PART rows; 1 (written whole) where it cannot be split (module
    docstring)."""
    if not config.file_format.indexable or config.records.compression == "gzip" or storage.is_remote(config.files_dir):
        return 1
    return max(1, min(processes, num_rows // MIN_ROWS_PER_PART))


def cut(dealt: list[SealedBatch], parts: int) -> list[SealedBatch]:
    """A shard's rows in record order, cut into `parts` consecutive runs of sizes that differ by at most one, each
    sealed to travel to a writer."""
    ordered = placed_in_order(dealt)
    bounds = [len(ordered) * i // parts for i in range(parts + 1)]
    return [SealedBatch.of(RowBatch(ordered[start:end])) for start, end in zip(bounds, bounds[1:], strict=False)]


def write_part(config: WriterConfig, split: str, shard: int, rows: list[PlacedRow] | SealedBatch) -> ShardPart:
    """Writes the records of `rows` (a run of shard `shard`'s rows in record order) into a new temporary file of
    the shard and closes it, unrenamed."""
    if config.lock is not None:
        config.lock.check()
    ordered = placed_in_order([rows])
    output = shard_output(config, split, shard, ordered[0].num_shards)
    try:
        with output.open_temporary() as out:
            records = write_records(config, split, shard, ordered, out)
    except BaseException:
        output.discard_temporary()
        raise
    return ShardPart(output.temp_path, int(output.crc32c, 16), records)


def join_parts(config: WriterConfig, parts: list[ShardPart]) -> ShardOutcome:
    """The shard written as its parts are, one after the other: the later parts' bytes appended to the first's file,
    then its index file and row list written and the file renamed into place. SplitShardError (nothing renamed)
    when a part's file is not the length its writer left."""
    if config.lock is not None:
        config.lock.check()
    first, later = parts[0], parts[1:]
    placed = first.records.outcome.result
    output = shard_output(config, placed.split, placed.shard, placed.num_shards, temp_path=first.temp_path)
    try:
        _append(first, later)
        records, crc32c = first.records, first.crc32c
        for part in later:
            records = records.then(part.records)
            crc32c = crc32c_of_joined(crc32c, part.crc32c, part.length)
        output.checksum = f"{crc32c:08x}"
        index_file = output.finish(config, records.index, records.listed if config.list_rows else None)
        storage.delete([part.temp_path for part in later])
    except BaseException:
        output.discard_temporary()
        with contextlib.suppress(Exception):  # else swept with the build's other leftovers when it is published
            storage.delete([part.temp_path for part in later])
        raise
    return records.published(output, index_file)


def _append(first: ShardPart, later: list[ShardPart]) -> None:
    """Copies the files of `later` onto the end of `first`'s, in order, each checked as opened to be its part's
    length."""
    target = os.open(first.temp_path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        _check_length(target, first)
        at = first.length
        for part in later:
            source = os.open(part.temp_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _check_length(source, part)
                _copy(source, target, part.length, at)
            finally:
                os.close(source)
            at += part.length
    finally:
        os.close(target)


def _check_length(fd: int, part: ShardPart) -> None:
    size = os.fstat(fd).st_size
    if size != part.length:
        raise SplitShardError(f"{part.temp_path} holds {size} bytes where its writer wrote {part.length}: another "
                              "process changed it; nothing was published, run the build again")


def _copy(source: int, target: int, length: int, at: int) -> None:
    """`length` bytes from the start of `source` to `target` at offset `at`: in the kernel where it can, else read
    and written in chunks (another OS, or a filesystem the kernel cannot copy between)."""
    done = 0
    copy_file_range = getattr(os, "copy_file_range", None)
    while done < length and copy_file_range is not None:
        try:
            copied = copy_file_range(source, target, min(COPY_CHUNK_BYTES, length - done), done, at + done)
        except OSError:
            break  # EXDEV, EINVAL, ENOSYS...: the plain copy below goes on from where this stopped
        if copied == 0:
            break
        done += copied
    while done < length:
        chunk = os.pread(source, min(COPY_CHUNK_BYTES, length - done), done)
        if not chunk:
            raise SplitShardError(f"the part file ended {length - done} bytes early while it was copied")
        written = 0
        while written < len(chunk):
            written += os.pwrite(target, memoryview(chunk)[written:], at + done + written)
        done += len(chunk)
