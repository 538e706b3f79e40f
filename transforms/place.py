"""Placement. Decides each row's split (when the manifest left it empty), shard and position in the
shard, from manifest rows alone, before any image is read.

Guarantees (per split, over the rows that reach this stage):
- shard sizes differ by at most 1, and each label's count in each shard is the floor or ceiling of its count
  divided by the number of shards (stratified);
- the order inside a shard is pseudo-random (sorted by a keyed hash), so no label runs longer than chance;
- everything depends only on the rows and `--seed`: a keyed BLAKE2b hash of the URI as written, with ties
  broken by (source index, line). Never Python's hash(), an unseeded RNG or arrival order.
Memory: rows are ranked in groups of (split, label, hash bucket), with as many buckets per label as keep a
group near MAX_ROWS_PER_RANK_GROUP rows; no worker holds more than one group's rows and one shard's rows, and
never image bytes. Rows travel in batches, so Beam's per-element cost is paid per (batch, group) and per
(group, shard), not per row.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from shardsmith.format.naming import SPLITS
from shardsmith.rows import ManifestRow, PlacedRow, RowBatch
from shardsmith.settings import PlacementSettings
from transforms.gather import Gather
from transforms.labels import CountLabels
from transforms.row_coder import of_grouped_batches, of_keyed_batches

# Bounds the rows one worker holds while ranking: a (split, label) with more rows is ranked in 2^k hash buckets.
MAX_ROWS_PER_RANK_GROUP = 1 << 16
MIB = 1 << 20
# Rows a placing worker holds before they leave in one piece per rank group (KeyByRankGroupFn) or per shard
# (DealRowsFn).
MAX_ROWS_HELD_FOR_RANKING = 1 << 14
# Without --num_shards, a shard holds at most this many records. A shard is one element of the write stage,
# written start to end by one thread; on a runner with many workers the last elements to finish set the job's
# end (docs/dataflow.md, Stragglers). Small images make 128 MB shards of tens of thousands of records.
MAX_RECORDS_PER_SHARD = 10_000


def keyed_hash(seed: int, purpose: bytes, *parts: str) -> int:
    """A 64-bit keyed BLAKE2b hash of `parts` (each followed by a NUL byte), keyed by the seed and separated by
    purpose."""
    digest = _keyed_blake2b(seed, purpose).copy()  # a copy of the keyed state: the key is not hashed again
    if parts:
        digest.update("\0".join(parts).encode("utf-8", "surrogatepass") + b"\0")
    return int.from_bytes(digest.digest(), "big")


@functools.lru_cache(maxsize=16)
def _keyed_blake2b(seed: int, purpose: bytes):
    return hashlib.blake2b(digest_size=8, key=str(seed).encode(), person=purpose)


def assign_splits(batch: RowBatch, placement: PlacementSettings) -> RowBatch:
    return RowBatch(assign_split(row, placement.split_ratios, placement.seed) for row in batch)


def assign_split(row: ManifestRow, ratios: tuple[float, float, float], seed: int) -> ManifestRow:
    """Rows with an empty split get one from a keyed hash of their URI, in proportion to `ratios`."""
    if row.split:
        return row
    point = keyed_hash(seed, b"split", row.uri) / 2.0**64
    total = sum(ratios)
    cumulative = 0.0
    chosen = SPLITS[-1]
    for split, ratio in zip(SPLITS, ratios, strict=True):
        cumulative += ratio / total
        if point < cumulative:
            chosen = split
            break
    return row.replaced(split=chosen)


def rank_key(row: ManifestRow, seed: int) -> tuple[int, int, int]:
    return (keyed_hash(seed, b"shard", row.split, row.uri), row.source_index, row.line)


def order_key(row: ManifestRow, seed: int) -> tuple[int, int, int]:
    return (keyed_hash(seed, b"order", row.split, row.uri), row.source_index, row.line)


def range_bits(count: int, max_per_range: int) -> int:
    """How many leading bits of a uniform hash split `count` items into 2^bits hash ranges that average at
    most `max_per_range` items each (0 bits: one range)."""
    return max(0, (count - 1) // max_per_range).bit_length()


def bucket_bits(num_rows: int) -> int:
    """Rank-hash bits that split a (split, label) of `num_rows` rows into rank groups."""
    return range_bits(num_rows, MAX_ROWS_PER_RANK_GROUP)


def group_key(row: ManifestRow, seed: int, bits: int = 0) -> tuple[str, int, int]:
    """(split, label id, bucket): buckets are ranges of the rank hash, in hash order, so ranking each bucket
    and concatenating them in bucket order ranks the whole label: placement does not depend on `bits`."""
    bucket = rank_key(row, seed)[0] >> (64 - bits) if bits else 0
    return (row.split, row.label_id, bucket)


@dataclass(frozen=True)
class ShardSpec:
    """How many shards a split gets: a fixed count per split, or enough to keep shards near a target size and
    under max_records_per_shard records."""

    fixed: tuple[tuple[str, int], ...] = ()  # (split, count); a "*" split applies to every split
    target_shard_bytes: int = 128 * MIB
    max_records_per_shard: int = MAX_RECORDS_PER_SHARD  # only when the count comes from the target size

    @classmethod
    def of(cls, placement: PlacementSettings) -> ShardSpec:
        return cls(placement.num_shards, int(placement.target_shard_mb * MIB))

    def num_shards(self, split: str, num_examples: int, num_bytes: int) -> int:
        counts = dict(self.fixed)
        wanted = counts.get(split, counts.get("*"))
        if wanted is None:
            wanted = max(math.ceil(num_bytes / self.target_shard_bytes),
                         math.ceil(num_examples / self.max_records_per_shard))
        return max(1, min(wanted, num_examples))


@dataclass(frozen=True)
class SplitPlan:
    num_examples: int
    num_bytes: int  # source image bytes, from the size lookup
    num_shards: int


@dataclass(frozen=True)
class ShardPlan:
    """Per split: counts and shard count; per (split, label id, bucket): the dealing index of its first row."""

    splits: dict[str, SplitPlan]
    offsets: dict[tuple[str, int, int], int]


def make_plan(group_stats: Iterable[tuple[tuple[str, int, int], tuple[int, int]]], spec: ShardSpec) -> ShardPlan:
    """Builds the plan from (group key, (rows, bytes)) pairs. Groups of a split are laid out in (label id,
    bucket) order, so each label occupies one contiguous run of dealing indices."""
    offsets: dict[tuple[str, int, int], int] = {}
    totals: dict[str, list[int]] = {}
    for key, (count, size) in sorted(group_stats):
        split = key[0]
        total = totals.setdefault(split, [0, 0])
        offsets[key] = total[0]
        total[0] += count
        total[1] += size
    splits = {
        split: SplitPlan(count, size, spec.num_shards(split, count, size))
        for split, (count, size) in sorted(totals.items(), key=lambda kv: SPLITS.index(kv[0]))
    }
    return ShardPlan(splits, offsets)


class PiecesFn(beam.DoFn):
    """A DoFn whose outputs are (key, RowBatch) pieces, held per key within a bundle until
    MAX_ROWS_HELD_FOR_RANKING rows, then released as one piece per key, in key order (the rest in finish_bundle):
    a shuffled input (a compaction's source shards, where a batch spreads over hundreds of rank groups) would
    otherwise make pieces of one or two rows, each costing the GroupByKey more than its rows. Placement does not
    depend on the pieces."""

    def start_bundle(self):
        self._held: defaultdict[tuple, RowBatch] = defaultdict(RowBatch)
        self._num_held = 0

    def _hold(self, key: tuple, row) -> None:
        self._held[key].append(row)
        self._num_held += 1

    def _release_when_full(self) -> Iterator[tuple[tuple, RowBatch]]:
        if self._num_held >= MAX_ROWS_HELD_FOR_RANKING:
            yield from self._release()

    def finish_bundle(self):
        for piece in self._release():
            yield WindowedValue(piece, MIN_TIMESTAMP, [GlobalWindow()])

    def _release(self) -> Iterator[tuple[tuple, RowBatch]]:
        held, self._held, self._num_held = self._held, defaultdict(RowBatch), 0
        yield from sorted(held.items())


class DealRowsFn(PiecesFn):
    """Ranks one (split, label, bucket) group by keyed hash and deals it round-robin over the split's shards.

    Dealing index g = offset(group) + rank; shard = g mod num_shards. A contiguous run of indices dealt
    round-robin gives every shard the floor or ceiling of the run's length over the shard count.
    Emits ((split, shard), [PlacedRow, ...]) pieces (PiecesFn); a shard's writer orders its rows by their order
    key, so the pieces do not change a shard's bytes."""

    def __init__(self, seed: int):
        self._seed = seed

    def process(self, keyed_batches, plan: ShardPlan) -> Iterator:
        key, batches = keyed_batches
        split = key[0]
        num_shards = plan.splits[split].num_shards
        first = plan.offsets[key]
        ranked = sorted((row for batch in batches for row in batch), key=lambda r: rank_key(r, self._seed))
        for rank, row in enumerate(ranked):
            shard = (first + rank) % num_shards
            self._hold((split, shard), PlacedRow(row, shard, num_shards, order_key(row, self._seed)))
        yield from self._release_when_full()


class KeyByRankGroupFn(PiecesFn):
    """RowBatches -> ((split, label id, bucket), [rows in that group]) pieces (PiecesFn)."""

    def __init__(self, seed: int):
        self._seed = seed

    def process(self, batch: RowBatch, label_bits: dict[tuple[str, str], int]) -> Iterator:
        for row in batch:
            bits = label_bits.get((row.split, row.label), 0)
            self._hold(group_key(row, self._seed, bits), row)
        yield from self._release_when_full()


def label_bucket_bits(label_counts: Iterable[tuple[tuple[str, str], int]]) -> dict[tuple[str, str], int]:
    """(split, label) -> rank-hash bits, from the rows of the split that carry the label: a bound on the rows
    the label places (a row with several labels is placed by one of them). Placement does not depend on the
    bits (`group_key`); they only bound the rows one worker ranks at a time."""
    return {key: bucket_bits(count) for key, count in label_counts}


class PlaceRows(beam.PTransform):
    """Labelled, sized RowBatches -> ((split, shard), iterable of SealedBatch) groups (each iterates as
    PlacedRows, unpickled only then: transforms/row_coder.py), and the one-element plan. `label_counts`:
    ((split, label), rows) of the rows before their labels were attached (transforms/labels.py, CountLabels),
    which size the rank groups; counted from `batches` when not given.
    Taking them from before, and not from the labelled rows, lets the label ids be attached and the rows keyed
    in one stage on the local runner, where a side input computed from a stage's own rows would cut it in two
    (each cut pickles every row twice).

    Only manifest rows go through the GroupByKeys here; image bytes do not exist yet."""

    def __init__(self, placement: PlacementSettings, label_counts: beam.PCollection | None = None):
        super().__init__()
        self._seed = placement.seed
        self._spec = ShardSpec.of(placement)
        self._label_counts = label_counts

    def expand(self, batches):
        seed, spec = self._seed, self._spec
        label_counts = self._label_counts
        if label_counts is None:
            label_counts = batches | "CountLabels" >> CountLabels()
        label_bits = label_counts | "BucketBitsPerLabel" >> Gather(label_bucket_bits)
        keyed = of_keyed_batches(
            batches | "KeyByRankGroup" >> beam.ParDo(KeyByRankGroupFn(seed), beam.pvalue.AsSingleton(label_bits)),
            sealed=True)
        plan = (
            keyed
            | "CountAndSize" >> beam.Map(lambda kv: (kv[0], (len(kv[1]), sum(max(r.size, 0) for r in kv[1]))))
            | "SumPerGroup" >> beam.CombinePerKey(_sum_pairs)
            | "MakePlan" >> Gather(make_plan, spec)
        )
        ranking_groups = of_grouped_batches(keyed | "GroupForRanking" >> beam.GroupByKey(), sealed=True)
        dealt = of_keyed_batches(
            ranking_groups | "DealToShards" >> beam.ParDo(DealRowsFn(seed), beam.pvalue.AsSingleton(plan)),
            sealed=True)
        return of_grouped_batches(dealt | "GroupByShard" >> beam.GroupByKey(), sealed=True), plan


def _sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    count = size = 0
    for c, s in pairs:
        count += c
        size += s
    return count, size
