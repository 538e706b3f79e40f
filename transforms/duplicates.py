"""Identical images: found by SHA-256 of the bytes, inside a split and across splits (train/test leakage
silently inflates evaluation scores).

`--on_duplicate keep` (default) writes every row and reports the copies: the hashes come from the shard
writer, which has the bytes anyway, so finding them costs no extra read. `error` does the same and then fails
the job. `drop` hashes every image before placement (a second read of each file) and keeps one copy per
hash: the one in the earliest split (train, validation, test), then the first in the inputs; the others
become error rows that name the kept copy.

Memory: only hashes and row identities go through the GroupByKey, in groups of hash ranges sized to hold
about MAX_DIGESTS_PER_GROUP each; the summary keeps counts and at most MAX_REPORTED_GROUPS groups (those with
the smallest hashes, so the report is deterministic).
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

import apache_beam as beam

from shardsmith.format.metadata_schema import DuplicateCopy, DuplicateGroup, DuplicatesEntry
from shardsmith.format.naming import SPLITS
from shardsmith.images.load_images import read_input_file
from shardsmith.manifest import ManifestFormat
from shardsmith.placement import range_bits
from shardsmith.rows import ROWS_PER_BATCH, ErrorRow, ImageDigest, ImageDigests, ManifestRow, RowBatch
from shardsmith.settings import RecordSettings
from transforms import ERRORS
from transforms.gather import Gather, PerBundleFn, combine_all
from transforms.metrics import rejected
from transforms.row_coder import of_batches, of_grouped_batches, of_keyed_batches
from transforms.thread_pool import ThreadPoolDoFn

MAX_REPORTED_GROUPS = 20
MAX_DIGESTS_PER_GROUP = 1 << 18
MAX_HASHES_IN_FLIGHT = 16

STAGE = "duplicate"


@dataclass
class DuplicateSummary:
    num_groups: int = 0  # distinct images that occur more than once
    num_extra_copies: int = 0  # rows beyond the first of each group
    num_groups_across_splits: int = 0
    split_pairs: dict[str, int] = field(default_factory=dict)  # "train+test" -> groups spanning both
    groups: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)  # (sha256, [(split, uri)])

    def to_entry(self) -> DuplicatesEntry:
        """metadata.json's `duplicates` entry."""
        return DuplicatesEntry(
            num_groups=self.num_groups,
            num_extra_copies=self.num_extra_copies,
            num_groups_across_splits=self.num_groups_across_splits,
            split_pairs=dict(sorted(self.split_pairs.items())),
            examples=[DuplicateGroup(sha256=sha, copies=[DuplicateCopy(split=s, uri=u) for s, u in copies])
                      for sha, copies in self.groups],
        )


class SummarizeFn(beam.CombineFn):
    def create_accumulator(self) -> DuplicateSummary:
        return DuplicateSummary()

    def add_input(self, summary: DuplicateSummary, group: list[ImageDigest]) -> DuplicateSummary:
        splits = sorted({d.split for d in group})
        summary.num_groups += 1
        summary.num_extra_copies += len(group) - 1
        if len(splits) > 1:
            summary.num_groups_across_splits += 1
            key = "+".join(splits)
            summary.split_pairs[key] = summary.split_pairs.get(key, 0) + 1
        summary.groups.append((group[0].sha256, [(d.split, d.uri) for d in group]))
        summary.groups = sorted(summary.groups)[:MAX_REPORTED_GROUPS]
        return summary

    def merge_accumulators(self, summaries: Iterable[DuplicateSummary]) -> DuplicateSummary:
        merged = DuplicateSummary()
        pairs: Counter[str] = Counter()
        for s in summaries:
            merged.num_groups += s.num_groups
            merged.num_extra_copies += s.num_extra_copies
            merged.num_groups_across_splits += s.num_groups_across_splits
            pairs.update(s.split_pairs)
            merged.groups.extend(s.groups)
        merged.split_pairs = dict(pairs)
        merged.groups = sorted(merged.groups)[:MAX_REPORTED_GROUPS]
        return merged

    def extract_output(self, summary: DuplicateSummary) -> DuplicateSummary:
        return summary


