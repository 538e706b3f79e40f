"""`--incremental`: tell the manifest's rows apart into carried and new ones, and rewrite the published version's
shards that hold removed rows (shardsmith/versions/carry_over.py has the model).

Rows and records meet in a partitioned join through spill files in the build's scratch folder
(shardsmith/versions/spill.py): only references to the files' sections go through a GroupByKey, never rows
or image bytes, so memory stays bounded however long the manifest is; a carried row's image is neither read nor
stat'ed (it leaves before LookupSizes). Memory: SPILL_ENTRIES entries per spilling worker, one partition per
pairing worker, one shard's row list per reader. The removed rows are checked against --max_removed_fraction
before anything downstream of `gate` runs: the vocabulary waits for the check, and the shards wait for the
vocabulary.

Row lists are input: each is counted against its shard's entry in metadata.json as it is read, and each record a
rewrite copies is checked against its line (shardsmith/versions/row_check.py); one that does not describe its shard
fails the build (DatasetCheckFailed, one line naming the file and the line) before anything is published.

With --near_duplicates, the carried records' perceptual signatures (their row lists' last field) come out too, as
HashedImages marked published, for the night's search (transforms/near_duplicates.py), with how many carried
records had none (a row list from a build without the flag, or rebuilt from its shard): those are not compared.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from shardsmith import progress_signal, storage
from shardsmith.format.naming import row_list_name, shard_generation
from shardsmith.format.row_list import ListedRow, RowListError, parse_row_list, rows_with_sha256
from shardsmith.near_duplicates.near_duplicate_search import HashedImage
from shardsmith.near_duplicates.perceptual_hash import ImageSignature, signature_from_text
from shardsmith.output_folder import BuildTarget, build_dir, carry_over_scratch
from shardsmith.rows import ROWS_PER_BATCH, ImageDigest, ImageDigests, ManifestRow, RowBatch
from shardsmith.rows.row_identity import row_identity
from shardsmith.versions import row_check
from shardsmith.versions.carry_over import CarriedShard, CarriedVersion, RecordPlace, pair_rows
from shardsmith.versions.spill import SpillBuffer, num_partitions, read_sections
from transforms.gather import Gather
from transforms.metrics import ROWS_CARRIED, ROWS_REMOVED, count
from transforms.report import DatasetCheckFailed
from transforms.row_coder import of_batches

CARRIED, REMOVED, CARRIED_DIGESTS, RELISTED = "carried", "removed", "carried_digests", "relisted"
CARRIED_SIGNATURES, SIGNED = "carried_signatures", "signed"
_LOG = logging.getLogger("shardsmith")


def _keyed_rows(batch: RowBatch) -> list[tuple[str, ManifestRow]]:
    return [(row_identity(row), row) for row in batch]


def _listed_records(shard_index: int, output_dir: str, version: CarriedVersion, signatures: bool = False,
                    appended: bool = False) -> Iterator:
    """One carried shard's records, keyed by identity, in one list (one shard's row list in memory), once its
    row list was counted against metadata.json; with `signatures`, each with its perceptual signature. A lost row
    list is rebuilt from the shard's records (where they hold it: shardsmith/versions/row_check.py; a rebuilt line has
    no signature), and the shard goes out tagged `relisted` too: it is rewritten, with its new row list, into the
    build's folder (a RecordPlace at position -1, which removes no record). When the manifest was read as
    `appended` (its rows are the new ones and the version's failed ones: there is nothing to pair), only the
    row list's lines are counted, before anything is written."""
    carried = version.shards[shard_index]
    folder = build_dir(output_dir, carried.build)
    path = storage.join(folder, row_list_name(carried.entry.file))
    if appended:
        _count_lines(path, carried, version)
        progress_signal.add(progress_signal.PUBLISHED_READ, carried.entry.num_examples or 0)
        return
    with row_lists_checked():
        data = storage.read_bytes(path)
        if data is not None:
            rows = parse_row_list(data, path)
        elif version.why_not_rebuilt:
            raise row_check.missing(path, version.why_not_rebuilt)
        else:
            _LOG.warning("%s is missing: rebuilt from its shard's records; the shard is rewritten with it", path)
            rows = row_check.rebuilt_rows(storage.join(folder, carried.entry.file), version.compression,
                                          version.file_format, carried.split, path)
            yield beam.pvalue.TaggedOutput(RELISTED, RecordPlace(shard_index, -1, 0))
        row_check.check_count(path, len(rows), carried.entry.file, carried.entry.num_examples,
                              version.why_not_rebuilt)
        places = [(row.identity, RecordPlace(shard_index, position, row.lines, row.size, row.sha256,
                                             _signature(row, path, position, version) if signatures else None))
                  for position, row in enumerate(rows)]
    progress_signal.add(progress_signal.PUBLISHED_READ, len(places))  # the launcher's progress line
    yield places


def _signature(row: ListedRow, path: str, position: int, version: CarriedVersion) -> ImageSignature | None:
    """The perceptual signature a row list's line holds (None for none); RowListError for one that is not."""
    if not row.signature:
        return None
    try:
        return signature_from_text(row.signature)
    except ValueError as e:
        raise RowListError(f"{path} line {position + 1} holds {e}: {row.signature[:40]!r}; "
                           f"{row_check.fix(version.why_not_rebuilt)}") from None


@contextmanager
def row_lists_checked() -> Iterator[None]:
    """A row list that does not describe its shard (RowListError) fails the job as a dataset check does: one
    line, before anything is published."""
    try:
        yield
    except RowListError as e:
        raise DatasetCheckFailed(f"{e}; nothing was published") from None


def accepted(outcome):
    """A writer process's answer (shardsmith/shard_writer/jobs_in_hand.py), or the refusal it sent back
    (row_check.Refused) raised as row_lists_checked raises it in the launcher: one line, nothing published."""
    if isinstance(outcome, row_check.Refused):
        with row_lists_checked():
            outcome.raise_again()
    return outcome


class SpillFn(beam.DoFn):
    """Lists of (identity, row or record) -> (partition, SpillSection), written to spill files in the build's
    scratch folder, SPILL_ENTRIES entries at a time (shardsmith/versions/spill.py)."""

    def __init__(self, files_dir: str, partitions: int):
        self._files_dir = files_dir
        self._partitions = partitions
        self._folder = ""
        self._buffer: SpillBuffer | None = None

    def setup(self) -> None:
        self._folder = carry_over_scratch(self._files_dir)

    def start_bundle(self) -> None:
        self._buffer = SpillBuffer(self._folder, self._partitions)

    def process(self, entries) -> Iterator:
        for identity, item in entries:
            self._buffer.add(identity, item)
            if self._buffer.full:
                yield from self._buffer.write()

    def finish_bundle(self) -> Iterator:
        for partition_section in self._buffer.write():
            yield GlobalWindows.windowed_value(partition_section)


class PairPartitionFn(beam.DoFn):
    """(partition, [SpillSection, ...]) -> new rows (main, RowBatches in manifest order), removed records
    (tagged `removed`), the manifest lines carried (tagged `carried`) and the carried records' ImageDigests
    (tagged `carried_digests`, one list: the version's duplicate summary covers them); with `signatures`, the
    carried records' HashedImages (tagged `carried_signatures`, lists of up to ROWS_PER_BATCH) and (records with a
    signature, records without) (tagged `signed`). Holds one partition in memory."""

    def __init__(self, version: CarriedVersion, signatures: bool = False):
        self._version = version
        self._signatures = signatures

    def _published(self, carried: list[tuple[ManifestRow, RecordPlace]]) -> Iterator:
        signed = [self._hashed(row, place) for row, place in carried if place.signature is not None]
        yield beam.pvalue.TaggedOutput(SIGNED, (len(signed), len(carried) - len(signed)))
        for start in range(0, len(signed), ROWS_PER_BATCH):
            yield beam.pvalue.TaggedOutput(CARRIED_SIGNATURES, signed[start:start + ROWS_PER_BATCH])

    def _hashed(self, row: ManifestRow, place: RecordPlace) -> HashedImage:
        shard = self._version.shards[place.shard]
        return HashedImage(place.signature, shard.split, row.label, row.uri, row.source_index, row.line,
                           build=shard.build, generation=shard_generation(shard.entry.file))

    def process(self, element) -> Iterator:
        _, sections = element
        rows: defaultdict[str, list[ManifestRow]] = defaultdict(list)
        records: defaultdict[str, list[RecordPlace]] = defaultdict(list)
        for identity, item in read_sections(sections):
            (records if isinstance(item, RecordPlace) else rows)[identity].append(item)
        carried_lines, new_rows, digests, carried = 0, [], ImageDigests(), []
        for identity in sorted(rows.keys() | records.keys()):
            pairing = pair_rows(rows.get(identity, []), records.get(identity, []))
            carried_lines += pairing.carried_lines
            new_rows += pairing.new_rows
            if self._signatures:
                carried += pairing.carried
            digests += [ImageDigest(place.sha256, self._version.shards[place.shard].split, row.uri, row.source_index,
                                    row.line) for row, place in pairing.carried if place.sha256]
            for place in pairing.removed:
                count(ROWS_REMOVED, place.lines)
                yield beam.pvalue.TaggedOutput(REMOVED, place)
        if carried_lines:
            count(ROWS_CARRIED, carried_lines)
            yield beam.pvalue.TaggedOutput(CARRIED, carried_lines)
        if digests:
            yield beam.pvalue.TaggedOutput(CARRIED_DIGESTS, digests)
        if self._signatures:
            yield from self._published(carried)
        new_rows.sort(key=lambda row: (row.source_index, row.line))
        for start in range(0, len(new_rows), ROWS_PER_BATCH):
            yield RowBatch(new_rows[start:start + ROWS_PER_BATCH])


def check_removals(removed_lines: int, version: CarriedVersion) -> int:
    """The removed lines, or DatasetCheckFailed when they are more than --max_removed_fraction of the version."""
    fraction = removed_lines / version.num_rows if version.num_rows else 0.0
    if fraction > version.max_removed_fraction:
        raise DatasetCheckFailed(
            f"the manifest lacks {removed_lines:,} of the {version.num_rows:,} rows of version {version.previous} "
            f"({fraction:.1%}), more than --max_removed_fraction={version.max_removed_fraction}; nothing was "
            "published: check that the manifest is complete (a truncated export?), or raise "
            "--max_removed_fraction to publish the version without them")
    return removed_lines


class SplitCarriedRows(beam.PTransform):
    """Split RowBatches -> `rows` (new rows, in RowBatches), `removed` (RecordPlaces of the removed records, and
    one at position -1 for each shard whose lost row list was rebuilt: the shards to rewrite), `carried_lines` and
    `removed_lines` (one-element sums; `removed_lines` is checked against --max_removed_fraction) and
    `removed_bytes` ((split, source bytes of its removed records)) and `carried_digests` (lists of the carried
    records' ImageDigests); with `signatures` (--near_duplicates), `carried_signatures` (lists of the carried
    records' HashedImages) and `signed` (one (records with a signature, records without)). `target`: the
    build's folder, whose scratch folder holds the spill files, in the output folder that holds the version."""

    def __init__(self, target: BuildTarget, version: CarriedVersion, signatures: bool = False, appended=None):
        super().__init__()
        self._output_dir = target.output_dir
        self._version = version.for_stages()  # pickled into several stages: without the label counts
        self._files_dir = target.files_dir
        self._signatures = signatures
        self._appended = appended  # one bool: the manifest was read as appended (ReadManifest's SourceRead)

    def expand(self, batches):
        version, partitions = self._version, num_partitions(self._version.num_rows)
        appended = () if self._appended is None else (beam.pvalue.AsSingleton(self._appended),)
        row_sections = (
            batches
            | "KeyByIdentity" >> beam.Map(_keyed_rows)
            | "SpillRows" >> beam.ParDo(SpillFn(self._files_dir, partitions))
        )
        listed = (
            batches.pipeline
            | "ListCarriedShards" >> beam.Create(range(len(version.shards)))
            | "ReadRowLists" >> beam.FlatMap(_listed_records, self._output_dir, version, self._signatures,
                                             *appended).with_outputs(RELISTED, main="records")
        )
        record_sections = listed.records | "SpillRecords" >> beam.ParDo(SpillFn(self._files_dir, partitions))
        paired = (
            (row_sections, record_sections)
            | "AllSections" >> beam.Flatten()
            | "GroupByPartition" >> beam.GroupByKey()
            | "PairRows" >> beam.ParDo(PairPartitionFn(version, self._signatures)).with_outputs(
                CARRIED, REMOVED, CARRIED_DIGESTS, CARRIED_SIGNATURES, SIGNED, main="rows")
        )
        carried = paired[CARRIED]
        if self._appended is not None:  # an appended manifest's skipped rows are the version's record lines
            num_rows = version.num_rows  # the lambda's closure holds the count, not the version
            skipped = self._appended | "AppendedCarried" >> beam.Map(lambda read: num_rows if read else 0)
            carried = (carried, skipped) | "AllCarried" >> beam.Flatten()
        carried_lines = carried | "SumCarried" >> beam.CombineGlobally(sum)
        removed_lines = (
            paired[REMOVED]
            | "RemovedLines" >> beam.Map(lambda place: place.lines)
            | "SumRemoved" >> beam.CombineGlobally(sum)
            | "CheckRemovals" >> beam.Map(check_removals, version)
        )
        splits = tuple(shard.split for shard in version.shards)
        removed_bytes = (
            paired[REMOVED]
            | "RemovedBytes" >> beam.Map(lambda place: (splits[place.shard], place.size))
            | "SumRemovedBytes" >> beam.CombinePerKey(sum)
        )
        to_rewrite = (paired[REMOVED], listed[RELISTED]) | "ShardsToRewrite" >> beam.Flatten()
        outputs = {"rows": of_batches(paired.rows), "removed": to_rewrite, "carried_lines": carried_lines,
                   "removed_lines": removed_lines, "removed_bytes": removed_bytes,
                   "carried_digests": paired[CARRIED_DIGESTS]}
        if self._signatures:
            outputs |= {CARRIED_SIGNATURES: paired[CARRIED_SIGNATURES],
                        SIGNED: paired[SIGNED] | "SumSigned" >> beam.CombineGlobally(_sum_counts)}
        return outputs


def _sum_counts(counts) -> tuple[int, int]:
    """(records with a signature, without), summed over the partitions."""
    signed = unsigned = 0
    for with_signature, without in counts:
        signed += with_signature
        unsigned += without
    return signed, unsigned


def gated(collection, check, label: str):
    """`collection`, each element passed on only after the one-element `check` was computed (a side input)."""
    return collection | label >> beam.Map(lambda value, _checked: value, beam.pvalue.AsSingleton(check))



def _new_hashes(digest_lists: list[list[ImageDigest]]) -> frozenset[str]:
    return frozenset(digest.sha256 for digests in digest_lists for digest in digests)


def _published_copies(shard_index: int, output_dir: str, version: CarriedVersion, appended: bool,
                      new: frozenset[str]) -> Iterator[ImageDigests]:
    """The records of one carried shard whose image is identical to one of the night's new images (their
    ImageDigests, in one list), from its row list's SHA-256s, once the list was counted against metadata.json;
    nothing unless the manifest was read as `appended` (else the pairing gives every carried record's)."""
    if not appended or not new:
        return
    carried = version.shards[shard_index]
    path = storage.join(build_dir(output_dir, carried.build), row_list_name(carried.entry.file))
    data = _count_lines(path, carried, version)
    with row_lists_checked():
        copies = ImageDigests(ImageDigest(row.sha256, carried.split, row.uri, 0, 0)
                              for row in rows_with_sha256(data, new, path))
    if copies:
        yield copies


def _count_lines(path: str, carried: CarriedShard, version: CarriedVersion) -> bytes:
    """A row list's bytes, once its lines were counted against its shard's records (DatasetCheckFailed)."""
    with row_lists_checked():
        data = storage.read_bytes(path)
        if data is None:
            raise RowListError(f"{path} was removed while the build ran (it was there when the build started): "
                               "run the build again; a night that finds it missing rebuilds it from its shard")
        row_check.check_count(path, data.count(b"\n"), carried.entry.file, carried.entry.num_examples,
                              version.why_not_rebuilt)
    return data


class PublishedCopies(beam.PTransform):
    """The night's new ImageDigests (lists) -> lists of ImageDigests of the carried records identical to one of
    them, when the manifest was read as appended (`appended`, one bool): what the version's duplicate summary
    needs of the records the night did not pair (transforms/duplicates.py `with_published`). Memory: the new
    images' SHA-256s and one row list per worker."""

    def __init__(self, target: BuildTarget, version: CarriedVersion, appended):
        super().__init__()
        self._output_dir = target.output_dir  # the carried shards' row lists are in its earlier builds' folders
        self._version = version.for_stages()
        self._appended = appended

    def expand(self, new_digests):
        new = new_digests | "NewHashes" >> Gather(_new_hashes)  # made once, not for each shard scanned
        return (
            new_digests.pipeline
            | "ListPublishedShards" >> beam.Create(range(len(self._version.shards)))
            | "ScanRowLists" >> beam.FlatMap(_published_copies, self._output_dir, self._version,
                                             beam.pvalue.AsSingleton(self._appended), beam.pvalue.AsSingleton(new))
        )
