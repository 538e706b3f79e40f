"""transforms/place.py: split assignment, shard counts, and PlaceRows in a TestPipeline
(FnApiRunner) over synthetic label-sorted rows: balanced, stratified, and independent of input order."""

from __future__ import annotations

import collections
import dataclasses
import math
import pickle
import random
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that

from shardsmith import placement
from shardsmith.rows import ManifestRow
from shardsmith.settings import PlacementSettings
from shardsmith.shard_writer import shard_worker
from shardsmith.shard_writer.parallel_parse import RowHelpers
from transforms import place
from transforms.place import (
    MIB,
    PlaceRows,
    ShardSpec,
    SplitPlan,
    assign_split,
)

# assign_split ---------------------------------------------------------------------------------------------


def _row(line: int, split: str = "", label: str = "a", label_id: int = 0, size: int = 1000,
         source_index: int = 0, uri: str | None = None) -> ManifestRow:
    uri = uri if uri is not None else f"img/{label}/{line:05d}.jpg"
    source = f"/m{source_index}.csv"
    return ManifestRow(source, source_index, line, uri, "/" + uri, split, label, size, label_id)


def test_assign_split_respects_ratios_and_is_deterministic():
    rows = [_row(i) for i in range(10_000)]
    assigned = [assign_split(r, (0.8, 0.1, 0.1), seed=3) for r in rows]
    counts = collections.Counter(r.split for r in assigned)
    assert set(counts) == {"train", "validation", "test"}
    assert abs(counts["train"] / 10_000 - 0.8) < 0.02
    assert abs(counts["validation"] / 10_000 - 0.1) < 0.015
    assert abs(counts["test"] / 10_000 - 0.1) < 0.015
    assert [assign_split(r, (0.8, 0.1, 0.1), seed=3) for r in rows] == assigned
    # Only the split changes.
    assert all(dataclasses.replace(a, split="") == r for a, r in zip(assigned, rows, strict=True))
    # Ratios need not sum to 1.
    assert [assign_split(r, (8, 1, 1), seed=3) for r in rows] == assigned
    # Another seed moves some rows.
    other = [assign_split(r, (0.8, 0.1, 0.1), seed=4).split for r in rows]
    assert 0 < sum(a.split != o for a, o in zip(assigned, other, strict=True)) < 10_000


def test_assign_split_depends_on_the_uri_only():
    one = assign_split(_row(1, uri="img/x.jpg", source_index=0), (0.5, 0.25, 0.25), seed=1)
    two = assign_split(_row(99, uri="img/x.jpg", source_index=3), (0.5, 0.25, 0.25), seed=1)
    assert one.split == two.split


@pytest.mark.parametrize("ratios, only",
                         [((1, 0, 0), "train"), ((0, 1, 0), "validation"), ((0, 0, 1), "test")])
def test_assign_split_with_one_nonzero_ratio(ratios, only):
    assert {assign_split(_row(i), ratios, seed=0).split for i in range(500)} == {only}


def test_assign_split_keeps_a_split_given_in_the_manifest():
    row = _row(1, split="test")
    assert assign_split(row, (1, 0, 0), seed=0) is row


# ShardSpec ------------------------------------------------------------------------------------------------


def test_shard_spec_counts():
    fixed = ShardSpec((("train", 8), ("*", 2)))
    assert fixed.num_shards("train", 1000, 0) == 8
    assert fixed.num_shards("test", 1000, 10**12) == 2  # "*" applies to the others; bytes do not matter
    assert fixed.num_shards("train", 3, 0) == 3  # never more shards than examples
    assert ShardSpec((("train", 8),)).num_shards("test", 1000, 300 * MIB) == 3  # no "*": by target size
    by_size = ShardSpec(target_shard_bytes=100)
    assert by_size.num_shards("train", 1000, 1000) == 10
    assert by_size.num_shards("train", 1000, 1001) == 11
    assert by_size.num_shards("train", 1000, 1) == 1
    assert by_size.num_shards("train", 1000, 0) == 1  # sizes unknown: still one shard
    assert by_size.num_shards("train", 1, 10**9) == 1
    # Small images: the record cap, not the size, sets the count; a fixed count is kept as given.
    assert ShardSpec().num_shards("train", 25_000, 75 * MIB) == 3
    assert ShardSpec().num_shards("train", 10_000, 75 * MIB) == 1
    assert ShardSpec((("*", 1),)).num_shards("train", 25_000, 75 * MIB) == 1


# PlaceRows ------------------------------------------------------------------------------------------------


def _dump_to(path: str):
    """An assert_that matcher that stores what the pipeline produced, for plain asserts after the run."""

    def dump(actual):
        Path(path).write_bytes(pickle.dumps(list(actual)))

    return dump


