"""`shardsmith compact`: the published version's records, placed as a full build of its rows places them, copied
into one balanced set of shards per split, and published as a new version (shardsmith/versions/compaction.py has
the model; pipeline/commands/compact.py launches it under the folder's lock).

    ListSourceShards -> ReadRowLists -> PlaceKeyedRows (the build's placement) -> CopyRecords -> PublishCompaction

Only row lists' rows go through the placement's GroupByKeys (no record bytes); each compacted shard's writer reads
its records at their offsets in the source shards (for gzip shards: in their uncompressed copies, made by
ReadRowLists and so complete before the placement's GroupByKey lets any writer start). In a local run the writer
processes do the work on rows too: they read the row lists, key the rows by rank group and deal the groups, and
the launcher passes sealed pieces between them without unpickling a row. Memory per worker: ROWS_PER_READ_JOB
rows of row lists, one rank group's rows, one compacted shard's rows and the records in flight, as in a build.

Guarantees: the compacted shards (and their index files) are the bytes a full build of the version's rows
writes with the same seed, shard count and label ids; the new version is published, as a build's, only after
every shard, labels.txt, errors.jsonl (the compacted version's: its failed rows are the next night's retries)
and transform_fn/ exist, and only while the compaction holds the folder's lock; earlier versions' files are
never touched, and retention keeps --keep_builds versions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

import apache_beam as beam

from shardsmith import fault_injection, storage
from shardsmith.format.build_record import COPY_CHUNK_BYTES, write_atomically, write_atomically_from
from shardsmith.format.metadata import labels_bytes
from shardsmith.format.metadata_schema import IncrementalEntry, Metadata
from shardsmith.format.naming import ERRORS_FILE, LABELS_FILE, NEAR_DUPLICATES_FILE, SPLITS, join
from shardsmith.format.tfds import tfds_metadata_files
from shardsmith.format.transform_fn import write_transform_fn
from shardsmith.output_folder import BuildTarget, build_dir, publish_version
from shardsmith.rows import ShardResult
from shardsmith.settings import CheckSettings, RecordSettings, RetentionSettings
from shardsmith.shard_writer.jobs_in_hand import JobsInHand
from shardsmith.shard_writer.parallel_parse import RowHelpers
from shardsmith.shard_writer.writer_config import WriterConfig
from shardsmith.versions.compaction import (
    ROWS_PER_READ_JOB,
    CompactionSource,
    KeyedRows,
    keyed_record_rows,
    read_in_writer_process,
    readable_path,
    row_list_path,
)
from shardsmith.versions.record_copy import CompactionWriter, copy_in_writer_process, write_compacted_shard
from shardsmith.versions.row_check import Refused
from transforms.error_parts import ErrorSummary
from transforms.gather import in_global_window, in_global_windows_of
from transforms.labels import Vocabulary
from transforms.place import JOBS_IN_FLIGHT_PER_PROCESS, PlaceKeyedRows, ShardPlan, SplitPlan
from transforms.report import DatasetCheckFailed, ReportConfig, build_metadata, card_step
from transforms.row_coder import of_keyed_batches
from transforms.versions.carried_rows import accepted, row_lists_checked


@dataclass(frozen=True)
class Compaction:
    """One compaction: the version it rewrites, the build it writes (in the same output folder), and how many
    versions to keep."""

    source: CompactionSource
    target: BuildTarget
    retention: RetentionSettings  # --keep_builds
    write_card: bool = True  # card.html once published (--no_card: False)

    def writer(self) -> CompactionWriter:
        """Where the compacted shards go (with their index files and row lists) and where their records are."""
        published, files_dir = self.source.metadata, self.target.files_dir
        config = WriterConfig(self.target, name=published.name, list_rows=True,
                              records=RecordSettings(compression=published.compression_or_default),
                              file_format=self.source.file_format)
        shards = range(len(self.source.shards))
        return CompactionWriter(config, tuple(readable_path(self.source, index, files_dir) for index in shards),
                                tuple(row_list_path(self.source, index) for index in shards),
                                self.source.why_not_rebuilt)

    def report_config(self) -> ReportConfig:
        published = self.source.metadata
        return ReportConfig(
            target=self.target, name=published.name,
            seed=self.source.placement.seed, checks=CheckSettings(),
            records=RecordSettings(compression=published.compression_or_default,
                                   image_mode=published.image_mode or "bytes"),
            task=published.task_or_default, recorded_options=published.options or {}, retention=self.retention)


def compacted_metadata(compaction: Compaction, shards: list[ShardResult], plan: ShardPlan) -> Metadata:
    """metadata.json of the compacted version: the splits as written, everything else the compacted version's,
    and an `incremental` entry saying it holds all the version's rows in one generation. DatasetCheckFailed
    when the records written are not the version's (a row list that lied)."""
    source, published = compaction.source, compaction.source.metadata
    vocabulary = Vocabulary(tuple(published.labels), published.labels_taken_from or "train",
                            tuple(published.label_image_counts or ()))
    written = build_metadata(compaction.report_config(), shards, plan, vocabulary, ErrorSummary(0, {}),
                             source.num_rows)
    if written.num_examples != published.num_examples or written.num_example_rows != source.num_rows:
        raise DatasetCheckFailed(
            f"the compacted shards hold {written.num_examples} records for {written.num_example_rows} rows, version "
            f"{source.version} {published.num_examples} for {source.num_rows}; nothing was published")
    return replace(
        written, labels_taken_from=published.labels_taken_from, look_alike_labels=published.look_alike_labels,
        features=published.features,
        duplicates=published.duplicates,
        incremental=IncrementalEntry(
            previous=source.version, num_carried_rows=source.num_rows, num_added_records=0, num_removed_records=0,
            num_rewritten_shards=len(source.shards),
            generation=published.incremental.generation + 1, generations=1,
            manifest=published.incremental.manifest))


