"""Detection: the box lines of one image become one row, before any placement.

A detection manifest holds one line per box; this stage groups the lines by (manifest, image URI) and merges
them (shardsmith/manifest/annotations.py merge_box_rows), or rejects every line of an image when one of its boxes is
bad. Memory: the lines of one image at a time; rows only, never image bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import apache_beam as beam

from shardsmith.manifest import ManifestFormat, merge_box_rows
from shardsmith.rows import ROWS_PER_BATCH, ErrorRow, ManifestRow, RowBatch
from transforms import ERRORS, StageOutputs
from transforms.metrics import rejected
from transforms.row_coder import of_batches


def _merged(lines: Iterable[ManifestRow], delimiter: str) -> Iterator:
    for item in merge_box_rows(lines, delimiter):
        yield rejected(item) if isinstance(item, ErrorRow) else item


class GroupBoxRows(beam.PTransform):
    """RowBatches of box lines -> RowBatches of images (rows merged per manifest and image URI), with
    ErrorRows on the `errors` output. Memory: the lines of one image at a time, never image bytes."""

    def __init__(self, manifest: ManifestFormat):
        super().__init__()
        self._delimiter = manifest.list_delimiter

    def expand(self, batches):
        merged = (
            batches
            | "KeyByImage" >> beam.FlatMap(lambda batch: (((r.source_index, r.resolved_uri), r) for r in batch))
            | "LinesOfImage" >> beam.GroupByKey()
            | "MergeLines" >> beam.FlatMap(lambda item: _merged(item[1], self._delimiter))
            .with_outputs(ERRORS, main="rows")
        )
        rows = (merged.rows
                | "BatchImages" >> beam.BatchElements(min_batch_size=1, max_batch_size=ROWS_PER_BATCH)
                | "AsRowBatches" >> beam.Map(RowBatch))
        of_batches(rows)
        return StageOutputs(rows, merged[ERRORS])
