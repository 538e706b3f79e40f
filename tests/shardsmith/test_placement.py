"""shardsmith/placement.py: the keyed hash (pinned), and rank groups dealt as one job or in pieces, with the
same result."""

from __future__ import annotations

from shardsmith.placement import (
    HASH_BITS,
    RankGroup,
    deal,
    deal_groups,
    group_key,
    keyed_hash,
    label_bucket_bits,
    order_key,
    rank_groups,
)
from shardsmith.rows import ManifestRow, SealedBatch

# keyed_hash -----------------------------------------------------------------------------------------------


def test_keyed_hash_is_pinned_and_deterministic():
    # Pinned: a different value here would silently re-split and re-shuffle every dataset built before.
    assert keyed_hash(42, b"split", "img/cat/001.jpg") == 3062746643761067941
    assert keyed_hash(0, b"order", "train", "a.jpg") == 15253186087349703093
    assert keyed_hash(42, b"split", "img/cat/001.jpg") == keyed_hash(42, b"split", "img/cat/001.jpg")


def test_keyed_hash_depends_on_seed_purpose_and_part_boundaries():
    base = keyed_hash(1, b"split", "a", "bc")
    assert keyed_hash(2, b"split", "a", "bc") != base
    assert keyed_hash(1, b"shard", "a", "bc") != base
    assert keyed_hash(1, b"split", "ab", "c") != base
    assert keyed_hash(1, b"split", "abc") != base
    values = [keyed_hash(7, b"split", f"img/{i}.jpg") for i in range(4000)]
    assert all(0 <= v < 2**64 for v in values)
    assert len(set(values)) == len(values)
    top_bits = sum(v >> 63 for v in values) / len(values)
    assert 0.45 < top_bits < 0.55  # roughly uniform


def test_keyed_hash_accepts_any_text():
    assert keyed_hash(1, b"split", "\udcff lone surrogate") != keyed_hash(1, b"split", "é")


# rank groups ----------------------------------------------------------------------------------------------


def _rows(count: int, labels: int = 3) -> list[ManifestRow]:
    return [ManifestRow("m.csv", 0, line, f"img/{line % labels}/{line:05d}.jpg", "", "train", f"l{line % labels}",
                        100 + line, line % labels) for line in range(2, count + 2)]


def test_rank_groups_are_in_key_order():
    rows = _rows(300)
    pieces = rank_groups(rows, seed=5, label_bits={("train", "l1"): 2})
    keys = [key for key, _ in pieces]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert {key for key in keys if key[1] != 1} == {("train", 0, 0), ("train", 2, 0)}
    assert len([key for key in keys if key[1] == 1]) == 4  # l1 in 2^2 hash buckets
    for key, piece in pieces:
        assert all(group_key(row, 5, 2 if key[1] == 1 else 0) == key for row in piece)
    assert sorted((row for _, piece in pieces for row in piece), key=lambda r: r.line) == rows


def test_deal_groups_deals_each_group_as_deal_does_whatever_its_pieces():
    rows = _rows(200)
    groups, first = [], 0
    for key, members in rank_groups(rows, seed=9, label_bits={}):
        halves = [SealedBatch.of(members[: len(members) // 2]), SealedBatch.of(members[len(members) // 2:])]
        groups.append((RankGroup(key, first, 7, halves), members))
        first += len(members)
    dealt = deal_groups(9, [group for group, _ in groups])
    assert [key for key, _ in dealt] == sorted(key for key, _ in dealt)
    got = {placed.row.line: (key, placed.shard, placed.order_key) for key, piece in dealt for placed in piece}
    expected = {placed.row.line: (("train", placed.shard), placed.shard, placed.order_key)
                for group, members in groups for placed in deal(reversed(members), group.first, 7, 9)}
    assert got == expected
    assert all(got[row.line][2] == order_key(row, 9) for row in rows)
    sizes = [sum(1 for key, piece in dealt if key[1] == shard for _ in piece) for shard in range(7)]
    assert max(sizes) - min(sizes) <= 1


def test_a_count_no_bits_could_split_keys_rows_by_the_whole_hash():
    """A label count read back from metadata.json is input: an edited one of 10**30 rows asks for 84 bits, more
    than the hash has; the rows are keyed by the whole hash instead of failing on a negative shift."""
    bits = label_bucket_bits([(("train", "l0"), 10**30)])
    assert bits == {("train", "l0"): HASH_BITS}
    rows = _rows(20, labels=1)
    groups = rank_groups(rows, seed=3, label_bits={("train", "l0"): bits[("train", "l0")]})
    assert sum(len(batch) for _, batch in groups) == 20
    assert all(key[2] == keyed_hash(3, b"shard", "train", batch[0].uri) for key, batch in groups)