def _file_chunks(path: str) -> Iterator[bytes]:
    with storage.open_read(path) as reader:
        yield from iter(lambda: reader.read(COPY_CHUNK_BYTES), b"")


def carry_errors(compaction: Compaction, metadata: Metadata) -> Metadata:
    """Copies the compacted version's errors.jsonl into the compaction's folder and returns `metadata` with its
    error counts: the compacted version stands for the same manifest rows, failed ones included, so the next
    --incremental night knows which rows failed before (shardsmith/versions/failed_again.py). A version whose
    errors.jsonl is missing gets an empty one and no errors: the next night then counts those rows' failures as
    new, the safe side."""
    source, published = compaction.source, compaction.source.metadata
    target = join(compaction.target.files_dir, ERRORS_FILE)
    path = join(build_dir(source.output_dir, source.version), ERRORS_FILE)
    if not published.error_count or not storage.exists(path):
        write_atomically(target, b"")
        return metadata
    write_atomically_from(target, _file_chunks(path))
    return replace(metadata, num_input_rows=source.num_rows + published.error_count,
                   num_errors=published.error_count, errors_by_reason=published.errors_by_reason)


def carry_near_duplicates(compaction: Compaction, metadata: Metadata) -> Metadata:
    """Copies the compacted version's near_duplicates.jsonl (with --near_duplicates report|drop) into the
    compaction's folder and returns `metadata` with its `near_duplicates` entry: compaction moves records, it
    finds no pair and drops none, so the version's pairs are the compacted version's."""
    source, published = compaction.source, compaction.source.metadata
    if published.near_duplicates is None:
        return metadata
    path = join(build_dir(source.output_dir, source.version), NEAR_DUPLICATES_FILE)
    if published.near_duplicates.file and storage.exists(path):
        write_atomically_from(join(compaction.target.files_dir, NEAR_DUPLICATES_FILE), _file_chunks(path))
    return replace(metadata, near_duplicates=published.near_duplicates)


