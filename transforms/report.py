"""Stage 8: the report. Writes errors.jsonl, labels.txt and metadata.json into the build's folder, checks the
accounting equation (records + errors == input rows) and the error budget, and publishes the build.

Guarantees: every file is written under a temporary name and renamed, and the build is published (the top-level
metadata.json replaced, shardsmith/format/build_folder.py) only after every shard, errors.jsonl, labels.txt and
transform_fn/ exist, and only while the build still holds the folder's lock; so the top-level metadata.json
always names one finished build. errors.jsonl is sorted by (source, line), so reruns give the same bytes.
Memory: one part of errors.jsonl (ERROR_LINES_PER_PART lines) per worker, a count and an example per error
reason, and one small entry per shard; never all error rows, image bytes or the good rows. Error rows never
go through a GroupByKey or a Flatten: each stage's errors are written as sorted part files by WriteErrorPartsFn,
fused into the stage that rejected them, and only the parts' paths meet; errors.jsonl is then a streamed
k-way merge of the parts (one open reader per part, PARTS_MERGED_AT_ONCE at most). On Beam's local runner a
Flatten is materialised (each input writes into one buffer read by the next stage), so flattening the error
rows first would hold all of them in memory; measured in docs/performance.md ("Error rows").
"""

from __future__ import annotations

import contextlib
import heapq
import json
import logging
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from shardsmith.core import faults
from shardsmith.core.build_lock import holds_lock, release_lock
from shardsmith.core.failures import explain_counts
from shardsmith.core.rows import ErrorRow, ShardResult
from shardsmith.core.settings import CheckSettings, RecordSettings
from shardsmith.format.build_folder import (
    COPY_CHUNK_BYTES,
    DEFAULT_KEEP_BUILDS,
    build_dir,
    publish,
    retire_builds,
    write_atomically,
    write_atomically_from,
)
from shardsmith.format.example import example_keys
from shardsmith.format.metadata import NEAR_DUPLICATES_KEY, errors_bytes, labels_bytes
from shardsmith.format.naming import ERRORS_FILE, LABELS_FILE, TEMP_PREFIX, join
from shardsmith.format.tfds import tfds_metadata_files
from transforms.duplicates import STAGE as DUPLICATE_STAGE
from transforms.duplicates import DuplicateSummary
from transforms.labels import Vocabulary
from transforms.place import ShardPlan

CHECK_FAILED_MARKER = "shardsmith check failed: "
_LOG = logging.getLogger("shardsmith")


class DatasetCheckFailed(RuntimeError):
    """The job finished its writes but the result must not be used; the message says why, in one line."""

    def __init__(self, message: str):
        # Runners re-raise with the original message plus their context; prefix only once.
        super().__init__(message if message.startswith(CHECK_FAILED_MARKER) else CHECK_FAILED_MARKER + message)


@dataclass(frozen=True)
class ErrorSummary:
    num_errors: int
    by_reason: dict[str, int]
    num_dropped_duplicates: int = 0  # rows dropped on purpose (--on_duplicate drop): not failures
    explanation: str = ""  # the top reasons with counts and an example each (shardsmith/core/failures.py)


# errors.jsonl is written in sorted parts of at most this many lines, each by the worker that rejected the rows,
# then merged: no worker holds more than one part's lines, and no error row goes through a GroupByKey.
ERROR_LINES_PER_PART = 20_000
ERROR_PART_PREFIX = "errors-part-"
PARTS_MERGED_AT_ONCE = 64  # files open at once while merging; more parts are merged in rounds
ERROR_PARTS = "parts"  # WriteErrorPartsFn's outputs: part paths (main) and per-bundle summaries (SUMMARIES)
SUMMARIES = "summaries"


class SummarizeErrorsFn(beam.CombineFn):
    """ErrorRows (one per manifest line) -> ErrorSummary, keeping a count and the first line (by sort key) per
    reason: memory bounded by the number of distinct reasons, never by the number of rows."""

    def create_accumulator(self) -> dict:
        return {}  # (stage, reason) -> [count, first ErrorRow]

    def add_input(self, accumulator: dict, error: ErrorRow) -> dict:
        entry = accumulator.get((error.stage, error.reason))
        if entry is None:
            accumulator[(error.stage, error.reason)] = [1, error]
        else:
            entry[0] += 1
            if error.sort_key() < entry[1].sort_key():
                entry[1] = error
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        merged: dict = {}
        for accumulator in accumulators:
            for key, (count, first) in accumulator.items():
                entry = merged.setdefault(key, [0, first])
                entry[0] += count
                if first.sort_key() < entry[1].sort_key():
                    entry[1] = first
        return merged

    def extract_output(self, accumulator: dict) -> ErrorSummary:
        by_reason = {f"{stage}: {reason}": count for (stage, reason), (count, _) in accumulator.items()}
        failed = {(stage, reason): entry for (stage, reason), entry in accumulator.items()
                  if stage != DUPLICATE_STAGE}
        explanation = explain_counts({f"{s}: {r}": count for (s, r), (count, _) in failed.items()},
                                     {f"{s}: {r}": first for (s, r), (_, first) in failed.items()})
        return ErrorSummary(sum(by_reason.values()), dict(sorted(by_reason.items())),
                            sum(count for (stage, _), (count, _) in accumulator.items() if stage == DUPLICATE_STAGE),
                            explanation)


