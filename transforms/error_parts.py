"""errors.jsonl, written without holding the error rows (WriteErrors): each stage's rejected rows become sorted
part files where they were rejected, and the parts are merged into one file sorted by (source, line).

Guarantees: memory per worker is one part (ERROR_LINES_PER_PART lines) while writing, and one buffered reader
per open part (PARTS_MERGED_AT_ONCE at most) while merging; error rows never go through a GroupByKey or a
Flatten. Every file is written under a temporary name and renamed; part names are unique to a bundle attempt,
so a retried bundle's parts are never merged twice. The merged file has the same bytes as sorting every line at
once, so reruns give the same errors.jsonl. The report (transforms/report.py) applies WriteErrors.
"""

from __future__ import annotations

import contextlib
import heapq
import json
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from shardsmith import storage
from shardsmith.format.build_record import COPY_CHUNK_BYTES, write_atomically, write_atomically_from
from shardsmith.format.metadata import errors_bytes, reason_key
from shardsmith.format.naming import ERRORS_FILE, TEMP_PREFIX, join
from shardsmith.output_folder import LockGuard
from shardsmith.rows import ErrorRow
from shardsmith.rows.failures import explain_counts
from transforms.duplicates import STAGE as DUPLICATE_STAGE
from transforms.gather import Gather, combine_all


@dataclass(frozen=True)
class ErrorSummary:
    num_errors: int
    by_reason: dict[str, int]
    num_dropped_duplicates: int = 0  # rows dropped on purpose (--on_duplicate drop): not failures
    explanation: str = ""  # the top reasons with counts and an example each (shardsmith/rows/failures.py)


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
        by_reason = {reason_key(stage, reason): count for (stage, reason), (count, _) in accumulator.items()}
        failed = {(stage, reason): entry for (stage, reason), entry in accumulator.items()
                  if stage != DUPLICATE_STAGE}
        explanation = explain_counts({reason_key(s, r): count for (s, r), (count, _) in failed.items()},
                                     {f"{s}: {r}": first for (s, r), (_, first) in failed.items()})
        return ErrorSummary(sum(by_reason.values()), dict(sorted(by_reason.items())),
                            sum(count for (stage, _), (count, _) in accumulator.items() if stage == DUPLICATE_STAGE),
                            explanation)


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

    def __init__(self, output_dir: str, lock: LockGuard | None = None):
        self._output_dir = output_dir
        self._lock = lock  # checked before each part is written
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
        if self._lock is not None:
            self._lock.check()
        self._lines.sort()
        path = join(self._output_dir, f"{TEMP_PREFIX}{ERROR_PART_PREFIX}{uuid.uuid4().hex}")
        write_atomically(path, b"".join(line for _, line in self._lines))
        self._lines = []
        return path


def _merged_lines(parts: list[str]) -> Iterator[bytes]:
    """The lines of sorted part files in errors.jsonl's order, reading each file line by line."""
    with contextlib.ExitStack() as stack:
        files = [stack.enter_context(storage.open_read(p, buffered=True)) for p in parts]
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


def merge_error_parts(_, parts: list[str], output_dir: str, lock: LockGuard | None = None) -> str:
    """errors.jsonl as the merge of the sorted parts, streamed (memory: one buffered reader per open part) to a
    temporary name and renamed: the same bytes as sorting every line at once. With more than
    PARTS_MERGED_AT_ONCE parts, groups of them are first merged into larger temporary parts. With `lock`,
    nothing is written unless the build still holds the folder."""
    if lock is not None:
        lock.check()
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


class WriteErrors(beam.PTransform):
    """A tuple of PCollections of ErrorRows (each stage's, not flattened) -> {"summary": a one-element
    PCollection of ErrorSummary, "written": errors.jsonl's path once it is written into `files_dir`}."""

    def __init__(self, files_dir: str, lock: LockGuard | None = None):
        super().__init__()
        self._files_dir = files_dir
        self._lock = lock

    def expand(self, errors: tuple):
        written = [
            stage_errors | f"WriteErrorParts{i}" >> beam.ParDo(
                WriteErrorPartsFn(self._files_dir, self._lock)).with_outputs(SUMMARIES, main=ERROR_PARTS)
            for i, stage_errors in enumerate(errors)
        ]
        summary = (
            [w[SUMMARIES] for w in written]
            | "AllErrorSummaries" >> beam.Flatten()
            | "SummarizeErrors" >> Gather(combine_all, SummarizeErrorsFn())
        )
        part_paths = [w[ERROR_PARTS] for w in written] | "AllErrorParts" >> beam.Flatten()
        errors_written = (
            errors[0].pipeline
            | "MergeTrigger" >> beam.Impulse()
            | "WriteErrorsJsonl" >> beam.Map(merge_error_parts, beam.pvalue.AsList(part_paths), self._files_dir,
                                              self._lock)
        )
        return {"summary": summary, "written": errors_written}
