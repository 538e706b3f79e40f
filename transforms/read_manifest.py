"""Read manifests (each format's reader in shardsmith/core/manifest/) or class folders into batches of
ManifestRows, inside the pipeline.

The parsing is shardsmith.core.manifest's (one reader per format); this stage runs it on workers, one Source per
element, so the launching machine never reads a manifest. Every data row leaves exactly once: in one RowBatch of
`.rows` or as an ErrorRow on `.errors`.
"""

from __future__ import annotations

from collections.abc import Iterator

import apache_beam as beam

from shardsmith.core import progress_signal
from shardsmith.core.manifest import ManifestFormat, ManifestParser, Source
from shardsmith.core.rows import ROWS_PER_BATCH, ManifestRow, RowBatch
from shardsmith.errors import UsageError, WorkerUsageError
from transforms import ERRORS, StageOutputs
from transforms.metrics import ROWS_READ, count, rejected
from transforms.row_coder import RowBatchCoder, of_batches

_CODER = RowBatchCoder()


class ReadSourceFn(beam.DoFn):
    """Streams one Source into batches of ManifestRows (main output, up to ROWS_PER_BATCH rows each, in file
    order) and ErrorRows (tagged `errors`); counts rows_read and errors_manifest (transforms/metrics.py), and
    rows read for a watching launcher (shardsmith/core/progress_signal.py)."""

    def __init__(self, fmt: ManifestFormat):
        self._parser = ManifestParser(fmt)

    def process(self, source: Source) -> Iterator:
        try:
            yield from self._batches(source)
        except UsageError as e:  # the manifest changed since the launcher checked it
            raise WorkerUsageError(str(e)) from None

    def _batches(self, source: Source) -> Iterator:
        batch = RowBatch()
        for item in self._parser.parse(source):
            if not isinstance(item, ManifestRow):
                count(ROWS_READ)  # a rejected line is a row read, as the accounting counts it
                progress_signal.add(progress_signal.ROWS_READ)
                yield rejected(item)
                continue
            batch.append(item)
            if len(batch) == ROWS_PER_BATCH:
                count(ROWS_READ, len(batch))
                progress_signal.add(progress_signal.ROWS_READ, len(batch))
                yield batch
                batch = RowBatch()
        if batch:
            count(ROWS_READ, len(batch))
            progress_signal.add(progress_signal.ROWS_READ, len(batch))
            yield batch


def pack_batch(batch: RowBatch) -> bytes:
    """One RowBatch as RowBatchCoder encodes it, one pickle: the class and the repeated strings (the source) are
    stored once per batch, not once per row (about 97 bytes a row instead of 189). Packed, the local runner's
    Reshuffle holds bytes rather than the rows' objects."""
    return _CODER.encode(batch)


def unpack_batch(packed: bytes) -> RowBatch:
    return _CODER.decode(packed)


class ReadManifest(beam.PTransform):
    """Sources -> RowBatches (`.rows`), with ErrorRows on `.errors`.

    The input PCollection holds Source descriptors (paths only, never rows). A Reshuffle after reading fans
    the batches out so that later stages are not bound to the one worker that read a large manifest; batches
    cross it packed (pack_batch), as a runner that groups in memory (Beam's local runner) holds all of them.
    Without `fan_out` the batches stay on the worker that read them: for a run in one process (the local
    runner's default mode, where the Reshuffle would only pickle every row once more), and for a next stage that
    fans out by itself (--incremental's partitioned join), so the local runner never holds the whole manifest.
    """

    def __init__(self, fmt: ManifestFormat, fan_out: bool = True):
        super().__init__()
        self._fmt = fmt
        self._fan_out = fan_out

    def expand(self, sources):
        read = sources | "ParseSources" >> beam.ParDo(ReadSourceFn(self._fmt)).with_outputs(ERRORS, main="rows")
        of_batches(read.rows)
        if not self._fan_out:
            return StageOutputs(read.rows, read[ERRORS])
        rows = (
            read.rows
            | "PackBatches" >> beam.Map(pack_batch)
            | "FanOutBatches" >> beam.Reshuffle()
            | "UnpackBatches" >> beam.Map(unpack_batch)
        )
        of_batches(rows)
        return StageOutputs(rows, read[ERRORS])
