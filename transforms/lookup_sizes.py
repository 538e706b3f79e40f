"""A metadata lookup (no read) of each image file: its size in bytes, or why it cannot be used. A row whose size
was looked up as it was parsed (shardsmith/shard_writer/parallel_parse.py) is only judged.

Missing, empty and oversized files leave here as error rows, before placement, so that they do not leave
holes in otherwise balanced shards. Sizes feed the shard count (--target_shard_mb). Lookups of remote
objects run MAX_LOOKUPS_IN_FLIGHT at a time, so object-store latency does not serialize them.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from shardsmith.rows import ErrorRow, ManifestRow, RowBatch
from shardsmith.settings import RecordSettings
from shardsmith.storage import FileLookup, is_remote, look_up
from transforms import ERRORS
from transforms.metrics import rejected
from transforms.row_coder import of_batches
from transforms.thread_pool import ThreadPoolDoFn

STAGE = "lookup"
MAX_LOOKUPS_IN_FLIGHT = 32


class LookupSizesFn(ThreadPoolDoFn):
    """RowBatch -> the batch's usable rows with `size` set (one RowBatch), and ErrorRows tagged `errors`."""

    pool_size = MAX_LOOKUPS_IN_FLIGHT

    def __init__(self, max_image_bytes: int):
        super().__init__()
        self._max_image_bytes = max_image_bytes

    def process(self, batch: RowBatch) -> Iterator:
        uris = [row.resolved_uri for row in batch if row.size < 0]  # a size found as the row was parsed stands
        remote = any(is_remote(u) for u in uris)
        found = iter(list(self._pool.map(look_up, uris)) if remote else [look_up(u) for u in uris])
        sized = RowBatch()
        for row in batch:
            judged = self._judge(row, FileLookup(row.size) if row.size >= 0 else next(found))
            if isinstance(judged, ManifestRow):
                sized.append(judged)
            else:
                yield judged
        if sized:
            yield sized

    def _judge(self, row: ManifestRow, lookup: FileLookup):
        size = lookup.size
        if lookup.not_regular:
            return self._error(row, "file is not a regular file", lookup.not_regular)
        if size is None:
            return self._error(row, "file not found", row.resolved_uri)
        if size == 0:
            return self._error(row, "file is empty")
        if size > self._max_image_bytes:
            return self._error(
                row, "file is larger than --max_image_bytes",
                f"{size} bytes > {self._max_image_bytes} bytes",
            )
        return row if row.size == size else row.replaced(size=size)

    @staticmethod
    def _error(row: ManifestRow, reason: str, detail: str = "") -> beam.pvalue.TaggedOutput:
        return rejected(ErrorRow.for_row(row, STAGE, reason, detail))


class LookupSizes(beam.PTransform):
    def __init__(self, records: RecordSettings):
        super().__init__()
        self._max_image_bytes = records.max_image_bytes

    def expand(self, batches):
        sized = batches | "LookupSizes" >> beam.ParDo(LookupSizesFn(self._max_image_bytes)).with_outputs(
            ERRORS, main="rows"
        )
        of_batches(sized.rows)
        return sized
