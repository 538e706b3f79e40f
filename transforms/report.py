"""The report. Writes errors.jsonl, labels.txt and metadata.json into the build's folder, checks the
accounting equation (records + errors == input rows) and the error budget, and publishes the build.

Guarantees: every file is written under a temporary name and renamed, and the build is published (the top-level
metadata.json replaced, shardsmith/output_folder/publishing.py) only after every shard, errors.jsonl, labels.txt and
transform_fn/ exist, and only while the build still holds the folder's lock; so the top-level metadata.json
always names one finished build. errors.jsonl is sorted by (source, line), so reruns give the same bytes.
Memory: one part of errors.jsonl per worker, a count and an example per error reason, and one small entry per
shard; never all error rows, image bytes or the good rows. Error rows never go through a GroupByKey or a
Flatten: each stage's errors are written as sorted part files by WriteErrorPartsFn, fused into the stage that
rejected them, and only the parts' paths meet; errors.jsonl is then a streamed k-way merge of the parts
(transforms/error_parts.py). On Beam's local runner a
Flatten is materialised (each input writes into one buffer read by the next stage), so flattening the error
rows first would hold all of them in memory; measured in docs/performance.md ("Memory").
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import apache_beam as beam

from shardsmith import fault_injection
from shardsmith.format.build_record import write_atomically
from shardsmith.format.example import example_keys
from shardsmith.format.metadata import labels_bytes
from shardsmith.format.metadata_schema import Metadata, NearDuplicatesEntry, SplitEntry
from shardsmith.format.naming import ERRORS_FILE, LABELS_FILE, join, row_list_name
from shardsmith.format.record_file import DEFAULT_FORMAT
from shardsmith.format.tfds import tfds_metadata_files
from shardsmith.manifest import with_look_alike_labels
from shardsmith.output_folder import BuildTarget, build_dir, publish_nothing, publish_version, remove_build
from shardsmith.rows import ShardResult
from shardsmith.settings import CheckSettings, RecordSettings, RetentionSettings
from shardsmith.storage import list_files
from shardsmith.versions import (
    CarriedVersion,
    count_failed_again,
    empty_new_shards,
    merged_version,
    same_failures,
    unchanged,
)
from transforms.duplicates import STAGE as DUPLICATE_STAGE
from transforms.duplicates import DuplicateSummary
from transforms.error_parts import ErrorSummary, WriteErrors
from transforms.gather import Gather
from transforms.labels import Vocabulary
from transforms.metrics import ROWS_NEW, count
from transforms.place import ShardPlan

CHECK_FAILED_MARKER = "shardsmith check failed: "
_LOG = logging.getLogger("shardsmith")


class DatasetCheckFailed(RuntimeError):
    """The job finished its writes but the result must not be used; the message says why, in one line."""

    def __init__(self, message: str):
        # Runners re-raise with the original message plus their context; prefix only once.
        super().__init__(message if message.startswith(CHECK_FAILED_MARKER) else CHECK_FAILED_MARKER + message)


@dataclass(frozen=True)
class ReportConfig:
    """What the report checks, writes into metadata.json and publishes, as typed fields."""

    target: BuildTarget  # the output folder and this build's folder in it
    name: str
    seed: int
    checks: CheckSettings
    records: RecordSettings
    task: str = "classification"
    features: tuple[tuple[str, str], ...] = ()  # (column, --feature type)
    recorded_options: dict = field(default_factory=dict)  # shardsmith's own options, written as they are
    retention: RetentionSettings = RetentionSettings()  # --keep_builds
    carried: CarriedVersion | None = None  # --incremental: the version this build adds to
    write_card: bool = True  # card.html into the build's folder once published (--no_card: False)


def build_metadata(
    config: ReportConfig,
    shards: list[ShardResult],
    plan: ShardPlan,
    vocabulary: Vocabulary,
    errors: ErrorSummary,
    num_input_rows: int,
    duplicates: DuplicateSummary | None = None,
    near_duplicates: NearDuplicatesEntry | None = None,
) -> Metadata:
    """metadata.json of the build, assembled here only, from each stage's typed part."""
    splits = {}
    for split, split_plan in plan.splits.items():
        split_shards = sorted((s for s in shards if s.split == split), key=lambda s: s.shard)
        splits[split] = SplitEntry.of_shards(
            [s.entry() for s in split_shards],
            vocabulary.labels, num_shards=split_plan.num_shards, num_placed=split_plan.num_examples,
            source_bytes=split_plan.num_bytes)
    return Metadata(
        name=config.name,
        format=DEFAULT_FORMAT,
        compression=config.records.compression,
        image_mode=config.records.image_mode,
        seed=config.seed,
        options=config.recorded_options,
        labels=list(vocabulary.labels),
        labels_taken_from=vocabulary.taken_from,
        label_image_counts=list(vocabulary.image_counts),  # picks the label that places a multi-label row
        task=config.task,
        features=example_keys(config.records.image_mode, config.task, config.features),
        num_input_rows=num_input_rows,
        num_examples=sum(s.num_examples for s in shards),
        num_example_rows=sum(s.num_examples if s.num_rows < 0 else s.num_rows for s in shards),
        num_errors=errors.num_errors,
        errors_by_reason=errors.by_reason,
        duplicates=(duplicates or DuplicateSummary()).to_entry(),
        near_duplicates=near_duplicates,
        splits=splits,
    )