class MergeErrorSummariesFn(SummarizeErrorsFn):
    """SummarizeErrorsFn over the accumulators WriteErrorPartsFn emits per bundle instead of over ErrorRows."""

    def add_input(self, accumulator: dict, partial: dict) -> dict:
        return self.merge_accumulators([accumulator, partial])


def _error_line(error: ErrorRow) -> tuple[tuple, bytes]:
    """(order, line) of one errors.jsonl line; the order is _line_order's."""
    return error.sort_key(), errors_bytes([error.to_dict()])


def _line_order(line: bytes) -> tuple[tuple, bytes]:
    """The order of errors.jsonl: ErrorRow.sort_key, then the line itself (equal keys: a fixed order too)."""
    e = json.loads(line)
    return (e["source"], e["line"], e["uri"], e["stage"], e["reason"]), line


class WriteErrorPartsFn(beam.DoFn):
    """ErrorRows -> sorted part files of errors.jsonl, one line per manifest line (ErrorRow.per_line), at most
    ERROR_LINES_PER_PART lines each; emits each part's path, and on SUMMARIES the bundle's SummarizeErrorsFn
    accumulator. Applied to each stage's errors before any Flatten, so that it runs fused with the stage that
    rejected the rows and error rows are never materialised between stages. Parts have temporary names unique to
    the bundle attempt: only paths emitted by committed bundles are merged, and the parts of failed attempts are
    removed with the build's other temporary files before metadata.json is written."""

    def __init__(self, output_dir: str):
        self._output_dir = output_dir
        self._summarize = SummarizeErrorsFn()

    def start_bundle(self) -> None:
        self._lines: list[tuple[tuple, bytes]] = []
        self._summary = self._summarize.create_accumulator()

    def process(self, error: ErrorRow) -> Iterator[str]:
        for line in error.per_line():
            self._summary = self._summarize.add_input(self._summary, line)
            self._lines.append(_error_line(line))
            if len(self._lines) >= ERROR_LINES_PER_PART:
                yield self._write_part()

    def finish_bundle(self) -> Iterator:
        if self._lines:
            yield WindowedValue(self._write_part(), MIN_TIMESTAMP, [GlobalWindow()])
        if self._summary:
            yield beam.pvalue.TaggedOutput(SUMMARIES, WindowedValue(self._summary, MIN_TIMESTAMP, [GlobalWindow()]))
        self._summary = self._summarize.create_accumulator()

    def _write_part(self) -> str:
        self._lines.sort()
        path = join(self._output_dir, f"{TEMP_PREFIX}{ERROR_PART_PREFIX}{uuid.uuid4().hex}")
        write_atomically(path, b"".join(line for _, line in self._lines))
        self._lines = []
        return path


def _merged_lines(parts: list[str]) -> Iterator[bytes]:
    """The lines of sorted part files in errors.jsonl's order, reading each file line by line."""
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(FileSystems.open(p, compression_type="uncompressed")) for p in parts]
        yield from heapq.merge(*(iter(f.readline, b"") for f in files), key=_line_order)


def _in_chunks(lines: Iterable[bytes]) -> Iterator[bytes]:
    chunk: list[bytes] = []
    size = 0
    for line in lines:
        chunk.append(line)
        size += len(line)
        if size >= COPY_CHUNK_BYTES:
            yield b"".join(chunk)
            chunk, size = [], 0
    if chunk:
        yield b"".join(chunk)


def merge_error_parts(_, parts: list[str], output_dir: str) -> str:
    """errors.jsonl as the merge of the sorted parts, streamed (memory: one buffered reader per open part) to a
    temporary name and renamed: the same bytes as sorting every line at once. With more than
    PARTS_MERGED_AT_ONCE parts, groups of them are first merged into larger temporary parts."""
    parts = sorted(parts)
    while len(parts) > PARTS_MERGED_AT_ONCE:
        merged = []
        for at in range(0, len(parts), PARTS_MERGED_AT_ONCE):
            path = join(output_dir, f"{TEMP_PREFIX}{ERROR_PART_PREFIX}{uuid.uuid4().hex}")
            write_atomically_from(path, _in_chunks(_merged_lines(parts[at:at + PARTS_MERGED_AT_ONCE])))
            merged.append(path)
        parts = merged
    path = join(output_dir, ERRORS_FILE)
    write_atomically_from(path, _in_chunks(_merged_lines(parts)))
    return path