def _place(rows: list[ManifestRow], seed: int, spec: ShardSpec, out: Path, batch_size: int = 97,
           helpers: RowHelpers | None = None):
    """Runs PlaceRows over the rows in batches; returns ({(split, shard): [PlacedRow...]}, plan)."""
    out.mkdir(parents=True, exist_ok=True)
    batches = [rows[i:i + batch_size] for i in range(0, len(rows), batch_size)]
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        settings = PlacementSettings(seed=seed, num_shards=spec.fixed,
                                      target_shard_mb=spec.target_shard_bytes / MIB)
        shards, plan = p | beam.Create(batches, reshuffle=False) | PlaceRows(settings, helpers=helpers)
        listed = shards | beam.MapTuple(lambda key, dealt: (key, [p for part in dealt for p in part]))
        assert_that(listed, _dump_to(str(out / "shards.pkl")), label="Shards")
        assert_that(plan, _dump_to(str(out / "plan.pkl")), label="Plan")
    groups = pickle.loads((out / "shards.pkl").read_bytes())
    keys = [key for key, _ in groups]
    assert len(keys) == len(set(keys)), "one group per (split, shard)"
    [plan_value] = pickle.loads((out / "plan.pkl").read_bytes())
    return dict(groups), plan_value


LABELS = {"ant": 0, "bee": 1, "cow": 2}


def _label_sorted_rows(counts: dict[str, dict[str, int]], size=lambda i: 1000) -> list[ManifestRow]:
    """counts: label -> split -> rows, written label by label (the order that defeats naive sharding)."""
    rows, line = [], 0
    for label in sorted(counts):
        for split, n in counts[label].items():
            for _ in range(n):
                line += 1
                rows.append(_row(line, split, label, LABELS[label], size(line)))
    return rows


COUNTS = {  # 1000 rows, three labels of uneven size
    "ant": {"train": 420, "validation": 55, "test": 50},
    "bee": {"train": 230, "validation": 31, "test": 29},
    "cow": {"train": 130, "validation": 27, "test": 28},
}


