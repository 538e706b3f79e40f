"""One compacted shard, start to finish: copy its placed records, in placement order, from the source shards of
the version being compacted (shardsmith/versions/compaction.py) into a temporary file, and rename it to its full
build's name. No image is read; of each record, only the values its row list's line is checked against are
parsed (`row_check.check_record`: URI, SHA-256 and labels; the first record's SHA-256 is metadata.json's
`first_key`). A compaction row carries only the first digits of its line's SHA-256: the compacted row list
lists the record's own, once it was found to start with them.

Guarantees: each record's framed bytes (length, its CRC, data, data CRC) are copied as read, after both CRCs
were checked and the record was found to be the one its row list's line describes (so no record is placed by
another's line), so the shard holds the bytes the source shards held; the shard, its index file and its row
list go into the compaction's own build folder (the row list and index before the shard, temporary names
renamed), and the lock is checked before the shard starts and before it is renamed. Memory: one shard's rows plus
MAX_RECORDS_IN_FLIGHT records.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from shardsmith import fault_injection, storage
from shardsmith.format.naming import shard_file_name
from shardsmith.format.record_file import FramingError, RecordFileFormat
from shardsmith.format.record_index import RecordIndex
from shardsmith.format.row_list import ListedRow, RowListError
from shardsmith.images.load_images import ordered_bounded_map
from shardsmith.progress_signal import ITEMS_DONE, Tally
from shardsmith.rows import PlacedRow, ShardResult
from shardsmith.shard_writer.shard_output import ShardOutput
from shardsmith.shard_writer.writer_config import WriterConfig
from shardsmith.versions import row_check
from shardsmith.versions.compaction import RecordRef
from shardsmith.versions.row_check import Refused

# Remote records read ahead of the writer (each is one ranged read); local ones are read one after the other.
MAX_RECORDS_IN_FLIGHT = 16


@dataclass(frozen=True)
class CompactionWriter:
    """Where compacted shards go (`writer.files_dir`, the compaction's build folder, with its lock) and the
    path of each source shard and of its row list, by its index in CompactionSource.shards."""

    writer: WriterConfig
    sources: tuple[str, ...]
    row_lists: tuple[str, ...]  # each source shard's row list, named when a record is not its line's
    why_not_rebuilt: str = ""  # shardsmith/versions/row_check.py `unrecoverable`, for the fix an error names


class SourceRecordError(ValueError):
    """A source shard's record is not intact where its index file says it is: the message names the shard."""


def _framed(file_format: RecordFileFormat, path: str, offset: int, length: int) -> bytes:
    with storage.open_read(path) as f:
        framed = file_format.read_framed(f, offset, length)
    try:
        file_format.unframe(framed, offset)  # both CRCs, and exactly one record at the index entry's place
    except FramingError as e:
        raise SourceRecordError(f"{path}: {e.reason} at byte {e.offset} (its index file's entry {offset} {length})"
                                "; nothing was published") from None
    return framed


def _framed_in_order(config: CompactionWriter, refs: list[RecordRef]) -> Iterator[bytes]:
    def read(ref: RecordRef) -> bytes:
        return _framed(config.writer.file_format, config.sources[ref.shard], ref.offset, ref.length)

    if not any(storage.is_remote(config.sources[ref.shard]) for ref in refs):
        yield from map(read, refs)
        return
    with ThreadPoolExecutor(MAX_RECORDS_IN_FLIGHT) as pool:
        yield from ordered_bounded_map(read, refs, pool, MAX_RECORDS_IN_FLIGHT)


def write_compacted_shard(config: CompactionWriter, split: str, shard: int,
                          dealt: Iterable[list[PlacedRow]], num_shards: int | None = None) -> ShardResult:
    """Writes shard `shard` of `split` from its placed rows (in any order, in any number of lists): the records
    they name, in placement order, under the full build's shard name. With no row (a shard of a split whose
    placed rows all failed at load), `num_shards` names the split's shard count and the shard is written empty,
    as a full build writes it."""
    writer = config.writer
    if writer.lock is not None:
        writer.lock.check()
    ordered = sorted((p for rows in dealt for p in rows), key=lambda p: p.order_key)
    num_shards = ordered[0].num_shards if ordered else num_shards
    name = shard_file_name(writer.name, split, shard, num_shards, writer.records.compression,
                           file_format=writer.file_format)
    output = ShardOutput(writer.files_dir, name, writer.records.compression)
    refs = [RecordRef.of(placed.row) for placed in ordered]
    label_counts: Counter[str] = Counter()
    index, listed = RecordIndex(), []
    first_key = None
    file_format = writer.file_format
    header, footer = file_format.header_bytes, file_format.footer_bytes
    copied = Tally(ITEMS_DONE)  # `shardsmith compact`'s progress line, when a local launcher watches
    try:
        with output.open_temporary() as out:
            for placed, ref, framed in zip(ordered, refs, _framed_in_order(config, refs), strict=True):
                row = placed.row
                checked = ListedRow(ref.identity, ref.lines, row.label, row.size, row.uri, ref.sha256_start)
                sha256 = row_check.check_record(memoryview(framed)[header:len(framed) - footer], checked,
                                                config.row_lists[ref.shard], ref.position, config.why_not_rebuilt)
                out.write(framed)
                index.add(len(framed) - header - footer)
                label_counts[row.label] += 1
                listed.append(ListedRow(ref.identity, ref.lines, row.label, row.size, row.uri,
                                        sha256 if ref.sha256_start else "", ref.signature))
                copied.add()
                if first_key is None:
                    first_key = sha256  # the record's key, as check_record read it
                fault_injection.reached("mid_shard")
        copied.flush()
        index_file = output.finish(writer, index, listed)
    except BaseException:
        output.discard_temporary()
        raise
    num_bytes = output.publish()
    return ShardResult(split, shard, num_shards, name, len(listed), num_bytes, dict(sorted(label_counts.items())),
                       sum(row.lines for row in listed), output.crc32c, first_key, index_file)


def copy_in_writer_process(config: CompactionWriter, split: str, shard: int,
                           dealt: Iterable[list[PlacedRow]]) -> ShardResult | Refused:
    """write_compacted_shard as a shard writer process's job (shardsmith/shard_writer/shard_worker.py): the refusals
    that name what to fix come back as values (the pool reports any other failure with its traceback)."""
    try:
        return write_compacted_shard(config, split, shard, dealt)
    except (RowListError, SourceRecordError) as e:
        return Refused(type(e), str(e))