def check_and_write_metadata(
    _, config: ReportConfig, shards, plan, vocabulary, errors, num_input_rows, duplicates, _transform_written,
    _errors_written=(), near_duplicates: NearDuplicatesEntry | None = None, carried_lines: int = 0,
    removed_lines: int = 0, rewritten=(), removed_bytes: dict[str, int] | None = None, source_reads=(),
) -> Metadata:
    """Checks the accounting, the error budget and (with --on_duplicate error) duplicates; writes labels.txt and
    publishes the version (shardsmith/output_folder/publishing.py: metadata.json last, then retention, then the lock
    released). With --incremental, the version holds the carried shards too (`carried_lines`: the manifest lines
    their records stand for; `rewritten`: (carried shard index, ShardResult) of those rewritten without removed
    rows), and the error budget counts the new rows; a night that changes nothing publishes nothing."""
    shards = list(shards)
    metadata = build_metadata(config, shards, plan, vocabulary, errors, num_input_rows, duplicates, near_duplicates)
    failed_again = 0
    if config.carried is not None:
        if not config.carried.is_first:
            previous_errors = join(build_dir(config.target.output_dir, config.carried.previous), ERRORS_FILE)
            failed_again = count_failed_again(previous_errors, join(config.target.files_dir, ERRORS_FILE),
                                              DUPLICATE_STAGE)
        reads = list(source_reads)  # the one line manifest's digest, recorded for the next night
        read = reads[0] if len(reads) == 1 else None
        metadata = merged_version(metadata, config.carried, dict(rewritten), carried_lines, removed_lines,
                                  removed_bytes, failed_again, read and read.digest, bool(read and read.appended))
        count(ROWS_NEW, num_input_rows - carried_lines)
    metadata = with_look_alike_labels(metadata)
    accounted = metadata.num_example_rows + errors.num_errors
    if accounted != num_input_rows:
        raise DatasetCheckFailed(
            f"{num_input_rows} input rows but {metadata.num_example_rows} in records + {errors.num_errors} errors "
            f"= {accounted}; rows were lost or duplicated, do not use this output"
        )
    if num_input_rows == 0:
        raise DatasetCheckFailed("the inputs hold no data rows")
    num_failed = errors.num_errors - errors.num_dropped_duplicates
    # The budget judges the rows new since the published version: neither carried nor failed there before.
    num_new_failed = num_failed - failed_again
    num_new_rows = num_input_rows - carried_lines - failed_again
    fraction = num_new_failed / num_new_rows if num_new_rows else 0.0
    if fraction > config.checks.max_error_fraction:
        what = "new rows" if config.carried is not None and not config.carried.is_first else "rows"
        again = (f" ({failed_again} more that failed in version {config.carried.previous} too were retried and are "
                 "not counted)" if failed_again else "")
        raise DatasetCheckFailed(
            f"{num_new_failed} of {num_new_rows} {what} ({fraction:.1%}) failed, more than "
            f"--max_error_fraction={config.checks.max_error_fraction}{again}: {errors.explanation}; "
            f"see {join(config.target.files_dir, ERRORS_FILE)}"
        )
    if config.checks.on_duplicate == "error" and duplicates.num_groups:
        raise DatasetCheckFailed(
            f"{duplicates.num_groups} images occur more than once ({duplicates.num_groups_across_splits} across "
            f"splits), e.g. {duplicates.groups[0][1][0][1]} and {duplicates.groups[0][1][1][1]}; "
            "--on_duplicate error (use drop to keep one copy, keep to allow them)"
        )
    if config.carried is not None and not rewritten and unchanged(config.carried, shards, removed_lines, metadata) \
            and same_failures(join(build_dir(config.target.output_dir, config.carried.previous), ERRORS_FILE),
                              join(config.target.files_dir, ERRORS_FILE)):
        publish_nothing(config.target, config.carried.previous)
        return metadata
    files_dir = config.target.files_dir
    config.target.lock.check()  # LockLost: a build whose lock was taken over writes nothing more
    empty = empty_new_shards(metadata, shards) if config.carried is not None else []
    if empty:  # files this build's record lists as written, in its own folder, and nothing else
        listed = list_files(files_dir)
        for name in (name for result in empty for name in (result.file, result.index_file, row_list_name(result.file))
                     if name):
            remove_build(config.target.output_dir, config.target.build_id, listed, only=name)
    write_atomically(join(files_dir, LABELS_FILE), labels_bytes(vocabulary.labels))
    for file_name, content in tfds_metadata_files(metadata).items():  # TFDS: shardsmith.tfds_dirs(output_dir)
        write_atomically(join(files_dir, file_name), content)

    def log_failures() -> None:
        if errors.explanation:  # also in a remote job's log, where no summary is printed
            _LOG.info("built %s with %d of %d rows failed: %s", config.name, num_failed, num_input_rows,
                      errors.explanation)

    publish_version(config.target, metadata, config.retention, after_switch=log_failures,
                    before_release=card_step(config.target, config.write_card), fault_point=fault_injection.reached)
    return metadata