@dataclass(frozen=True)
class ReportConfig:
    """What the report checks, writes into metadata.json and publishes, as typed fields."""

    output_dir: str  # the top-level folder; this build's files are in files_dir
    build_id: str
    name: str
    seed: int
    checks: CheckSettings
    records: RecordSettings
    task: str = "classification"
    features: tuple[tuple[str, str], ...] = ()  # (column, --feature type)
    recorded_options: dict = field(default_factory=dict)  # shardsmith's own options, written as they are
    keep_builds: int = DEFAULT_KEEP_BUILDS

    @property
    def files_dir(self) -> str:
        return build_dir(self.output_dir, self.build_id)


def build_metadata(
    config: ReportConfig,
    shards: list[ShardResult],
    plan: ShardPlan,
    vocabulary: Vocabulary,
    errors: ErrorSummary,
    num_input_rows: int,
    duplicates: DuplicateSummary | None = None,
) -> dict:
    splits = {}
    for split, split_plan in plan.splits.items():
        split_shards = sorted((s for s in shards if s.split == split), key=lambda s: s.shard)
        label_counts: Counter[str] = Counter()
        for s in split_shards:
            label_counts.update(s.label_counts)
        splits[split] = {
            "num_examples": sum(s.num_examples for s in split_shards),
            "num_bytes": sum(s.num_bytes for s in split_shards),
            "num_shards": split_plan.num_shards,
            "num_placed": split_plan.num_examples,
            "source_bytes": split_plan.num_bytes,
            "label_counts": {label: label_counts[label] for label in vocabulary.labels if label_counts[label]},
            "shards": [
                {"file": s.file, "num_examples": s.num_examples, "num_bytes": s.num_bytes,
                 "label_counts": s.label_counts}
                for s in split_shards
            ],
        }
    return {
        "name": config.name,
        "format": "tfrecord",
        "compression": config.records.compression,
        "image_mode": config.records.image_mode,
        "seed": config.seed,
        "options": config.recorded_options,
        "labels": list(vocabulary.labels),
        "labels_taken_from": vocabulary.taken_from,
        "label_image_counts": list(vocabulary.image_counts),  # picks the label that places a multi-label row
        "task": config.task,
        "features": example_keys(config.records.image_mode, config.task, config.features),
        "num_input_rows": num_input_rows,
        "num_examples": sum(s.num_examples for s in shards),
        "num_example_rows": sum(s.num_examples if s.num_rows < 0 else s.num_rows for s in shards),
        "num_errors": errors.num_errors,
        "errors_by_reason": errors.by_reason,
        "duplicates": (duplicates or DuplicateSummary()).to_dict(),
        "splits": splits,
    }


def with_near_duplicates(metadata: dict, near_duplicates: dict | None) -> dict:
    """metadata.json's `near_duplicates` entry (--near_duplicates report|drop), after `duplicates`; none when off."""
    if near_duplicates is None:
        return metadata
    keys = list(metadata)
    at = keys.index("duplicates") + 1
    return {k: metadata[k] for k in keys[:at]} | {NEAR_DUPLICATES_KEY: near_duplicates} | \
        {k: metadata[k] for k in keys[at:]}


