"""Placement's arithmetic, without Beam: the keyed hashes that rank and order rows, the rank groups rows are
ranked in, and the dealing of a ranked group over its split's shards. transforms/place.py's PlaceRows runs it as
stages; a local run hands whole rank groups to its writer processes (`deal_groups`, a writer process's job), which
import no Beam.

Guarantees: everything depends only on the rows and the seed (a keyed BLAKE2b hash of the split and URI as
written, ties broken by (source index, line)): never Python's hash(), an unseeded RNG or arrival order. A rank
group's rows are dealt the same wherever they are dealt, in whatever pieces they arrive.
"""

from __future__ import annotations

import functools
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from shardsmith.rows import ManifestRow, PlacedRow, RowBatch, SealedBatch

# Bounds the rows one worker holds while ranking: a (split, label) with more rows is ranked in 2^k hash buckets.
MAX_ROWS_PER_RANK_GROUP = 1 << 16
# The keyed hash's width: no more bucket bits than it has (a count read back from a dataset's metadata.json is
# input, and may claim more rows than any bits could split).
HASH_BITS = 64


def keyed_hash(seed: int, purpose: bytes, *parts: str) -> int:
    """A HASH_BITS-bit keyed BLAKE2b hash of `parts` (each followed by a NUL byte), keyed by the seed and separated by
    purpose."""
    digest = _keyed_blake2b(seed, purpose).copy()  # a copy of the keyed state: the key is not hashed again
    if parts:
        digest.update("\0".join(parts).encode("utf-8", "surrogatepass") + b"\0")
    return int.from_bytes(digest.digest(), "big")


@functools.lru_cache(maxsize=16)
def _keyed_blake2b(seed: int, purpose: bytes):
    return hashlib.blake2b(digest_size=HASH_BITS // 8, key=str(seed).encode(), person=purpose)


def rank_key(row: ManifestRow, seed: int) -> tuple[int, int, int]:
    return (keyed_hash(seed, b"shard", row.split, row.uri), row.source_index, row.line)


def order_key(row: ManifestRow, seed: int) -> tuple[int, int, int]:
    return (keyed_hash(seed, b"order", row.split, row.uri), row.source_index, row.line)


def range_bits(count: int, max_per_range: int) -> int:
    """How many leading bits of a uniform hash split `count` items into 2^bits hash ranges that average at
    most `max_per_range` items each (0 bits: one range)."""
    return max(0, (count - 1) // max_per_range).bit_length()


def bucket_bits(num_rows: int) -> int:
    """Rank-hash bits that split a (split, label) of `num_rows` rows into rank groups (at most HASH_BITS)."""
    return min(range_bits(num_rows, MAX_ROWS_PER_RANK_GROUP), HASH_BITS)


def group_key(row: ManifestRow, seed: int, bits: int = 0) -> tuple[str, int, int]:
    """(split, label id, bucket): buckets are ranges of the rank hash, in hash order, so ranking each bucket
    and concatenating them in bucket order ranks the whole label: placement does not depend on `bits`."""
    bucket = rank_key(row, seed)[0] >> (HASH_BITS - bits) if bits else 0
    return (row.split, row.label_id, bucket)


def label_bucket_bits(label_counts: Iterable[tuple[tuple[str, str], int]]) -> dict[tuple[str, str], int]:
    """(split, label) -> rank-hash bits, from the rows of the split that carry the label: a bound on the rows
    the label places (a row with several labels is placed by one of them). Placement does not depend on the
    bits (`group_key`); they only bound the rows one worker ranks at a time."""
    return {key: bucket_bits(count) for key, count in label_counts}


def rank_groups(rows: Iterable[ManifestRow], seed: int, label_bits: dict[tuple[str, str], int]
                ) -> list[tuple[tuple[str, int, int], RowBatch]]:
    """`rows` by rank group (`group_key`, with each (split, label)'s bits from `label_bits`, else 0), in key
    order: a compaction's writer process keys the rows it reads, so that the launcher passes them on sealed."""
    groups: defaultdict[tuple[str, int, int], RowBatch] = defaultdict(RowBatch)
    for row in rows:
        groups[group_key(row, seed, label_bits.get((row.split, row.label), 0))].append(row)
    return sorted(groups.items())


def deal(rows: Iterable[ManifestRow], first: int, num_shards: int, seed: int) -> Iterator[PlacedRow]:
    """One rank group's rows ranked by keyed hash and dealt round-robin over its split's shards: dealing index
    g = first + rank (`first`: the group's offset in ShardPlan), shard g mod num_shards. A contiguous run of
    indices dealt round-robin gives every shard the floor or ceiling of the run's length over the shard count."""
    ranked = sorted(rows, key=lambda r: rank_key(r, seed))
    for rank, row in enumerate(ranked):
        yield PlacedRow(row, (first + rank) % num_shards, num_shards, order_key(row, seed))


@dataclass(frozen=True)
class RankGroup:
    """One rank group's rows, as the local runner's GroupByKey holds them, and where its split's dealing puts
    it: its first dealing index and the split's shard count."""

    key: tuple[str, int, int]
    first: int
    num_shards: int
    batches: list[SealedBatch]

    @property
    def num_rows(self) -> int:
        return sum(len(batch) for batch in self.batches)


def deal_groups(seed: int, groups: list[RankGroup]) -> list[tuple[tuple[str, int], SealedBatch]]:
    """A writer process's job: `groups` dealt (`deal`), as one SealedBatch of PlacedRows per (split, shard), in
    key order. Memory: the groups' rows, twice (unsealed and placed)."""
    pieces: defaultdict[tuple[str, int], RowBatch] = defaultdict(RowBatch)
    for group in groups:
        split = group.key[0]
        rows = (row for batch in group.batches for row in batch)
        for placed in deal(rows, group.first, group.num_shards, seed):
            pieces[(split, placed.shard)].append(placed)
    return [(key, SealedBatch.of(batch)) for key, batch in sorted(pieces.items())]


def _describe_deal(seed: int, groups: list[RankGroup]) -> str:
    rows = sum(group.num_rows for group in groups)
    return f"the placement of {rows} rows in {len(groups)} rank groups (first {groups[0].key if groups else None})"


deal_groups.describe_job = _describe_deal  # for the pool's messages (shard_worker._Described)
