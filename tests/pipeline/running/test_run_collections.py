"""Garbage collection around a build's run (pipeline/running/gc_tuning.py): what is frozen, which thresholds hold,
and that a command leaves the process's collector as it found it."""

from __future__ import annotations

import gc

import pytest

from pipeline.running.gc_tuning import RUN_ALLOCATIONS_PER_COLLECTION, run_collections


@pytest.fixture
def collector():
    thresholds, frozen = gc.get_threshold(), gc.get_freeze_count()
    yield thresholds
    gc.set_threshold(*thresholds)
    gc.unfreeze()
    assert gc.get_freeze_count() >= frozen


def _collected_by_the_collector(obj) -> bool:
    """Whether `obj` is in a generation the collector walks (a frozen object is in none)."""
    return any(o is obj for o in gc.get_objects())


def test_the_run_freezes_what_exists_and_collects_the_young_generation_less_often(collector):
    made_before = []
    assert _collected_by_the_collector(made_before)
    with run_collections():
        assert gc.get_threshold() == (RUN_ALLOCATIONS_PER_COLLECTION, *collector[1:])
        assert not _collected_by_the_collector(made_before)
        made_inside = []
        assert _collected_by_the_collector(made_inside)
    assert gc.get_threshold() == collector


def test_thresholds_come_back_after_a_failed_run(collector):
    with pytest.raises(RuntimeError), run_collections():
        raise RuntimeError("the job failed")
    assert gc.get_threshold() == collector


def test_a_build_leaves_the_collector_as_it_found_it(shardsmith, label_sorted_set, tmp_path, collector):
    """cli.main freezes what existed, the run freezes Beam's modules too; both are undone when it ends."""
    frozen = gc.get_freeze_count()
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", tmp_path / "out",
                        "--name", "pets", "--writer_processes", "0")
    assert result.code == 0, result.err
    assert gc.get_threshold() == collector
    assert gc.get_freeze_count() == frozen