def card_step(target: BuildTarget, wanted: bool) -> Callable[[], None] | None:
    """The last step of publishing a version (a build's or a compaction's): its dataset card, card.html, written
    into its build folder under the lock. A card that cannot be made is a warning, never a failed build: the
    version is published by then, and `shardsmith card` can make it later."""
    if not wanted:
        return None
    output_dir, build_id = target.output_dir, target.build_id

    def write() -> None:
        from shardsmith.card import write_card

        try:
            write_card(output_dir, build_id)
        except Exception as e:  # noqa: BLE001 - the card is a view of a published version; the version stands
            _LOG.warning("the dataset card was not written (%s: %s); `shardsmith card %s --version %s` writes it",
                         type(e).__name__, str(e).splitlines()[0] if str(e) else "", output_dir, build_id)

    return write


class WriteReport(beam.PTransform):
    """Inputs: a dict of PCollections: shards, plan, vocabulary, errors (a tuple: each stage's ErrorRows, not
    flattened), input_row_counts (numbers that add up to the input rows), duplicates, transform_written; and
    near_duplicates (metadata.json's NearDuplicatesEntry, made after near_duplicates.jsonl is written) with
    --near_duplicates report|drop; source_reads (ReadManifest's SourceReads) where the build records its
    manifest's digest."""

    def __init__(self, config: ReportConfig):
        super().__init__()
        self._config = config

    def expand(self, inputs: dict):
        pipeline = inputs["errors"][0].pipeline
        target = self._config.target
        errors = tuple(inputs["errors"]) | "WriteErrors" >> WriteErrors(target.files_dir, target.lock)
        num_input_rows = inputs["input_row_counts"] | "CountInputRows" >> Gather(sum)
        side = beam.pvalue.AsSingleton
        return (
            pipeline
            | "FinalizeTrigger" >> beam.Impulse()
            | "CheckAndWriteMetadata" >> beam.Map(
                check_and_write_metadata,
                self._config,
                beam.pvalue.AsList(inputs["shards"]),
                side(inputs["plan"]),
                side(inputs["vocabulary"]),
                side(errors["summary"]),
                side(num_input_rows),
                side(inputs["duplicates"]),
                beam.pvalue.AsList(inputs["transform_written"]),
                beam.pvalue.AsList(errors["written"]),
                **({"near_duplicates": side(inputs["near_duplicates"])} if "near_duplicates" in inputs else {}),
                **({"carried_lines": side(inputs["carried_lines"]), "removed_lines": side(inputs["removed_lines"]),
                    "removed_bytes": beam.pvalue.AsDict(inputs["removed_bytes"]),
                    "rewritten": beam.pvalue.AsList(inputs["rewritten"])} if "carried_lines" in inputs else {}),
                **({"source_reads": beam.pvalue.AsList(inputs["source_reads"])} if "source_reads" in inputs else {}),
            )
        )