def check_and_write_metadata(
    _, config: ReportConfig, shards, plan, vocabulary, errors, num_input_rows, duplicates, _transform_written,
    _errors_written=(), near_duplicates: dict | None = None,
) -> dict:
    """Checks the accounting, the error budget and (with --on_duplicate error) duplicates; writes labels.txt,
    removes leftover temporary files, and writes metadata.json last."""
    shards = list(shards)
    metadata = build_metadata(config, shards, plan, vocabulary, errors, num_input_rows, duplicates)
    metadata = with_near_duplicates(metadata, near_duplicates)
    accounted = metadata["num_example_rows"] + errors.num_errors
    if accounted != num_input_rows:
        raise DatasetCheckFailed(
            f"{num_input_rows} input rows but {metadata['num_example_rows']} in records + {errors.num_errors} errors "
            f"= {accounted}; rows were lost or duplicated, do not use this output"
        )
    if num_input_rows == 0:
        raise DatasetCheckFailed("the inputs hold no data rows")
    num_failed = errors.num_errors - errors.num_dropped_duplicates
    fraction = num_failed / num_input_rows
    if fraction > config.checks.max_error_fraction:
        raise DatasetCheckFailed(
            f"{num_failed} of {num_input_rows} rows ({fraction:.1%}) failed, more than "
            f"--max_error_fraction={config.checks.max_error_fraction}: {errors.explanation}; "
            f"see {join(config.files_dir, ERRORS_FILE)}"
        )
    if config.checks.on_duplicate == "error" and duplicates.num_groups:
        raise DatasetCheckFailed(
            f"{duplicates.num_groups} images occur more than once ({duplicates.num_groups_across_splits} across "
            f"splits), e.g. {duplicates.groups[0][1][0][1]} and {duplicates.groups[0][1][1][1]}; "
            "--on_duplicate error (use drop to keep one copy, keep to allow them)"
        )
    files_dir = config.files_dir
    write_atomically(join(files_dir, LABELS_FILE), labels_bytes(vocabulary.labels))
    for file_name, content in tfds_metadata_files(metadata).items():  # TFDS: builder_from_directory(files_dir)
        write_atomically(join(files_dir, file_name), content)
    _remove_temporary_files(files_dir)
    faults.reached("before_metadata")
    if not holds_lock(config.output_dir, config.build_id):
        raise DatasetCheckFailed(f"build {config.build_id} no longer holds the lock of {config.output_dir} (another "
                                 "build took it over); it was not published")
    publish(config.output_dir, config.build_id, metadata)
    if errors.explanation:  # also in a remote job's log, where no summary is printed
        _LOG.info("built %s with %d of %d rows failed: %s", config.name, num_failed, num_input_rows,
                  errors.explanation)
    retired = retire_builds(config.output_dir, config.build_id, config.keep_builds)
    if retired:
        _LOG.info("removed %d build(s) beyond --keep_builds=%d: %s", len(retired), config.keep_builds,
                  ", ".join(retired))
    release_lock(config.output_dir, config.build_id)
    return metadata


def _remove_temporary_files(files_dir: str) -> None:
    """Every shard is final by now; temporary files left in the build's folder by killed or retried attempts
    are garbage (only this build writes there)."""
    leftovers = [m.path for m in FileSystems.match([f"{files_dir}/{TEMP_PREFIX}*"])[0].metadata_list]
    if leftovers:
        FileSystems.delete(leftovers)


class WriteReport(beam.PTransform):
    """Inputs: a dict of PCollections: shards, plan, vocabulary, errors (a tuple: each stage's ErrorRows, not
    flattened), input_row_counts (numbers that add up to the input rows), duplicates, transform_written; and
    near_duplicates (metadata.json's entry, written after near_duplicates.jsonl) with --near_duplicates
    report|drop."""

    def __init__(self, config: ReportConfig):
        super().__init__()
        self._config = config

    def expand(self, inputs: dict):
        pipeline = inputs["errors"][0].pipeline
        output_dir = self._config.files_dir
        written = [
            errors | f"WriteErrorParts{i}" >> beam.ParDo(WriteErrorPartsFn(output_dir)).with_outputs(
                SUMMARIES, main=ERROR_PARTS)
            for i, errors in enumerate(inputs["errors"])
        ]
        error_summary = (
            [w[SUMMARIES] for w in written]
            | "AllErrorSummaries" >> beam.Flatten()
            | "SummarizeErrors" >> beam.CombineGlobally(MergeErrorSummariesFn())
        )
        part_paths = [w[ERROR_PARTS] for w in written] | "AllErrorParts" >> beam.Flatten()
        errors_written = (
            pipeline
            | "MergeTrigger" >> beam.Create([None])
            | "WriteErrorsJsonl" >> beam.Map(merge_error_parts, beam.pvalue.AsList(part_paths), output_dir)
        )
        num_input_rows = inputs["input_row_counts"] | "CountInputRows" >> beam.CombineGlobally(sum)
        side = beam.pvalue.AsSingleton
        return (
            pipeline
            | "FinalizeTrigger" >> beam.Create([None])
            | "CheckAndWriteMetadata" >> beam.Map(
                check_and_write_metadata,
                self._config,
                beam.pvalue.AsList(inputs["shards"]),
                side(inputs["plan"]),
                side(inputs["vocabulary"]),
                side(error_summary),
                side(num_input_rows),
                side(inputs["duplicates"]),
                beam.pvalue.AsList(inputs["transform_written"]),
                beam.pvalue.AsList(errors_written),
                **({"near_duplicates": side(inputs["near_duplicates"])} if "near_duplicates" in inputs else {}),
            )
        )
