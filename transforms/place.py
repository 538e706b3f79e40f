"""Placement. Decides each row's split (when the manifest left it empty), shard and position in the
shard, from manifest rows alone, before any image is read.

Guarantees (per split, over the rows that reach this stage):
- shard sizes differ by at most 1, and each label's count in each shard is the floor or ceiling of its count
  divided by the number of shards (stratified);
- the order inside a shard is pseudo-random (sorted by a keyed hash), so no label runs longer than chance;
- everything depends only on the rows and `--seed`: a keyed BLAKE2b hash of the URI as written, with ties
  broken by (source index, line). Never Python's hash(), an unseeded RNG or arrival order.
The arithmetic (keyed hashes, rank groups, dealing) is shardsmith/placement.py's, without Beam.
Memory: rows are ranked in groups of (split, label, hash bucket), with as many buckets per label as keep a
group near MAX_ROWS_PER_RANK_GROUP rows; no worker holds more than one group's rows and one shard's rows, and
never image bytes. Rows travel in batches, so Beam's per-element cost is paid per (batch, group) and per
(group, shard), not per row.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import apache_beam as beam

from shardsmith.format.naming import SPLITS
from shardsmith.placement import RankGroup, deal, deal_groups, group_key, keyed_hash, label_bucket_bits
from shardsmith.rows import ManifestRow, RowBatch
from shardsmith.settings import PlacementSettings
from shardsmith.shard_writer.jobs_in_hand import JobsInHand
from shardsmith.shard_writer.parallel_parse import RowHelpers
from transforms.gather import Gather, in_global_window
from transforms.labels import CountLabels
from transforms.row_coder import of_grouped_batches, of_keyed_batches

MIB = 1 << 20
# Rows a placing worker holds before they leave in one piece per rank group (KeyByRankGroupFn) or per shard
# (DealRowsFn).
MAX_ROWS_HELD_FOR_RANKING = 1 << 14
# Rows to place below which a local run deals them in the launcher (DealRowsFn): a job of fewer would hold them
# all, and a small build's writer processes may not have started.
DEAL_IN_PROCESS_ROWS = MAX_ROWS_HELD_FOR_RANKING
# Dealing jobs sent ahead per writer process.
JOBS_IN_FLIGHT_PER_PROCESS = 2
# Without --num_shards, a shard holds at most this many records. A shard is one element of the write stage,
# written start to end by one thread; on a runner with many workers the last elements to finish set the job's
# end (docs/dataflow.md, Stragglers). Small images make 128 MB shards of tens of thousands of records.
MAX_RECORDS_PER_SHARD = 10_000


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
            yield in_global_window(piece)

    def _release(self) -> Iterator[tuple[tuple, RowBatch]]:
        held, self._held, self._num_held = self._held, defaultdict(RowBatch), 0
        yield from sorted(held.items())


class DealRowsFn(PiecesFn):
    """Ranks each (split, label, bucket) group by keyed hash and deals it round-robin over the split's shards
    (shardsmith/placement.py, `deal`). Emits ((split, shard), [PlacedRow, ...]) pieces (PiecesFn); a shard's
    writer orders its rows by their order key, so the pieces do not change a shard's bytes.

    With `helpers` (a local run in one process, with writer processes) and at least DEAL_IN_PROCESS_ROWS rows
    to place, the groups go to the writer processes instead, about MAX_ROWS_HELD_FOR_RANKING rows a job, at most
    JOBS_IN_FLIGHT_PER_PROCESS per process in hand: each unpickles, ranks and deals its groups and hands back one
    SealedBatch per shard, so the launcher never unpickles a row here, and the placing uses every core while no
    shard can start yet. The same rows are dealt to the same shards either way."""

    def __init__(self, seed: int, helpers: RowHelpers | None = None):
        self._seed = seed
        self._helpers = helpers
        self._pool = None  # the build's writer pool, once this run's rows are known to be enough to deal there

    def start_bundle(self):
        super().start_bundle()
        self._waiting: list[RankGroup] = []
        self._num_waiting = 0
        self._jobs = JobsInHand(self._pool, JOBS_IN_FLIGHT_PER_PROCESS) if self._pool is not None else None

    def process(self, keyed_batches, plan: ShardPlan) -> Iterator:
        key, batches = keyed_batches
        num_shards = plan.splits[key[0]].num_shards
        if self._jobs is None and self._deals_in_helpers(plan):
            self._jobs = JobsInHand(self._pool, JOBS_IN_FLIGHT_PER_PROCESS)
        if self._jobs is not None:
            group = RankGroup(key, plan.offsets[key], num_shards, list(batches))
            self._waiting.append(group)
            self._num_waiting += group.num_rows
            if self._num_waiting >= MAX_ROWS_HELD_FOR_RANKING:
                yield from self._send_waiting()
            return
        rows = (row for batch in batches for row in batch)
        for placed in deal(rows, plan.offsets[key], num_shards, self._seed):
            self._hold((key[0], placed.shard), placed)
        yield from self._release_when_full()

    def _deals_in_helpers(self, plan: ShardPlan) -> bool:
        """Whether the writer processes deal (starting the pool if they do): with helpers, and enough rows."""
        if self._helpers is None or self._helpers.processes <= 0:
            return False
        if sum(split.num_examples for split in plan.splits.values()) < DEAL_IN_PROCESS_ROWS:
            return False
        from shardsmith.shard_writer.shard_worker import build_pool

        # no more processes than shards: the writing would leave the others idle (transforms/write_shards.py)
        shards = sum(split.num_shards for split in plan.splits.values())
        self._pool = build_pool(self._helpers.build_folder, min(self._helpers.processes, shards))
        return True

    def _send_waiting(self) -> Iterator:
        waiting, self._waiting, self._num_waiting = self._waiting, [], 0
        for _, pieces in self._jobs.send(None, deal_groups, self._seed, waiting):
            yield from pieces

    def finish_bundle(self):
        if self._jobs is not None:
            answers = [*(self._send_waiting() if self._waiting else ()),
                       *(piece for _, pieces in self._jobs.all() for piece in pieces)]
            yield from map(in_global_window, answers)
        yield from super().finish_bundle()

    def __getstate__(self):
        # the build's pool and the jobs in hand belong to this instance, never to a copy
        return {**self.__dict__, "_pool": None, "_jobs": None}


class KeyByRankGroupFn(PiecesFn):
    """RowBatches -> ((split, label id, bucket), [rows in that group]) pieces (PiecesFn)."""

    def __init__(self, seed: int):
        self._seed = seed

    def process(self, batch: RowBatch, label_bits: dict[tuple[str, str], int]) -> Iterator:
        for row in batch:
            bits = label_bits.get((row.split, row.label), 0)
            self._hold(group_key(row, self._seed, bits), row)
        yield from self._release_when_full()


class PlaceRows(beam.PTransform):
    """Labelled, sized RowBatches -> ((split, shard), iterable of SealedBatch) groups (each iterates as
    PlacedRows, unpickled only then: transforms/row_coder.py), and the one-element plan. `label_counts`:
    ((split, label), rows) of the rows before their labels were attached (transforms/labels.py, CountLabels),
    which size the rank groups; counted from `batches` when not given.
    Taking them from before, and not from the labelled rows, lets the label ids be attached and the rows keyed
    in one stage on the local runner, where a side input computed from a stage's own rows would cut it in two
    (each cut pickles every row twice). `helpers`: the writer processes that deal the rank groups (DealRowsFn).

    Only manifest rows go through the GroupByKeys here; image bytes do not exist yet."""

    def __init__(self, placement: PlacementSettings, label_counts: beam.PCollection | None = None,
                 helpers: RowHelpers | None = None):
        super().__init__()
        self._placement = placement
        self._label_counts = label_counts
        self._helpers = helpers

    def expand(self, batches):
        seed = self._placement.seed
        label_counts = self._label_counts
        if label_counts is None:
            label_counts = batches | "CountLabels" >> CountLabels()
        label_bits = label_counts | "BucketBitsPerLabel" >> Gather(label_bucket_bits)
        keyed = of_keyed_batches(
            batches | "KeyByRankGroup" >> beam.ParDo(KeyByRankGroupFn(seed), beam.pvalue.AsSingleton(label_bits)),
            sealed=True)
        return keyed | PlaceKeyedRows(self._placement, self._helpers)


class PlaceKeyedRows(beam.PTransform):
    """((split, label id, bucket), RowBatch or SealedBatch) pieces of rank groups (`group_key`) -> what PlaceRows
    returns. `group_stats`: each piece's (key, (rows, source bytes)), where the pieces' maker counted them
    (a compaction's writer processes, which key the rows they read); counted from the pieces when not given."""

    def __init__(self, placement: PlacementSettings, helpers: RowHelpers | None = None,
                 group_stats: beam.PCollection | None = None):
        super().__init__()
        self._seed = placement.seed
        self._spec = ShardSpec.of(placement)
        self._helpers = helpers
        self._group_stats = group_stats

    def expand(self, keyed):
        stats = self._group_stats
        if stats is None:
            stats = keyed | "CountAndSize" >> beam.Map(lambda kv: (kv[0], (len(kv[1]),
                                                                           sum(max(r.size, 0) for r in kv[1]))))
        plan = (
            stats
            | "SumPerGroup" >> beam.CombinePerKey(_sum_pairs)
            | "MakePlan" >> Gather(make_plan, self._spec)
        )
        ranking_groups = of_grouped_batches(keyed | "GroupForRanking" >> beam.GroupByKey(), sealed=True)
        dealt = of_keyed_batches(
            ranking_groups | "DealToShards" >> beam.ParDo(DealRowsFn(self._seed, self._helpers),
                                                          beam.pvalue.AsSingleton(plan)),
            sealed=True)
        return of_grouped_batches(dealt | "GroupByShard" >> beam.GroupByKey(), sealed=True), plan


def _sum_pairs(pairs: Iterable[tuple[int, int]]) -> tuple[int, int]:
    count = size = 0
    for c, s in pairs:
        count += c
        size += s
    return count, size
