"""Rewriting a shard of an earlier generation without its removed records (`--incremental`), from the shard's own
records: no image is read, no record is re-encoded.

Guarantees: the records kept are copied byte for byte, in their order; the new shard, its index file and its row
list go into the build's own folder under the shard's name (temporary names, renamed; the row list and index
before the shard), so the earlier build's files are never touched and readers of earlier versions keep theirs.
The source shard's checksums are checked as it is read, and a row list that does not match its shard's records
stops the build (RowListError): each record is checked against its line (URI, SHA-256, label:
shardsmith/versions/row_check.py) and the lines are counted, so a version is never made from a shard it cannot
account for. A lost row list is rebuilt from the records where they hold it exactly, and written beside the
rewritten shard. Memory: one record at a time, plus the shard's row list.
"""

from __future__ import annotations

from collections import Counter

from shardsmith import fault_injection, storage
from shardsmith.format.example import SHA256, parse_example
from shardsmith.format.naming import row_list_name
from shardsmith.format.record_index import RecordIndex
from shardsmith.format.row_list import RowListError, parse_row_list
from shardsmith.rows import ShardResult
from shardsmith.shard_writer.shard_output import ShardOutput
from shardsmith.shard_writer.writer_config import WriterConfig
from shardsmith.versions import row_check
from shardsmith.versions.row_check import Refused


def rewrite_shard(config: WriterConfig, split: str, source_folder: str, file: str, removed_positions: set[int],
                  why_not_rebuilt: str = "") -> ShardResult:
    """Writes shard `file` of `split` (in `source_folder`) into config.files_dir without the records at
    `removed_positions`; returns what was written (`shard` and `num_shards` are 0: the caller places it), or, when
    every record is removed, writes nothing and returns a result of no records (the version drops the shard). Each
    record is checked against its row list's line (`check_record`); a lost row list is rebuilt from the records
    as they are copied, unless `why_not_rebuilt` (shardsmith/versions/row_check.py `unrecoverable`) says it cannot
    be."""
    if config.lock is not None:
        config.lock.check()
    source = storage.join(source_folder, file)
    list_path = storage.join(source_folder, row_list_name(file))
    data = storage.read_bytes(list_path)
    if data is None and why_not_rebuilt:
        raise row_check.missing(list_path, why_not_rebuilt)
    listed = None if data is None else parse_row_list(data, list_path)
    compression = config.records.compression
    frame = config.file_format.frame
    output = ShardOutput(config.files_dir, file, compression)
    kept, label_counts, index = [], Counter(), RecordIndex()
    first_key = None
    count = 0
    try:
        with output.open_temporary() as out:
            for position, record in enumerate(row_check.shard_records(source, compression, config.file_format)):
                count += 1
                if listed is None:
                    row = row_check.listed_row(record, split, list_path, position)
                elif position < len(listed):
                    row = listed[position]
                    row_check.check_record(record, row, list_path, position, why_not_rebuilt)
                else:
                    continue  # counted: the row list is short, which fails below
                if position in removed_positions:
                    continue
                head, tail = frame(record)
                out.write(head)
                out.write(record)
                out.write(tail)
                index.add(len(record))
                kept.append(row)
                label_counts[row.label] += 1
                if first_key is None:
                    first_key = row.sha256 or parse_example(record)[SHA256][0].decode("ascii")
                fault_injection.reached("mid_rewrite")
        if listed is not None and count != len(listed):
            raise RowListError(f"{list_path} lists {len(listed)} rows but {source} holds {count} records; "
                               f"{row_check.fix(why_not_rebuilt)}")
        if not kept:  # every record removed: the version lists no shard for it, as a full build of its rows
            output.discard_temporary()
            return ShardResult(split, 0, 0, file, 0, 0, {}, 0, "", None, None)
        index_file = output.finish(config, index, kept)
    except BaseException:
        output.discard_temporary()
        raise
    num_bytes = output.publish()
    return ShardResult(split, 0, 0, file, len(kept), num_bytes, dict(sorted(label_counts.items())),
                       sum(row.lines for row in kept), output.crc32c, first_key, index_file)


def rewrite_in_writer_process(config: WriterConfig, split: str, source_folder: str, file: str,
                              removed_positions: set[int], why_not_rebuilt: str = "") -> ShardResult | Refused:
    """rewrite_shard as a writer process's job (shardsmith/shard_writer/shard_worker.py): a RowListError comes back
    as a value (the pool reports any other failure with its traceback)."""
    try:
        return rewrite_shard(config, split, source_folder, file, removed_positions, why_not_rebuilt)
    except RowListError as e:
        return Refused(RowListError, str(e))


def _describe_rewrite(config: WriterConfig, split: str, source_folder: str, file: str, removed_positions: set[int],
                      why_not_rebuilt: str = "") -> str:
    return f"the rewrite of {split} shard {file} without {len(removed_positions)} removed records"


rewrite_in_writer_process.describe_job = _describe_rewrite  # for the pool's messages (shard_worker._Described)
