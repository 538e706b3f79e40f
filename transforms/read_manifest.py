"""Read manifests (each format's reader in shardsmith/manifest/) or class folders into batches of
ManifestRows, inside the pipeline.

The parsing is shardsmith.manifest's (one reader per format); this stage runs it on workers, one Source per
element, so the launching machine never reads a manifest. Every data row leaves exactly once: in one RowBatch of
`.rows` or as an ErrorRow on `.errors`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

import apache_beam as beam

from shardsmith import progress_signal
from shardsmith.errors import UsageError, WorkerUsageError
from shardsmith.format.metadata_schema import ManifestDigestEntry
from shardsmith.manifest import (
    LINE_FORMATS,
    AppendedPlan,
    ManifestChanged,
    ManifestFormat,
    ManifestParser,
    ManifestRead,
    Source,
)
from shardsmith.rows import ROWS_PER_BATCH, ManifestRow, RowBatch
from shardsmith.shard_writer.parallel_parse import RowHelpers, parse_in_helpers
from transforms import ERRORS
from transforms.metrics import ROWS_READ, count, rejected
from transforms.row_coder import RowBatchCoder, of_batches

_CODER = RowBatchCoder()
SOURCE_READ = "source_read"


@dataclass(frozen=True)
class SourceRead:
    """What the read of a line manifest (CSV, JSON Lines) saw: whether only its appended lines were parsed
    (shardsmith/manifest/appended.py), the data rows it skipped (the published version's records' lines)
    and the digest its version records (None for a file without a final line end)."""

    appended: bool
    skipped: int
    digest: ManifestDigestEntry | None


class ReadSourceFn(beam.DoFn):
    """Streams one Source into batches of ManifestRows (main output, up to ROWS_PER_BATCH rows each, in file
    order) and ErrorRows (tagged `errors`); counts rows_read and errors_manifest (transforms/metrics.py), and
    rows read for a watching launcher (shardsmith/progress_signal.py). With `digests`, a line manifest's
    read is hashed and described in a SourceRead (tagged `source_read`); with `appended` too, a manifest that
    starts with the published version's bytes is parsed only after them and on its failed lines."""

    def __init__(self, fmt: ManifestFormat, digests: bool = False, appended: AppendedPlan | None = None,
                 helpers: RowHelpers | None = None):
        self._parser = ManifestParser(fmt)
        self._digests = digests
        self._appended = appended
        self._helpers = helpers

    def process(self, source: Source) -> Iterator:
        try:
            yield from self._batches(source)
        except UsageError as e:  # the manifest changed since the launcher checked it
            raise WorkerUsageError(str(e)) from None
        except ManifestChanged:
            raise WorkerUsageError(
                f"manifest {source.path} changed while the build read it (its first {self._appended.digest.bytes} "
                "bytes differ from those checked a moment before); nothing was published: run the build again"
            ) from None

    def _read(self, source: Source) -> ManifestRead | None:
        if not self._digests or source.kind not in LINE_FORMATS:
            return None
        plan = self._appended
        selection = plan.selection(source.path) if plan is not None else None
        if selection is None:
            return ManifestRead()
        return ManifestRead(selection, expected=plan.digest.sha256, expected_bytes=plan.digest.bytes)

    def _batches(self, source: Source) -> Iterator:
        batch, read, rows = RowBatch(), self._read(source), 0
        for item in self._items(source, read):
            rows += 1
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
        if read is not None:
            yield beam.pvalue.TaggedOutput(SOURCE_READ, self._source_read(source, read, rows))

    def _items(self, source: Source, read: ManifestRead | None) -> Iterator:
        """The source's rows and error rows in file order: a line manifest's parsed with the build's writer
        processes when it has them (shardsmith/shard_writer/parallel_parse.py), unless only its appended lines are."""
        if self._helpers is None or source.kind not in LINE_FORMATS or (read is not None and read.selection):
            return self._parser.parse(source, read)
        return parse_in_helpers(self._parser.line_parser(source), self._helpers, read)

    def _source_read(self, source: Source, read: ManifestRead, rows: int) -> SourceRead:
        appended = read.selection is not None
        if appended and read.skipped != self._appended.num_rows:
            raise WorkerUsageError(
                f"the published version's errors.jsonl does not account for the rows of manifest {source.path}: "
                f"{read.skipped} of its first {read.selection.after} lines are neither failed lines nor, as its "
                f"metadata.json says, {self._appended.num_rows} record lines; nothing was published: rebuild with "
                "--incremental --overwrite")
        return SourceRead(appended, read.skipped, read.digest(rows + read.skipped))


def pack_batch(batch: RowBatch) -> bytes:
    """One RowBatch as RowBatchCoder encodes it, one pickle: the class and the repeated strings (the source) are
    stored once per batch, not once per row (about 97 bytes a row instead of 189). Packed, the local runner's
    Reshuffle holds bytes rather than the rows' objects."""
    return _CODER.encode(batch)


def unpack_batch(packed: bytes) -> RowBatch:
    return _CODER.decode(packed)


class ManifestOutputs(NamedTuple):
    """ReadManifest's outputs: RowBatches, ErrorRows, and SourceReads (with `digests`; else empty)."""

    rows: object
    errors: object
    source_reads: object


class ReadManifest(beam.PTransform):
    """Sources -> RowBatches (`.rows`), with ErrorRows on `.errors` and, with `digests`, a SourceRead per line
    manifest on `.source_reads` (`appended`: ReadSourceFn).

    The input PCollection holds Source descriptors (paths only, never rows). A Reshuffle after reading fans
    the batches out so that later stages are not bound to the one worker that read a large manifest; batches
    cross it packed (pack_batch), as a runner that groups in memory (Beam's local runner) holds all of them.
    Without `fan_out` the batches stay on the worker that read them: for a run in one process (the local
    runner's default mode, where the Reshuffle would only pickle every row once more), and for a next stage that
    fans out by itself (--incremental's partitioned join), so the local runner never holds the whole manifest.
    With `helpers` (a run in one process with writer processes), a large line manifest's lines are parsed by those
    processes (shardsmith/shard_writer/parallel_parse.py).
    """

    def __init__(self, fmt: ManifestFormat, fan_out: bool = True, digests: bool = False,
                 appended: AppendedPlan | None = None, helpers: RowHelpers | None = None):
        super().__init__()
        self._fmt = fmt
        self._fan_out = fan_out
        self._read_fn = ReadSourceFn(fmt, digests, appended, helpers)

    def expand(self, sources):
        read = sources | "ParseSources" >> beam.ParDo(self._read_fn).with_outputs(ERRORS, SOURCE_READ, main="rows")
        of_batches(read.rows)
        if not self._fan_out:
            return ManifestOutputs(read.rows, read[ERRORS], read[SOURCE_READ])
        rows = (
            read.rows
            | "PackBatches" >> beam.Map(pack_batch)
            | "FanOutBatches" >> beam.Reshuffle()
            | "UnpackBatches" >> beam.Map(unpack_batch)
        )
        of_batches(rows)
        return ManifestOutputs(rows, read[ERRORS], read[SOURCE_READ])