def write_failed_splits(compaction: Compaction, plan: ShardPlan) -> tuple[ShardPlan, list[ShardResult]]:
    """The compacted version's splits that hold no record though rows were placed there (each failed at load, so
    no row list names it, and PlaceRows never saw it): their shards written empty, as a full build of the
    manifest writes them (the first min(rows placed, shard count), where round-robin dealing put those rows), and
    their placement added to `plan`, so that the compacted version lists them with no record as that build
    does."""
    splits, written = dict(plan.splits), []
    for split, entry in compaction.source.metadata.splits.items():
        if split in splits or entry.num_examples or not entry.shards:
            continue
        num_shards = entry.num_shards or len(entry.shards)
        splits[split] = SplitPlan(entry.num_placed or 0, entry.source_bytes or 0, num_shards)
        writer = compaction.writer()
        written += [write_compacted_shard(writer, split, shard, [], num_shards)
                    for shard in range(min(len(entry.shards), num_shards))]
    return replace(plan, splits={split: splits[split] for split in SPLITS if split in splits}), written


def publish_compaction(_, compaction: Compaction, shards: list[ShardResult], plan: ShardPlan) -> Metadata:
    """Writes labels.txt, errors.jsonl and near_duplicates.jsonl (the compacted version's), transform_fn/ and the
    TFDS files into the compaction's build folder and publishes it as a build's report does
    (shardsmith/output_folder/publishing.py: metadata.json last, under the lock, then retention beyond
    --keep_builds, and the lock released). A split whose placed rows all failed is listed with empty shards
    (write_failed_splits)."""
    plan, empty_shards = write_failed_splits(compaction, plan)
    metadata = compacted_metadata(compaction, list(shards) + empty_shards, plan)
    files_dir, lock = compaction.target.files_dir, compaction.target.lock
    lock.check()
    write_atomically(join(files_dir, LABELS_FILE), labels_bytes(metadata.labels))
    metadata = carry_near_duplicates(compaction, carry_errors(compaction, metadata))
    write_transform_fn(metadata.labels, files_dir)
    for file_name, content in tfds_metadata_files(metadata).items():
        write_atomically(join(files_dir, file_name), content)
    publish_version(compaction.target, metadata, compaction.retention,
                    before_release=card_step(compaction.target, compaction.write_card),
                    fault_point=fault_injection.reached)
    return metadata


class CopyRecordsFn(beam.DoFn):
    """((split, shard), lists of PlacedRows) -> the ShardResult of the compacted shard they make up.

    With `processes` > 0 (a local run in one process, as a build's WriteShardFn), the shards are copied by that
    many shard writer processes (the compaction's pool, by its build folder), at most two each in hand, and their
    results come out as they finish (the rest in finish_bundle); otherwise each is copied in process()."""

    def __init__(self, config: CompactionWriter, processes: int = 0):
        self._config = config
        self._processes = processes
        self._jobs: JobsInHand | None = None

    def setup(self):
        if self._processes > 0:
            from shardsmith.shard_writer.shard_worker import build_pool

            self._jobs = JobsInHand(build_pool(self._config.writer.files_dir, self._processes), 2)

    def process(self, keyed_rows):
        (split, shard), dealt = keyed_rows
        if self._jobs is None:
            with row_lists_checked():
                yield write_compacted_shard(self._config, split, shard, dealt)
            return
        # SealedBatches: handed to a writer process still pickled
        for _, outcome in self._jobs.send(None, copy_in_writer_process, self._config, split, shard, list(dealt)):
            yield accepted(outcome)

    def finish_bundle(self):
        if self._jobs is not None:
            yield from (in_global_window(accepted(outcome)) for _, outcome in self._jobs.all())

    def teardown(self):
        if self._processes > 0:
            from shardsmith.shard_writer.shard_worker import close_build_pool

            close_build_pool(self._config.writer.files_dir)
        self._jobs = None

    def __getstate__(self):
        # The writer processes and the shards they still copy belong to this instance, never to a copy.
        return {**self.__dict__, "_jobs": None}