def hash_range_bits(num_digests: int) -> int:
    """Leading SHA-256 bits that split `num_digests` hashes into groups of about MAX_DIGESTS_PER_GROUP."""
    return range_bits(num_digests, MAX_DIGESTS_PER_GROUP)


def key_by_hash_range(digests: list[ImageDigest], total: int) -> Iterator[tuple[int, ImageDigests]]:
    """A list of digests -> (hash range, [digests in it]) for each range present. Identical images share a
    hash, hence a range, whichever shard wrote them."""
    bits = hash_range_bits(total)
    ranges: dict[int, list[ImageDigest]] = {}
    for digest in digests:
        key = int(digest.sha256[:16], 16) >> (64 - bits) if bits else 0
        ranges.setdefault(key, ImageDigests()).append(digest)
    yield from ranges.items()


def _copies(keyed: tuple[int, Iterable[list[ImageDigest]]]) -> Iterator[list[ImageDigest]]:
    """A hash range's digests -> each group of identical images (their digests, in listed order).
    Memory: two passes over the range's batches, unpickled one at a time; the first keeps each digest's first 64
    bits (about 40 bytes a digest, where its objects take about 450), the second only the digests whose first
    64 bits occur more than once: most images have no copy."""
    _, lists = keyed
    prefixes = sorted(_prefix(digest) for digests in lists for digest in digests)
    shared = {a for a, b in itertools.pairwise(prefixes) if a == b}
    del prefixes
    by_hash: dict[str, list[ImageDigest]] = {}
    for digests in lists:
        for digest in digests:
            if _prefix(digest) in shared:
                by_hash.setdefault(digest.sha256, []).append(digest)
    for copies in by_hash.values():
        if len(copies) > 1:
            yield sorted(copies, key=_listed_order)


def _prefix(digest: ImageDigest) -> int:
    return int(digest.sha256[:16], 16)


def _listed_order(digest: ImageDigest) -> tuple[int, str]:
    """The order of a group's copies in the summary: by split (train, validation, test), then URI. Never by
    manifest line: a night that reads only appended rows knows the published copies' URIs, not their lines."""
    return SPLITS.index(digest.split), digest.uri


def with_published(night: DuplicateSummary, appended: bool, touched: list[list[ImageDigest]],
                   published: DuplicatesEntry | None) -> DuplicateSummary:
    """The version's summary, for a night that read only appended rows (`appended`): `night` summarizes the new
    images and `touched`, the published records identical to one of them (transforms/versions/carried_rows.py
    PublishedCopies). The version's is the published summary, less what `touched` made on its own, plus `night`:
    groups only grow, so the smallest hashes of the result are among the published examples and `night`'s.
    `night` unchanged for a night that paired every row (its summary covers the version)."""
    if not appended or published is None:
        return night
    copies = [digest for digests in touched for digest in digests]
    alone = DuplicateSummary()
    for group in _copies((0, [copies])):
        alone = SummarizeFn().add_input(alone, group)
    touched_hashes = {digest.sha256 for digest in copies}
    pairs = Counter(published.split_pairs)
    pairs.subtract(alone.split_pairs)
    pairs.update(night.split_pairs)
    kept = [(group.sha256, [(copy.split, copy.uri) for copy in group.copies]) for group in published.examples
            if group.sha256 not in touched_hashes]
    return DuplicateSummary(
        num_groups=published.num_groups - alone.num_groups + night.num_groups,
        num_extra_copies=published.num_extra_copies - alone.num_extra_copies + night.num_extra_copies,
        num_groups_across_splits=(published.num_groups_across_splits - alone.num_groups_across_splits
                                  + night.num_groups_across_splits),
        split_pairs={key: n for key, n in pairs.items() if n > 0},
        groups=sorted(kept + night.groups)[:MAX_REPORTED_GROUPS],
    )