def _check_balanced(rows: list[ManifestRow], groups, expected_shards: dict[str, int]):
    # Every row exactly once, unchanged.
    placed_rows = [p.row for placed in groups.values() for p in placed]
    assert sorted(placed_rows, key=lambda r: r.line) == sorted(rows, key=lambda r: r.line)
    for split, num_shards in expected_shards.items():
        assert sorted(shard for s, shard in groups if s == split) == list(range(num_shards)), split
        split_rows = [r for r in rows if r.split == split]
        sizes = [len(groups[(split, shard)]) for shard in range(num_shards)]
        assert max(sizes) - min(sizes) <= 1, (split, sizes)
        assert min(sizes) >= 1
        for label, total in collections.Counter(r.label for r in split_rows).items():
            allowed = {total // num_shards, math.ceil(total / num_shards)}
            per_shard = [sum(p.row.label == label for p in groups[(split, s)]) for s in range(num_shards)]
            assert set(per_shard) <= allowed, (split, label, per_shard)
        for shard in range(num_shards):
            for p in groups[(split, shard)]:
                assert (p.row.split, p.shard, p.num_shards) == (split, shard, num_shards)
                assert p.order_key[1:] == (p.row.source_index, p.row.line)
    assert {s for s, _ in groups} == set(expected_shards)


def _placement(groups) -> dict:
    return {(p.row.source_index, p.row.line): (key, p.order_key)
            for key, placed in groups.items() for p in placed}


def _label_changes(placed) -> tuple[int, float]:
    """How often the label changes from one row to the next in shard order, and how often it would on
    average in a random order. A label-sorted shard changes label at most twice here."""
    ordered = [p.row.label for p in sorted(placed, key=lambda p: p.order_key)]
    changes = sum(a != b for a, b in zip(ordered, ordered[1:], strict=False))
    shares = [n / len(ordered) for n in collections.Counter(ordered).values()]
    return changes, (len(ordered) - 1) * (1 - sum(x * x for x in shares))


def test_place_rows_fixed_counts_balanced_stratified_and_order_independent(tmp_path):
    rows = _label_sorted_rows(COUNTS)
    # Two manifests listing the same images: equal hashes, ties broken by (source index, line).
    rows += [dataclasses.replace(r, source_index=1, line=r.line + 5000, source="/m1.csv")
             for r in rows[:40] + rows[700:720]]
    assert len(rows) == 1060
    spec = ShardSpec((("train", 7), ("validation", 4), ("*", 3)))
    groups, plan = _place(rows, 11, spec, tmp_path / "a")
    _check_balanced(rows, groups, {"train": 7, "validation": 4, "test": 3})
    train_rows = [r for r in rows if r.split == "train"]
    assert plan.splits["train"] == SplitPlan(len(train_rows), 1000 * len(train_rows), 7)
    assert list(plan.splits) == ["train", "validation", "test"]
    # Pseudo-random order inside a shard, not label runs as the label-sorted input would give.
    for placed in groups.values():
        changes, expected_if_random = _label_changes(placed)
        assert changes > 0.7 * expected_if_random

    shuffled = rows[:]
    random.Random(5).shuffle(shuffled)
    shuffled_groups, shuffled_plan = _place(shuffled, 11, spec, tmp_path / "b")
    assert _placement(shuffled_groups) == _placement(groups)
    assert shuffled_plan == plan

    other_seed, _ = _place(rows, 12, spec, tmp_path / "c")
    _check_balanced(rows, other_seed, {"train": 7, "validation": 4, "test": 3})
    assert _placement(other_seed) != _placement(groups)

    one_batch, _ = _place(rows, 11, spec, tmp_path / "d", batch_size=len(rows))
    assert _placement(one_batch) == _placement(groups)


def test_rank_groups_split_large_labels_without_changing_placement(tmp_path, monkeypatch):
    rows = _label_sorted_rows(COUNTS)
    spec = ShardSpec((("train", 7), ("*", 3)))
    whole, whole_plan = _place(rows, 3, spec, tmp_path / "whole")
    assert {key[2] for key in whole_plan.offsets} == {0}
    # Groups of at most 16 rows: ant/train (420 rows) is ranked in 32 hash buckets, on separate workers.
    monkeypatch.setattr(placement, "MAX_ROWS_PER_RANK_GROUP", 16)
    assert placement.bucket_bits(420) == 5 and placement.bucket_bits(16) == 0 and placement.bucket_bits(17) == 1
    split, split_plan = _place(rows, 3, spec, tmp_path / "split")
    assert len([key for key in split_plan.offsets if key[:2] == ("train", 0)]) == 32
    assert split_plan.splits == whole_plan.splits
    assert _placement(split) == _placement(whole)


def test_rank_groups_dealt_by_writer_processes_are_placed_as_in_the_launcher(tmp_path, monkeypatch):
    rows = _label_sorted_rows(COUNTS)
    spec = ShardSpec((("train", 7), ("*", 3)))
    here, here_plan = _place(rows, 3, spec, tmp_path / "here")
    monkeypatch.setattr(place, "DEAL_IN_PROCESS_ROWS", 0)
    monkeypatch.setattr(place, "MAX_ROWS_HELD_FOR_RANKING", 100)  # several jobs, each of several rank groups
    pool_key = str(tmp_path / "build")
    try:
        dealt, dealt_plan = _place(rows, 3, spec, tmp_path / "dealt", helpers=RowHelpers(pool_key, 2, False))
        assert pool_key in shard_worker._BUILD_POOLS  # the writer processes were started, to deal
    finally:
        shard_worker.close_build_pool(pool_key)
    assert dealt_plan == here_plan
    assert _placement(dealt) == _placement(here)
    _check_balanced(rows, dealt, {"train": 7, "validation": 3, "test": 3})


def test_place_rows_shard_count_from_target_bytes(tmp_path):
    rows = _label_sorted_rows(COUNTS, size=lambda line: 500 + (line * 37) % 1000)
    rows[3] = dataclasses.replace(rows[3], size=-1)  # an unknown size counts as 0 bytes
    target = 40 * 1024  # bytes; as --target_shard_mb, exactly 40/1024 MiB
    expected = {}
    for split in ("train", "validation", "test"):
        total = sum(max(r.size, 0) for r in rows if r.split == split)
        expected[split] = math.ceil(total / target)
    assert expected["train"] > 10 and expected["test"] > 1
    groups, plan = _place(rows, 0, ShardSpec(target_shard_bytes=target), tmp_path)
    _check_balanced(rows, groups, expected)
    for split, num_shards in expected.items():
        split_rows = [r for r in rows if r.split == split]
        assert plan.splits[split] == SplitPlan(len(split_rows), sum(max(r.size, 0) for r in split_rows),
                                               num_shards)


def test_place_rows_small_splits_get_at_least_one_shard(tmp_path):
    rows = [
        _row(1, "train", "ant", 0), _row(2, "train", "bee", 1), _row(3, "train", "ant", 0),
        _row(4, "validation", "ant", 0, size=-1),
        _row(5, "test", "bee", 1, size=10),
    ]
    spec = ShardSpec((("train", 8), ("validation", 4)), target_shard_bytes=1 << 30)
    groups, plan = _place(rows, 1, spec, tmp_path)
    # train: 8 wanted, 3 rows -> 3 shards of one row; validation: 1 row -> 1 shard; test: tiny -> 1 shard.
    _check_balanced(rows, groups, {"train": 3, "validation": 1, "test": 1})
    assert [len(groups[("train", s)]) for s in range(3)] == [1, 1, 1]
    num_shards = {split: split_plan.num_shards for split, split_plan in plan.splits.items()}
    assert num_shards == {"train": 3, "validation": 1, "test": 1}