GROUP_STATS = "group_stats"


class ReadRowListsFn(beam.DoFn):
    """Source shard indexes -> ((split, label id, bucket), SealedBatch) pieces of rank groups, with each piece's
    (key, (rows, source bytes)) on GROUP_STATS (shardsmith/versions/compaction.py, `keyed_record_rows`), whole
    source shards of about ROWS_PER_READ_JOB records at a time.

    With `processes` > 0 (a local run in one process), the compaction's writer processes read them, at most
    JOBS_IN_FLIGHT_PER_PROCESS jobs each in hand; otherwise the shards are read in process()."""

    def __init__(self, source: CompactionSource, files_dir: str, processes: int = 0):
        self._source = source
        self._files_dir = files_dir
        self._processes = processes
        self._label_bits = source.label_bits()
        self._job_source = source.for_jobs()
        self._jobs: JobsInHand | None = None

    def setup(self):
        if self._processes > 0:
            from shardsmith.shard_writer.shard_worker import build_pool

            self._jobs = JobsInHand(build_pool(self._files_dir, self._processes), JOBS_IN_FLIGHT_PER_PROCESS)

    def start_bundle(self):
        self._held: list[int] = []
        self._num_held = 0

    def process(self, shard_index: int):
        self._held.append(shard_index)
        self._num_held += self._source.shards[shard_index].entry.num_examples or 0
        if self._num_held >= ROWS_PER_READ_JOB:
            yield from self._read_held()

    def finish_bundle(self):
        outputs = [*self._read_held()]
        if self._jobs is not None:
            outputs += [output for _, keyed in self._jobs.all() for output in self._outputs(keyed)]
        yield from map(in_global_windows_of, outputs)

    def _read_held(self):
        held, self._held, self._num_held = self._held, [], 0
        if not held:
            return
        if self._jobs is None:
            with row_lists_checked():
                yield from self._outputs(keyed_record_rows(self._source, held, self._files_dir, self._label_bits))
            return
        for _, keyed in self._jobs.send(None, read_in_writer_process, self._job_source, held, self._files_dir,
                                        self._label_bits):
            yield from self._outputs(keyed)

    @staticmethod
    def _outputs(keyed: KeyedRows | Refused):
        keyed = accepted(keyed)
        yield from keyed.pieces
        for stats in keyed.stats:
            yield beam.pvalue.TaggedOutput(GROUP_STATS, stats)

    def __getstate__(self):
        return {**self.__dict__, "_jobs": None}  # the compaction's pool belongs to the launcher, never to a copy


class CompactVersion(beam.PTransform):
    """A pipeline's root -> the one-element PCollection of the compacted version's metadata.json, published."""

    def __init__(self, compaction: Compaction, writer_processes: int = 0):
        super().__init__()
        self._compaction = compaction
        self._writer_processes = writer_processes

    def expand(self, pipeline):
        source, files_dir = self._compaction.source, self._compaction.target.files_dir
        read = (
            pipeline
            | "ListSourceShards" >> beam.Create(range(len(source.shards)))
            | "ReadRowLists" >> beam.ParDo(ReadRowListsFn(source, files_dir, self._writer_processes)
                                           ).with_outputs(GROUP_STATS, main="pieces")
        )
        helpers = RowHelpers(files_dir, self._writer_processes, look_up_sizes=False)
        shard_groups, plan = of_keyed_batches(read.pieces, sealed=True) | "PlaceRows" >> PlaceKeyedRows(
            source.placement, helpers, read[GROUP_STATS])
        shards = shard_groups | "CopyRecords" >> beam.ParDo(CopyRecordsFn(self._compaction.writer(),
                                                                              self._writer_processes))
        return (
            pipeline
            | "FinalizeTrigger" >> beam.Create([None])
            | "PublishCompaction" >> beam.Map(publish_compaction, self._compaction, beam.pvalue.AsList(shards),
                                              beam.pvalue.AsSingleton(plan))
        )