class SummarizeDuplicates(beam.PTransform):
    """Lists of ImageDigests (one per shard) -> a one-element PCollection holding the DuplicateSummary.
    `num_digests` is a one-element PCollection with (an upper bound of) the number of digests."""

    def __init__(self, num_digests):
        super().__init__()
        self._num_digests = num_digests

    def expand(self, digest_lists):
        keyed = of_keyed_batches(digest_lists | "KeyByHashRange" >> beam.FlatMap(
            key_by_hash_range, beam.pvalue.AsSingleton(self._num_digests)), sealed=True)
        return (
            of_grouped_batches(keyed | "GroupHashRanges" >> beam.GroupByKey(), sealed=True)
            | "OnlyDuplicated" >> beam.FlatMap(_copies)
            | "SummarizePerBundle" >> beam.ParDo(PerBundleFn(SummarizeFn()))
            | "Summarize" >> Gather(combine_all, SummarizeFn())
        )


class ContentDigestFn(ThreadPoolDoFn):
    """RowBatch -> (sha256, row) per row. A file that cannot be read passes with an empty hash: the shard
    writer reads it again and reports why it failed."""

    pool_size = MAX_HASHES_IN_FLIGHT

    def __init__(self, max_image_bytes: int, allowed_prefixes: tuple[str, ...] = ()):
        super().__init__()
        self._max_image_bytes = max_image_bytes
        self._allowed_prefixes = allowed_prefixes

    def _hash(self, row: ManifestRow) -> str:
        try:
            data = read_input_file(row.resolved_uri, self._max_image_bytes, row.size, self._allowed_prefixes)
            return hashlib.sha256(data).hexdigest()
        except Exception:
            return ""

    def process(self, batch: RowBatch) -> Iterator:
        yield from zip(self._pool.map(self._hash, batch), batch, strict=True)


def _keep_first(keyed: tuple[str, Iterable[ManifestRow]]) -> Iterator:
    sha, rows = keyed
    rows = list(rows)
    if not sha:
        yield from rows
        return

    def order(row: ManifestRow) -> tuple:
        return ImageDigest(sha, row.split, row.uri, row.source_index, row.line).keep_order()

    kept, *dropped = sorted(rows, key=order)
    yield kept
    for row in dropped:
        yield rejected(
            ErrorRow.for_row(row, STAGE, "duplicate image dropped (--on_duplicate drop)",
                             f"identical bytes to {kept.uri} ({kept.split}, line {kept.line})"),
        )


class DropDuplicates(beam.PTransform):
    """RowBatches -> RowBatches with one copy per distinct image, and error rows for the others (tagged
    `errors`). Rows go through the GroupByKey one by one here: this mode reads every image twice anyway."""

    def __init__(self, records: RecordSettings, manifest: ManifestFormat):
        super().__init__()
        self._max_image_bytes = records.max_image_bytes
        self._allowed_prefixes = manifest.allowed_prefixes  # checked again where each image is opened

    def expand(self, batches):
        kept = (
            batches
            | "HashImages" >> beam.ParDo(ContentDigestFn(self._max_image_bytes, self._allowed_prefixes))
            | "GroupBySha256" >> beam.GroupByKey()
            | "KeepFirstCopy" >> beam.FlatMap(_keep_first).with_outputs(ERRORS, main="rows")
        )
        rows = (kept.rows
                | "Rebatch" >> beam.BatchElements(min_batch_size=ROWS_PER_BATCH, max_batch_size=ROWS_PER_BATCH)
                | "AsRowBatches" >> beam.Map(RowBatch))
        of_batches(rows)
        return DistinctRows(rows, kept[ERRORS])


class DistinctRows(NamedTuple):
    """DropDuplicates' outputs: RowBatches, and ErrorRows for the dropped copies."""

    rows: beam.PCollection
    errors: beam.PCollection
