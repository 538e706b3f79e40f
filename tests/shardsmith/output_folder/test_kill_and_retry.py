"""Killed mid-run and re-run: the output is complete and byte-identical to an undisturbed run, a final shard
name never holds an incomplete file, nothing is published until everything else is in place, and the rerun
takes over the dead build's lock and removes its unfinished folder. A DoFn attempt that fails and is retried
leaves no duplicate or missing record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from shardsmith.fault_injection import FAULT_ENV, WRITER_KILLED
from shardsmith.format.naming import BUILDS_DIR, LOCK_FILE, NAMES_ITS_BUILD, TEMP_PREFIX
from shardsmith.output_folder.layout import published_dir


def build(manifest: Path, out: Path, fault: str = "", *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.run(
        [sys.executable, "-m", "pipeline", "build", "--manifest", str(manifest), "--output_dir", str(out),
         "--name", "pets", "--num_shards", "train=4,validation=2,test=2", *extra],
        capture_output=True, text=True, env=env, timeout=300,
    )


# TensorFlow writes a SavedModel with run-specific names and fingerprints; its vocabulary asset is stable. The
# build record names the build (its id and start time).
NOT_BYTE_STABLE = {"transform_fn/saved_model.pb", "transform_fn/fingerprint.pb", *NAMES_ITS_BUILD}


def files_of(folder: Path) -> dict[str, bytes]:
    files = {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    return {name: data for name, data in files.items() if name not in NOT_BYTE_STABLE}


def only_build(out: Path) -> Path:
    (folder,) = (out / BUILDS_DIR).iterdir()
    return folder


@pytest.fixture(scope="module")
def undisturbed(built) -> dict[str, bytes]:
    """The files of an undisturbed build of the same manifest with the same flags: the suite's `built`."""
    return files_of(Path(published_dir(built)))


@pytest.mark.parametrize("fault", ["mid_shard:20", "after_shards:3", "before_metadata"])
def test_killed_run_leaves_no_false_final_file_and_rerun_is_identical(fault, undisturbed, label_sorted_set,
                                                                        tmp_path):
    out = tmp_path / "out"
    killed = build(label_sorted_set.manifest, out, fault)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE, BUILDS_DIR], "a killed run must not look finished"
    killed_folder = only_build(out)
    left = files_of(killed_folder)
    assert "metadata.json" not in left
    for name, data in left.items():
        if ".tfrecord-" in name and not name.startswith(TEMP_PREFIX):
            assert data == undisturbed[name], f"{name} is under its final name but incomplete"
    if fault == "mid_shard:20":
        assert any(n.startswith(TEMP_PREFIX) for n in left), "the kill should have hit a shard mid-write"
    if fault == "before_metadata":
        assert "errors.jsonl" in left and "labels.txt" in left

    rerun = build(label_sorted_set.manifest, out)  # the same command, as a scheduler's retry would run it
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert "taking over the lock" in rerun.stderr and "its process is gone" in rerun.stderr
    assert sorted(p.name for p in out.iterdir()) == [BUILDS_DIR, "metadata.json"]
    assert only_build(out) != killed_folder, "the unfinished build's folder was removed"
    assert files_of(Path(published_dir(out))) == undisturbed


def test_a_killed_writer_process_rewrites_its_shard_once_and_the_output_is_identical(undisturbed, label_sorted_set,
                                                                                    tmp_path):
    """Each of the two first writer processes is killed (SIGKILL, as the out-of-memory killer does) 5 records
    into its first shard; a new process rewrites that shard once and the build completes, byte-identical."""
    out = tmp_path / "out"
    done = build(label_sorted_set.manifest, out, f"{WRITER_KILLED}:5", "--writer_processes", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    retried = [line for line in done.stderr.splitlines() if "rewriting it once in a new process" in line]
    assert len(retried) == 2, done.stderr[-2000:]
    assert all("killed by signal 9 (SIGKILL)" in line for line in retried), retried
    assert files_of(Path(published_dir(out))) == undisturbed


def test_retried_shard_attempts_write_each_record_once(label_sorted_set, tmp_path, monkeypatch):
    """Runs the shard writer DoFn the way a runner retries a bundle: a first attempt that dies half-way,
    then a second attempt, then a duplicate (speculative) attempt; compares with a single clean attempt."""
    import shardsmith.shard_writer.shard_file as shard_file
    from shardsmith.placement import order_key
    from shardsmith.rows import ManifestRow, PlacedRow
    from shardsmith.shard_writer.writer_config import UnlockedFolder, WriterConfig
    from transforms.write_shards import WriteShardFn

    rows = []
    for line, (split, uri, label) in enumerate(label_sorted_set.rows[:40], start=2):
        path = str(label_sorted_set.path_of(uri))
        row = ManifestRow("m.csv", 0, line, uri, path, split, label, os.path.getsize(path), 0)
        rows.append(PlacedRow(row, 0, 1, order_key(row, 42)))
    group = (("train", 0), [rows[:25], rows[25:]])

    def run_attempt(out: Path) -> list:
        fn = WriteShardFn(WriterConfig(UnlockedFolder(str(out)), "pets"))
        fn.setup()
        try:
            return list(fn.process(group))
        finally:
            fn.teardown()

    clean, retried = tmp_path / "clean", tmp_path / "retried"
    clean.mkdir()
    retried.mkdir()
    run_attempt(clean)

    real_encode = shard_file.image_example_chunks
    calls = {"n": 0}

    def failing_encode(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 15:
            raise RuntimeError("worker lost")
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(shard_file, "image_example_chunks", failing_encode)
    with pytest.raises(RuntimeError, match="worker lost"):
        run_attempt(retried)
    assert list(retried.iterdir()) == [], "a failed attempt leaves neither a final nor a temporary file"
    first = run_attempt(retried)
    second = run_attempt(retried)
    assert sorted(p.name for p in retried.iterdir()) == ["pets-train.tfrecord-00000-of-00001",
                                                         "pets-train.tfrecord-00000-of-00001.idx"]
    assert files_of(retried) == files_of(clean)
    results = [o for o in first if not hasattr(o, "tag")]
    assert results == [o for o in second if not hasattr(o, "tag")]
    assert results[0].num_examples == 40
