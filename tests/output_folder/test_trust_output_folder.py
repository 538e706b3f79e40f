"""The output folder is shardsmith's alone: files it did not write are never touched, one build at a time holds
it, and a reader reads one build or fails loudly (shardsmith/output_folder/layout.py, lock/)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardsmith import load
from shardsmith.format.build_record import BuildRecord
from shardsmith.format.naming import BUILD_RECORD, BUILDS_DIR, LOCK_FILE
from shardsmith.output_folder.lock import LOCK_STALE_AFTER_S, LockHolder, acquire_lock

NUM_SHARDS = "train=2,validation=1,test=1"


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every file (with its bytes) and folder under `folder`."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def _subset_manifest(image_set, target: Path, labels: set[str]) -> Path:
    with target.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows((s, str(image_set.path_of(u)), label) for s, u, label in image_set.rows if label in labels)
    return target


def _build_args(manifest: Path, out: Path, *extra: str) -> list[str]:
    return ["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "pets",
            "--num_shards", NUM_SHARDS, *extra]


def _spawn(manifest: Path, out: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    return subprocess.Popen([sys.executable, "-m", "pipeline", *_build_args(manifest, out, *extra)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_a_user_folder_with_look_alike_names_is_untouched(label_sorted_set, tmp_path, shardsmith):
    out = tmp_path / "theirs"
    for name in ("labels.txt", "features.json", "errors.jsonl", "dataset_info.json",
                 "pets-train.tfrecord-00000-of-00001", "transform_fn/variables/variables.index",
                 ".shardsmith-tmp-x", "builds/notes.txt"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(f"the user's own {name}".encode())
    before = _tree(out)
    for extra in ((), ("--overwrite",)):
        result = shardsmith(*_build_args(label_sorted_set.manifest, out, *extra))
        assert result.code == 2, result.err
        assert "holds files that no shardsmith build wrote (.shardsmith-tmp-x, dataset_info.json," in result.err
        assert _tree(out) == before, "not one file added, changed or removed"


def test_a_manifest_inside_the_output_folder_is_refused_and_kept(label_sorted_set, tmp_path, shardsmith):
    out = tmp_path / "out"
    out.mkdir()
    manifest = out / "labels.txt"  # a name the old cleanup deleted before reading it
    shutil.copy(label_sorted_set.manifest, manifest)
    before = manifest.read_bytes()
    result = shardsmith(*_build_args(manifest, out, "--overwrite"))
    assert result.code == 2
    assert "is inside the output folder" in result.err
    assert manifest.read_bytes() == before and sorted(p.name for p in out.iterdir()) == ["labels.txt"]


def test_a_dataset_in_the_earlier_layout_is_left_as_it_is(built, tmp_path, shardsmith, label_sorted_set,
                                                          files_of_build):
    old = tmp_path / "old"
    shutil.copytree(files_of_build(built), old)  # a build's own folder looks like the earlier flat layout
    (old / BUILD_RECORD).unlink()
    metadata = json.loads((old / "metadata.json").read_text())
    del metadata["build_dir"]
    (old / "metadata.json").write_text(json.dumps(metadata))
    before = _tree(old)
    result = shardsmith(*_build_args(label_sorted_set.manifest, old, "--overwrite"))
    assert result.code == 2
    assert "written by an earlier shardsmith" in result.err and "left untouched" in result.err
    assert _tree(old) == before
    assert len(list(load(str(old), "validation", batch_size=None))) == 31, "the earlier layout still loads"


def test_a_live_lock_holder_is_named_and_the_folder_left_alone(label_sorted_set, tmp_path, shardsmith):
    out = tmp_path / "out"
    out.mkdir()
    lock = acquire_lock(str(out), "20260101T000000Z-0000abcd")  # this test process: alive, on this host
    try:
        for extra in ((), ("--break_lock",)):
            result = shardsmith(*_build_args(label_sorted_set.manifest, out, *extra))
            assert result.code == 2, result.err
            assert "is being built by build 20260101T000000Z-0000abcd" in result.err
            assert f"process {os.getpid()} on {socket.gethostname()}" in result.err
            assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE]
    finally:
        lock.release()
    assert not (out / LOCK_FILE).exists()


def test_a_stale_lock_of_another_host_is_broken_only_with_break_lock(label_sorted_set, tmp_path, shardsmith,
                                                                      metadata_of):
    out = tmp_path / "out"
    out.mkdir()
    holder = LockHolder("20260101T000000Z-0000abcd", "a-lost-airflow-worker", 4242, "1", "2026-01-01T00:00:00Z")
    (out / LOCK_FILE).write_bytes(holder.to_json())
    fresh = shardsmith(*_build_args(label_sorted_set.manifest, out, "--break_lock"))
    assert fresh.code == 2 and "wait for it to finish" in fresh.err, "a live heartbeat is never broken"
    long_ago = time.time() - LOCK_STALE_AFTER_S - 60
    os.utime(out / LOCK_FILE, (long_ago, long_ago))
    stale = shardsmith(*_build_args(label_sorted_set.manifest, out))
    assert stale.code == 2 and "pass --break_lock to take it over" in stale.err
    broken = shardsmith(*_build_args(label_sorted_set.manifest, out, "--break_lock"))
    assert broken.code == 0, broken.err
    assert metadata_of(out)["num_examples"] == 285
    assert not (out / LOCK_FILE).exists(), "the build released the lock it took over"


def test_two_builds_started_together_one_refused_one_complete_dataset(label_sorted_set, tmp_path, shardsmith):
    out = tmp_path / "out"
    small = _subset_manifest(label_sorted_set, tmp_path / "small.csv", {"cat"})
    first = _spawn(label_sorted_set.manifest, out)
    deadline = time.monotonic() + 60
    while not (out / LOCK_FILE).exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-2000:]
        time.sleep(0.05)
    # The first build is paused while it holds the lock (a small build can finish before a second process has
    # imported Beam): the second must meet the lock, not a finished dataset.
    os.kill(first.pid, signal.SIGSTOP)
    try:
        second = shardsmith(*_build_args(small, out))  # in this process: it is refused before any work
    finally:
        os.kill(first.pid, signal.SIGCONT)
    first_err = first.communicate(timeout=300)[1]
    assert second.code == 2, second.err[-2000:]
    assert "is being built by build" in second.err
    assert first.returncode == 0, first_err[-2000:]
    metadata = json.loads((out / "metadata.json").read_text())
    assert metadata["options"]["manifests"] == [str(label_sorted_set.manifest)]
    assert sorted(p.name for p in out.iterdir()) == [BUILDS_DIR, "metadata.json"]
    verified = shardsmith("verify", out)
    assert verified.code == 0, verified.out[-2000:]


def test_a_reader_mid_epoch_keeps_reading_the_build_it_opened(label_sorted_set, tmp_path, shardsmith, metadata_of):
    out = tmp_path / "out"
    assert shardsmith(*_build_args(label_sorted_set.manifest, out)).code == 0
    old = metadata_of(out)
    reader = iter(load(str(out), "train", batch_size=None, shuffle_buffer=0, features=True, shuffle_files=False,
                       cycle_length=1))  # the second shard is opened after the overwrite
    seen = [next(reader)["image/class/text"].numpy().decode() for _ in range(20)]
    emus = _subset_manifest(label_sorted_set, tmp_path / "emus.csv", {"emu"})
    assert shardsmith(*_build_args(emus, out, "--overwrite")).code == 0
    assert metadata_of(out)["labels"] == ["emu"]
    seen += [example["image/class/text"].numpy().decode() for example in reader]
    assert len(seen) == old["splits"]["train"]["num_examples"] == 225
    assert {"cat", "dog"} <= set(seen), "the rest of the epoch still came from the build the reader opened"
    assert len(list(load(str(out), "train", batch_size=None))) == 75, "a new load() reads the new build"


def test_keep_builds_retires_older_builds_and_their_readers_fail_loudly(label_sorted_set, tmp_path, shardsmith):
    import tensorflow as tf

    out = tmp_path / "out"
    assert shardsmith(*_build_args(label_sorted_set.manifest, out)).code == 0
    first = json.loads((out / "metadata.json").read_text())["build_dir"]
    stale_reader = load(str(out), "validation", batch_size=None, shuffle_buffer=0)
    assert shardsmith(*_build_args(label_sorted_set.manifest, out, "--overwrite")).code == 0
    assert (out / first).is_dir(), "the default keeps the previous build for its readers"
    renamed = shardsmith(*_build_args(label_sorted_set.manifest, out, "--overwrite", "--keep_days", "0",
                                      "--keep_builds", "1", "--name", "renamed"))
    assert renamed.code == 0, renamed.err
    builds = sorted((out / BUILDS_DIR).iterdir())
    assert len(builds) == 1 and not (out / first).exists()
    assert not list(out.rglob("pets-*")), "no shard of the old name is left"
    with pytest.raises(tf.errors.NotFoundError):
        list(stale_reader)


def test_cleanup_removes_only_what_a_build_record_names(label_sorted_set, tmp_path, shardsmith):
    out = tmp_path / "out"
    dead = out / BUILDS_DIR / "20260101T000000Z-0000dead"
    (dead / "transform_fn").mkdir(parents=True)
    legacy = BuildRecord("20260101T000000Z-0000dead", "pets", "2026-01-01T00:00:00Z", version=1,
                         patterns=("labels.txt", "pets-*.tfrecord-*", "transform_fn/*"))  # a first-version record
    (dead / BUILD_RECORD).write_bytes(legacy.to_json())
    for name in ("pets-train.tfrecord-00000-of-00002", "labels.txt", "transform_fn/saved_model.pb"):
        (dead / name).write_bytes(b"left by a killed build")
    (dead / "my-notes.txt").write_bytes(b"a user's file that the record does not name")
    assert shardsmith(*_build_args(label_sorted_set.manifest, out)).code == 0
    assert _tree(dead) == {"my-notes.txt": b"a user's file that the record does not name"}


def test_load_raises_on_a_cut_empty_or_escaping_shard(built, tmp_path, files_of_build):
    import tensorflow as tf

    def copy(name: str) -> tuple[Path, Path, dict]:
        target = tmp_path / name
        shutil.copytree(built, target)
        metadata = json.loads((target / "metadata.json").read_text())
        return target, files_of_build(target) / metadata["splits"]["test"]["shards"][0]["file"], metadata

    cut, shard, metadata = copy("cut")
    data = shard.read_bytes()
    records, offset = [], 0
    while offset < len(data):  # TFRecord framing: 8-byte length, 4-byte CRC, data, 4-byte CRC
        length = int.from_bytes(data[offset:offset + 8], "little")
        offset += 16 + length
        records.append(offset)
    shard.write_bytes(data[:records[-2]])  # one whole record short: the framing alone cannot tell
    with pytest.raises(RuntimeError, match="cut short"):
        load(str(cut), "test", batch_size=None)
    top = json.loads((cut / "metadata.json").read_text())
    for entries in (top, json.loads((files_of_build(cut) / "metadata.json").read_text())):
        entries["splits"]["test"]["shards"][0]["num_bytes"] = records[-2]
    (cut / "metadata.json").write_text(json.dumps(top))
    with pytest.raises(tf.errors.FailedPreconditionError, match="contain 15 elements but contained only 14"):
        list(load(str(cut), "test", batch_size=None, shuffle_buffer=0))

    empty, shard, _ = copy("empty")
    shard.write_bytes(b"")
    with pytest.raises(RuntimeError, match="holds 0 bytes"):
        load(str(empty), "test", batch_size=None)

    escaping, _, metadata = copy("escaping")
    metadata["splits"]["test"]["shards"][0]["file"] = "../../outside.tfrecord"
    (escaping / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match="not a file name in the dataset folder"):
        load(str(escaping), "test", batch_size=None)
    metadata["splits"]["test"]["shards"][0]["file"] = shard.name
    metadata["build_dir"] = "builds/../.."
    (escaping / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(ValueError, match="expected builds/<build id>"):
        load(str(escaping), "test", batch_size=None)


def test_labels_with_unicode_line_separators_verify(tmp_path, image_set_factory, shardsmith):
    # Line breaks to str.splitlines(), not to a "\n"-separated file; control characters (\x0c, \x85) are error rows
    # (tests/cli/test_input_text_shown.py), these separators are labels.
    labels = ("a\u2028b", "c\u2029d")
    images = image_set_factory(tmp_path / "img", {label: {"train": 4} for label in labels})
    out = tmp_path / "out"
    assert shardsmith(*_build_args(images.manifest, out, "--num_shards", "train=1")).code == 0
    verified = shardsmith("verify", str(out))
    assert verified.code == 0, verified.out[-2000:]
