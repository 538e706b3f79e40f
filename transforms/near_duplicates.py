"""Near-duplicate images (resized, re-encoded, brightened or slightly cropped copies) across and within splits,
by perceptual signature (shardsmith/near_duplicates/perceptual_hash.py), banded candidates and their confirmation
(shardsmith/near_duplicates/near_duplicate_search.py).

`--near_duplicates report` takes the signatures from the shard writer, which decodes each image anyway: only
(signature, split, label, URI, row position) leaves it. `drop` must decide before placement, so it reads and hashes
every image in a pass of its own (a second read, as `--on_duplicate drop`) and turns the validation or test
copy of a training image into an error row; both modes write near_duplicates.jsonl and a summary for
metadata.json.

Memory and work: rows of one signature are first grouped (shardsmith/near_duplicates/identical_signatures.py), so a
thousand blank images are one group and one row to compare, not half a million pairs. The band GroupByKey carries rows
of about 200 bytes keyed by (band, band value); one bucket holds at most MAX_BUCKET_MEMBERS + 1 of them in a worker, and
at most MAX_BUCKET_CANDIDATES candidates are counted before any pair is formed (bigger buckets are reported as capped,
not expanded); the listing keeps the MAX_LISTED_PAIRS closest pairs, the counts cover them all.

An --incremental night compares its new images with each other and with the published version's records, whose
signatures its row lists keep (transforms/versions/carried_rows.py reads them, as the carried SHA-256s): never
two published records (shardsmith/versions/published_pairs.py bounds such a bucket as a full build's is).
Published records are grouped by signature apart from new images, so the groups summarised are the night's;
`drop` never drops a published record (`leaked_copy`).
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import NamedTuple

import apache_beam as beam

from shardsmith.format.build_record import write_atomically
from shardsmith.format.metadata import near_duplicates_bytes
from shardsmith.format.metadata_schema import NearDuplicatesEntry
from shardsmith.format.naming import NEAR_DUPLICATES_FILE, join
from shardsmith.images.load_images import read_input_file
from shardsmith.manifest import ManifestFormat
from shardsmith.near_duplicates.identical_signatures import MAX_EXPANDED_GROUP
from shardsmith.near_duplicates.near_duplicate_search import (
    CAPPED_BUCKET_EXAMPLES,
    LOW_DETAIL_MIN_STRUCTURE_SIMILARITY,
    MAX_BUCKET_CANDIDATES,
    MAX_BUCKET_MEMBERS,
    MIN_STRUCTURE_SIMILARITY,
    CappedBucket,
    HashedImage,
    NearPair,
    bands,
    bucket_candidates,
    confirmed_pairs,
    drop_reason,
    kept_side,
    leaked_copy,
    num_bands_for,
    take_bucket,
)
from shardsmith.near_duplicates.perceptual_hash import ImageSignature, signature_of_bytes
from shardsmith.output_folder import BuildTarget
from shardsmith.rows import ROWS_PER_BATCH, ErrorRow, ManifestRow, RowBatch
from shardsmith.settings import DEFAULT_MAX_PIXELS, CheckSettings, RecordSettings
from shardsmith.versions import MAX_BUCKET_COMPARISONS, confirmed_published_pairs, count_published_candidates, take_new
from transforms import ERRORS
from transforms.duplicates import STAGE
from transforms.gather import Gather, PerBundleFn, combine_all
from transforms.identical_groups import CollapseIdentical, FollowerDecisions, GroupsSummary, SummarizeGroupsFn
from transforms.metrics import rejected
from transforms.row_coder import of_batches
from transforms.thread_pool import ThreadPoolDoFn

MAX_LISTED_PAIRS = 100_000  # pairs written to near_duplicates.jsonl (the closest); counts cover every pair
MAX_LISTED_CAPPED_BUCKETS = 20
MAX_HASHES_IN_FLIGHT = 16
CAPPED = "capped"


def _keyed_bands(image: HashedImage, num_bands: int) -> Iterator[tuple[tuple[int, int], HashedImage]]:
    for band in bands(image.phash, num_bands):
        yield band, image


def _bucket_pairs(keyed, max_distance: int) -> Iterator:
    (band, value), members = keyed
    held, size = take_bucket(members, MAX_BUCKET_MEMBERS)
    if size > MAX_BUCKET_MEMBERS:
        yield beam.pvalue.TaggedOutput(CAPPED, CappedBucket(band, value, size, tuple(m.uri for m in held)))
        return
    candidates = bucket_candidates(held, max_distance, MAX_BUCKET_CANDIDATES)
    if candidates.over(MAX_BUCKET_CANDIDATES):
        examples = tuple(m.uri for m in candidates.members[:CAPPED_BUCKET_EXAMPLES])
        yield beam.pvalue.TaggedOutput(CAPPED, CappedBucket(band, value, size, examples, candidates.count))
        return
    for pair in confirmed_pairs(candidates):
        yield pair.pair_key, pair


def _night_bucket_pairs(keyed, max_distance: int) -> Iterator:
    """A bucket of an --incremental night: its new images' pairs with each other and with its published records
    (shardsmith/versions/published_pairs.py); a bucket without a new image has no pair to look for."""
    (band, value), members = keyed
    bucket = take_new(members, MAX_BUCKET_MEMBERS)
    if not bucket.num_new:
        return
    examples = tuple(m.uri for m in bucket.new[:CAPPED_BUCKET_EXAMPLES])
    if bucket.num_new > MAX_BUCKET_MEMBERS or bucket.comparisons > MAX_BUCKET_COMPARISONS:
        yield beam.pvalue.TaggedOutput(CAPPED, CappedBucket(band, value, bucket.size, examples,
                                                            published=bucket.num_published))
        return
    within = bucket_candidates(bucket.new, max_distance, MAX_BUCKET_CANDIDATES)
    published = lambda: (m for m in members if m.published)  # noqa: E731 (iterated twice: counted, then paired)
    count = within.count
    if not within.over(MAX_BUCKET_CANDIDATES):
        count += count_published_candidates(bucket.new, published, max_distance)
    if count > MAX_BUCKET_CANDIDATES:
        yield beam.pvalue.TaggedOutput(CAPPED, CappedBucket(band, value, bucket.size, examples, count,
                                                            bucket.num_published))
        return
    for pair in chain(confirmed_pairs(within), confirmed_published_pairs(bucket.new, published, max_distance)):
        yield pair.pair_key, pair


def _first(keyed) -> NearPair:
    _, pairs = keyed
    return next(iter(pairs))  # the same pair from every band it was found in


class NearPairs(NamedTuple):
    pairs: beam.PCollection  # NearPair, each once
    capped: beam.PCollection  # CappedBucket
    groups: beam.PCollection  # IdenticalGroup: more than MAX_EXPANDED_GROUP rows with one signature
    followers: beam.PCollection  # (representative key, follower...) of those groups (`with_followers` only)


class FindNearPairs(beam.PTransform):
    """HashedImages (one by one, or lists of them) -> every pair within `checks.near_duplicate_distance`, once
    (a collapsed group's representative standing for its rows), the groups of identical signatures, and the
    buckets too big to expand. An --incremental night's input is (its HashedImages, lists of the published
    records'): its pairs are those with a new image."""

    def __init__(self, checks: CheckSettings, lists: bool = True, with_followers: bool = False):
        super().__init__()
        self._max_distance = checks.near_duplicate_distance
        self._lists = lists
        self._with_followers = with_followers

    def expand(self, images):
        num_bands = num_bands_for(self._max_distance)
        published = None
        if isinstance(images, tuple):
            images, published = images
        if self._lists:
            images = images | "OnePerImage" >> beam.FlatMap(lambda images: images)
        if published is not None:
            published = published | "OnePerPublishedRecord" >> beam.FlatMap(lambda images: images)
            images = (images, published) | "WithPublishedRecords" >> beam.Flatten()
        collapsed = images | "CollapseIdentical" >> CollapseIdentical(self._with_followers)
        in_bucket = _bucket_pairs if published is None else _night_bucket_pairs
        found = (
            collapsed.compared
            | "KeyByBand" >> beam.FlatMap(_keyed_bands, num_bands)
            | "GroupByBand" >> beam.GroupByKey()
            | "PairsInBucket" >> beam.FlatMap(in_bucket, self._max_distance).with_outputs(CAPPED, main="pairs")
        )
        pairs = found.pairs | "GroupSamePair" >> beam.GroupByKey() | "OnePerPair" >> beam.Map(_first)
        return NearPairs(pairs, found[CAPPED], collapsed.groups, collapsed.followers)


@dataclass
class NearDuplicateSummary:
    num_pairs: int = 0
    split_pairs: Counter = field(default_factory=Counter)  # "train-test" / "within train" -> pairs
    num_label_mismatches: int = 0
    num_low_detail: int = 0
    num_published: int = 0  # pairs of a new image and a published record (an --incremental night's)
    closest: list = field(default_factory=list)  # heap of (-sort_key..) holding the MAX_LISTED_PAIRS closest


class SummarizePairsFn(beam.CombineFn):
    """Counts every pair and keeps the MAX_LISTED_PAIRS closest (by distance, then keys: deterministic)."""

    def create_accumulator(self) -> NearDuplicateSummary:
        return NearDuplicateSummary()

    def add_input(self, summary: NearDuplicateSummary, pair: NearPair) -> NearDuplicateSummary:
        summary.num_pairs += 1
        summary.split_pairs[pair.splits] += 1
        summary.num_label_mismatches += pair.labels_differ
        summary.num_low_detail += pair.low_detail
        summary.num_published += pair.first.published or pair.second.published
        summary.closest.append(pair)
        if len(summary.closest) > 2 * MAX_LISTED_PAIRS:
            summary.closest = heapq.nsmallest(MAX_LISTED_PAIRS, summary.closest, key=NearPair.sort_key)
        return summary

    def merge_accumulators(self, summaries: Iterable[NearDuplicateSummary]) -> NearDuplicateSummary:
        merged = NearDuplicateSummary()
        for s in summaries:
            merged.num_pairs += s.num_pairs
            merged.split_pairs.update(s.split_pairs)
            merged.num_label_mismatches += s.num_label_mismatches
            merged.num_low_detail += s.num_low_detail
            merged.num_published += s.num_published
            merged.closest = heapq.nsmallest(MAX_LISTED_PAIRS, merged.closest + s.closest, key=NearPair.sort_key)
        return merged

    def extract_output(self, summary: NearDuplicateSummary) -> NearDuplicateSummary:
        summary.closest = heapq.nsmallest(MAX_LISTED_PAIRS, summary.closest, key=NearPair.sort_key)
        return summary


@dataclass(frozen=True)
class PublishedRecords:
    """What an --incremental night compared its new images with: the published version, and how many of its
    (carried) records had a signature in their row lists and were compared, and how many had none."""

    version: str
    compared: int = 0
    not_compared: int = 0


def write_near_duplicates(summary: NearDuplicateSummary, capped: list[CappedBucket], files_dir: str, mode: str,
                          max_distance: int, num_dropped: int, groups: GroupsSummary | None = None,
                          published: PublishedRecords | None = None) -> NearDuplicatesEntry:
    """Writes near_duplicates.jsonl (closest pairs first) and returns metadata.json's `near_duplicates` entry."""
    groups = groups or GroupsSummary()
    write_atomically(join(files_dir, NEAR_DUPLICATES_FILE), near_duplicates_bytes(p.to_dict() for p in summary.closest))
    capped = sorted(capped, key=lambda c: (-c.size, c.band, c.value))
    counts = {name: summary.split_pairs.get(name, 0)
              for name in ("train-test", "train-validation", "validation-test")}
    counts |= {name: n for name, n in sorted(summary.split_pairs.items()) if name not in counts}
    return NearDuplicatesEntry(
        mode=mode,
        max_distance=max_distance,
        hash="pHash (as imagehash 4.3.2), 64 bits; pairs confirmed by structure and colour",
        min_structure_similarity=MIN_STRUCTURE_SIMILARITY,
        low_detail_min_structure_similarity=LOW_DETAIL_MIN_STRUCTURE_SIMILARITY,
        num_low_detail_pairs=summary.num_low_detail,
        num_pairs=summary.num_pairs,
        num_listed=len(summary.closest),
        file=NEAR_DUPLICATES_FILE,
        split_pairs=counts,
        num_label_mismatches=summary.num_label_mismatches,
        label_mismatches=[p.to_dict() for p in summary.closest if p.labels_differ][:20],
        num_dropped=num_dropped,
        num_capped_buckets=len(capped),
        max_bucket_members=MAX_BUCKET_MEMBERS,
        capped_buckets=[c.to_dict() for c in capped[:MAX_LISTED_CAPPED_BUCKETS]],
        max_bucket_candidates=MAX_BUCKET_CANDIDATES,
        identical_group_min_size=MAX_EXPANDED_GROUP + 1,
        num_identical_groups=groups.num_groups,
        num_identical_images=groups.num_images,
        identical_groups=[g.to_dict() for g in groups.largest],
        **({} if published is None else {
            "published_version": published.version, "num_published_compared": published.compared,
            "num_published_not_compared": published.not_compared, "num_published_pairs": summary.num_published,
            "max_bucket_comparisons": MAX_BUCKET_COMPARISONS}),
    )


def _published_records(counts: tuple[int, int], version: str) -> PublishedRecords:
    return PublishedRecords(version, *counts)


class ReportNearDuplicates(beam.PTransform):
    """NearPairs -> a one-element PCollection: metadata.json's NearDuplicatesEntry, after
    near_duplicates.jsonl is written into the build's folder. An --incremental night passes the version its new
    images were compared with and a one-element PCollection of (published records compared, not compared)."""

    def __init__(self, target: BuildTarget, checks: CheckSettings, dropped=None, published_version: str | None = None,
                 published_counts=None):
        super().__init__()
        self._files_dir = target.files_dir
        self._mode = checks.near_duplicates
        self._max_distance = checks.near_duplicate_distance
        self._dropped = dropped  # ErrorRows of dropped copies, or None
        self._published_version = published_version
        self._published_counts = published_counts

    def expand(self, found: NearPairs):
        summary = (found.pairs
                   | "SummarizePairsPerBundle" >> beam.ParDo(PerBundleFn(SummarizePairsFn()))
                   | "SummarizePairs" >> Gather(combine_all, SummarizePairsFn()))
        capped = found.capped | "CollectCapped" >> Gather(list)
        groups = (found.groups
                  | "SummarizeGroupsPerBundle" >> beam.ParDo(PerBundleFn(SummarizeGroupsFn()))
                  | "SummarizeGroups" >> Gather(combine_all, SummarizeGroupsFn()))
        side = beam.pvalue.AsSingleton
        num_dropped = 0
        if self._dropped is not None:
            num_dropped = side(self._dropped
                               | "CountDroppedPerBundle" >> beam.ParDo(PerBundleFn(beam.combiners.CountCombineFn()))
                               | "CountDropped" >> Gather(sum))
        published = None
        if self._published_counts is not None:
            published = side(self._published_counts
                             | "PublishedRecords" >> beam.Map(_published_records, self._published_version))
        return summary | "WriteNearDuplicatesJsonl" >> beam.Map(
            write_near_duplicates, side(capped), self._files_dir, self._mode, self._max_distance, num_dropped,
            side(groups), published)


def row_key(row: ManifestRow) -> tuple[int, int, str]:
    return (row.source_index, row.line, row.uri)


def hashed(row: ManifestRow, signature: ImageSignature) -> HashedImage:
    return HashedImage(signature, row.split, row.label, row.uri, row.source_index, row.line)


class PerceptualSignatureFn(ThreadPoolDoFn):
    """RowBatch -> (row key, row) per row, and a HashedImage (tagged `hashes`) per row whose image decodes;
    one that does not is left to the shard writer, which reads it again and reports why."""

    pool_size = MAX_HASHES_IN_FLIGHT

    def __init__(self, max_image_bytes: int, max_pixels: int = DEFAULT_MAX_PIXELS,
                 allowed_prefixes: tuple[str, ...] = ()):
        super().__init__()
        self._max_image_bytes = max_image_bytes
        self._max_pixels = max_pixels
        self._allowed_prefixes = allowed_prefixes

    def _hash(self, row: ManifestRow) -> ImageSignature | None:
        try:
            data = read_input_file(row.resolved_uri, self._max_image_bytes, row.size, self._allowed_prefixes)
            return signature_of_bytes(data, self._max_pixels)  # through the writer's decompression-bomb guard
        except Exception:
            return None

    def process(self, batch: RowBatch) -> Iterator:
        for signature, row in zip(self._pool.map(self._hash, batch), batch, strict=True):
            yield row_key(row), row
            if signature is not None:
                yield beam.pvalue.TaggedOutput("hashes", hashed(row, signature))


def _drop_decision(pair: NearPair) -> Iterator:
    """(key of the copy to drop, (distance, kept key, kept URI, kept split, kept record's build if published))."""
    copy = leaked_copy(pair)
    if copy is not None:
        kept = kept_side(pair, copy)
        yield copy.key, (pair.distance, kept.key, kept.uri, kept.split, kept.build)


def _keep_or_drop(keyed) -> Iterator:
    _, grouped = keyed
    decisions = sorted(grouped["decisions"])
    for row in grouped["rows"]:
        if not decisions:
            yield row
            continue
        distance, _, kept_uri, kept_split, kept_build = decisions[0]  # the closest copy kept, then the first by key
        yield rejected(ErrorRow.for_row(row, STAGE, "near duplicate dropped (--near_duplicates drop)",
                                        drop_reason(kept_uri, distance, kept_split, kept_build)))


class NearDistinct(NamedTuple):
    rows: beam.PCollection  # RowBatches without the dropped copies
    errors: beam.PCollection  # ErrorRows of the dropped copies
    found: NearPairs


class DropNearDuplicates(beam.PTransform):
    """RowBatches -> RowBatches without the validation/test copies of training images (error rows instead),
    and the pairs found. Rows go through a GroupByKey one by one: this mode reads every image twice anyway.
    An --incremental night passes `published`, lists of the published records' HashedImages: a new image paired
    with one across train and validation/test is dropped, whichever its split."""

    def __init__(self, records: RecordSettings, checks: CheckSettings, manifest: ManifestFormat, published=None):
        super().__init__()
        self._published = published
        self._max_image_bytes = records.max_image_bytes
        self._allowed_prefixes = manifest.allowed_prefixes  # checked again where each image is opened
        self._checks = checks
        self._max_pixels = records.max_pixels

    def expand(self, batches):
        hash_rows = PerceptualSignatureFn(self._max_image_bytes, self._max_pixels, self._allowed_prefixes)
        keyed = batches | "HashImages" >> beam.ParDo(hash_rows).with_outputs("hashes", main="rows")
        hashes = keyed.hashes if self._published is None else (keyed.hashes, self._published)
        found = hashes | "FindNearPairs" >> FindNearPairs(self._checks, lists=False, with_followers=True)
        pair_decisions = found.pairs | "LeakedCopies" >> beam.FlatMap(_drop_decision)
        followers = (pair_decisions, found.followers) | "LeakedFollowers" >> FollowerDecisions()
        decisions = (pair_decisions, followers) | "AllDecisions" >> beam.Flatten()
        decided = (
            {"rows": keyed.rows, "decisions": decisions}
            | "JoinDecisions" >> beam.CoGroupByKey()
            | "KeepOrDrop" >> beam.FlatMap(_keep_or_drop).with_outputs(ERRORS, main="rows")
        )
        rows = (decided.rows
                | "Rebatch" >> beam.BatchElements(min_batch_size=ROWS_PER_BATCH, max_batch_size=ROWS_PER_BATCH)
                | "AsRowBatches" >> beam.Map(RowBatch))
        of_batches(rows)
        return NearDistinct(rows, decided[ERRORS], found)
