"""Near-duplicate images (resized, re-encoded, brightened or slightly cropped copies) across and within splits,
by perceptual signature (shardsmith/core/perceptual_hash.py), banded candidates and their confirmation
(shardsmith/core/near_duplicate_search.py).

`--near_duplicates report` takes the signatures from the shard writer, which decodes each image anyway: only
(signature, split, label, URI, row position) leaves it. `drop` must decide before placement, so it reads and hashes
every image in a pass of its own (a second read, as `--on_duplicate drop`) and turns the validation or test
copy of a training image into an error row; both modes write near_duplicates.jsonl and a summary for
metadata.json.

Memory and work: rows of one signature are first grouped (shardsmith/core/identical_signatures.py), so a thousand
blank images are one group and one row to compare, not half a million pairs. The band GroupByKey carries rows of
about 200 bytes keyed by (band, band value); one bucket holds at most MAX_BUCKET_MEMBERS + 1 of them in a worker,
and at most MAX_BUCKET_CANDIDATES candidates are counted before any pair is formed (bigger buckets are reported as
capped, not expanded); the listing keeps the MAX_LISTED_PAIRS closest pairs, the counts cover them all.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import apache_beam as beam

from shardsmith.core.identical_signatures import MAX_EXPANDED_GROUP
from shardsmith.core.load_images import DEFAULT_MAX_PIXELS, read_input_file
from shardsmith.core.manifest import ManifestFormat
from shardsmith.core.near_duplicate_search import (
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
    leaked_copy,
    num_bands_for,
    take_bucket,
)
from shardsmith.core.perceptual_hash import ImageSignature, signature_of_bytes
from shardsmith.core.rows import ROWS_PER_BATCH, ErrorRow, ManifestRow, RowBatch
from shardsmith.core.settings import CheckSettings, RecordSettings
from shardsmith.format.build_folder import write_atomically
from shardsmith.format.metadata import near_duplicates_bytes
from shardsmith.format.metadata_schema import NearDuplicatesEntry
from shardsmith.format.naming import NEAR_DUPLICATES_FILE, join
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
    buckets too big to expand."""

    def __init__(self, checks: CheckSettings, lists: bool = True, with_followers: bool = False):
        super().__init__()
        self._max_distance = checks.near_duplicate_distance
        self._lists = lists
        self._with_followers = with_followers

    def expand(self, images):
        num_bands = num_bands_for(self._max_distance)
        if self._lists:
            images = images | "OnePerImage" >> beam.FlatMap(lambda images: images)
        collapsed = images | "CollapseIdentical" >> CollapseIdentical(self._with_followers)
        found = (
            collapsed.compared
            | "KeyByBand" >> beam.FlatMap(_keyed_bands, num_bands)
            | "GroupByBand" >> beam.GroupByKey()
            | "PairsInBucket" >> beam.FlatMap(_bucket_pairs, self._max_distance).with_outputs(CAPPED, main="pairs")
        )
        pairs = found.pairs | "GroupSamePair" >> beam.GroupByKey() | "OnePerPair" >> beam.Map(_first)
        return NearPairs(pairs, found[CAPPED], collapsed.groups, collapsed.followers)


@dataclass
class NearDuplicateSummary:
    num_pairs: int = 0
    split_pairs: Counter = field(default_factory=Counter)  # "train-test" / "within train" -> pairs
    num_label_mismatches: int = 0
    num_low_detail: int = 0
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
            merged.closest = heapq.nsmallest(MAX_LISTED_PAIRS, merged.closest + s.closest, key=NearPair.sort_key)
        return merged

    def extract_output(self, summary: NearDuplicateSummary) -> NearDuplicateSummary:
        summary.closest = heapq.nsmallest(MAX_LISTED_PAIRS, summary.closest, key=NearPair.sort_key)
        return summary


def write_near_duplicates(summary: NearDuplicateSummary, capped: list[CappedBucket], files_dir: str, mode: str,
                          max_distance: int, num_dropped: int,
                          groups: GroupsSummary | None = None) -> NearDuplicatesEntry:
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
    )


class ReportNearDuplicates(beam.PTransform):
    """NearPairs -> a one-element PCollection: metadata.json's NearDuplicatesEntry, after
    near_duplicates.jsonl is written into the build's folder."""

    def __init__(self, files_dir: str, checks: CheckSettings, dropped=None):
        super().__init__()
        self._files_dir = files_dir
        self._mode = checks.near_duplicates
        self._max_distance = checks.near_duplicate_distance
        self._dropped = dropped  # ErrorRows of dropped copies, or None

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
        return summary | "WriteNearDuplicatesJsonl" >> beam.Map(
            write_near_duplicates, side(capped), self._files_dir, self._mode, self._max_distance, num_dropped,
            side(groups))


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
    copy = leaked_copy(pair)
    if copy is not None:
        yield copy.key, (pair.distance, pair.first.key, pair.first.uri)


def _keep_or_drop(keyed) -> Iterator:
    _, grouped = keyed
    decisions = sorted(grouped["decisions"])
    for row in grouped["rows"]:
        if not decisions:
            yield row
            continue
        distance, _, kept_uri = decisions[0]  # the closest training copy, then the first by key
        yield rejected(ErrorRow.for_row(row, STAGE, "near duplicate dropped (--near_duplicates drop)",
                                        drop_reason(kept_uri, distance)))


class NearDistinct(NamedTuple):
    rows: beam.PCollection  # RowBatches without the dropped copies
    errors: beam.PCollection  # ErrorRows of the dropped copies
    found: NearPairs


class DropNearDuplicates(beam.PTransform):
    """RowBatches -> RowBatches without the validation/test copies of training images (error rows instead),
    and the pairs found. Rows go through a GroupByKey one by one: this mode reads every image twice anyway."""

    def __init__(self, records: RecordSettings, checks: CheckSettings, manifest: ManifestFormat):
        super().__init__()
        self._max_image_bytes = records.max_image_bytes
        self._allowed_prefixes = manifest.allowed_prefixes  # checked again where each image is opened
        self._checks = checks
        self._max_pixels = records.max_pixels

    def expand(self, batches):
        hash_rows = PerceptualSignatureFn(self._max_image_bytes, self._max_pixels, self._allowed_prefixes)
        keyed = batches | "HashImages" >> beam.ParDo(hash_rows).with_outputs("hashes", main="rows")
        found = keyed.hashes | "FindNearPairs" >> FindNearPairs(self._checks, lists=False, with_followers=True)
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
