"""Rewriting a shard of an earlier generation without its removed records (`--incremental`), from the shard's own
records: no image is read, no record is re-encoded.

Guarantees: the records kept are copied byte for byte, in their order; the new shard, its index file and its row
list go into the build's own folder under the shard's name (temporary names, renamed; the row list and index
before the shard), so the earlier build's files are never touched and readers of earlier versions keep theirs.
The source shard's checksums are checked as it is read, and a row list that does not match its shard's records
stops the build (RowListError): a version is never made from a shard it cannot account for. Memory: one record
at a time, plus the shard's row list.
"""

from __future__ import annotations

import gzip
from collections import Counter

from shardsmith import storage
from shardsmith.core import fault_injection
from shardsmith.core.rows import ShardResult
from shardsmith.core.shard_file import ShardOutput, WriterConfig
from shardsmith.format.example import SHA256, parse_example
from shardsmith.format.naming import row_list_name
from shardsmith.format.record_index import RecordIndex
from shardsmith.format.row_list import RowListError, parse_row_list
from shardsmith.format.tfrecord import frame, iter_records


def rewrite_shard(config: WriterConfig, split: str, source_folder: str, file: str,
                  removed_positions: set[int]) -> ShardResult:
    """Writes shard `file` of `split` (in `source_folder`) into config.output_dir without the records at
    `removed_positions`; returns what was written (`shard` and `num_shards` are 0: the caller places it)."""
    if config.lock is not None:
        config.lock.check()
    source = storage.join(source_folder, file)
    list_path = storage.join(source_folder, row_list_name(file))
    data = storage.read_bytes(list_path)
    if data is None:
        raise RowListError(f"{list_path} is missing: the shard's rows are not listed")
    listed = parse_row_list(data, list_path)
    compression = config.records.compression
    output = ShardOutput(config.output_dir, file, compression)
    kept, label_counts, index = [], Counter(), RecordIndex()
    first_key = None
    count = 0
    try:
        with output.open_temporary() as out, storage.open_read(source, buffered=True) as raw:
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if compression == "gzip" else raw
            for position, record in enumerate(iter_records(stream)):
                count += 1
                if position in removed_positions or position >= len(listed):
                    continue
                head, tail = frame(record)
                out.write(head)
                out.write(record)
                out.write(tail)
                index.add(len(record))
                row = listed[position]
                kept.append(row)
                label_counts[row.label] += 1
                if first_key is None:
                    first_key = parse_example(record)[SHA256][0].decode("ascii")
                fault_injection.reached("mid_rewrite")
        if count != len(listed):
            raise RowListError(f"{list_path} lists {len(listed)} rows but {source} holds {count} records")
        index_file = output.finish(config, index, kept)
    except BaseException:
        output.discard_temporary()
        raise
    num_bytes = output.publish()
    return ShardResult(split, 0, 0, file, len(kept), num_bytes, dict(sorted(label_counts.items())),
                       sum(row.lines for row in kept), output.sha256, first_key, index_file)
