"""Cleanup and retirement delete exactly what a build record lists as written, never the published build, and
leave a folder every later build can use without a person: after a failed --overwrite, look-alike user files in
a build's folder, a kill while tf.transform writes, a kill just before the top-level switch, and a scratch
folder inside the output folder (shardsmith/output_folder/layout.py, shardsmith/format/build_record.py)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pipeline import cli
from shardsmith import load
from shardsmith.fault_injection import FAULT_ENV
from shardsmith.format.naming import BUILDS_DIR, LOCK_FILE

NUM_SHARDS = "train=2,validation=1,test=1"


def _args(manifest: Path, out: Path, *extra: str) -> list[str]:
    return ["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "pets",
            "--num_shards", NUM_SHARDS, *extra]


def _env(fault: str = "") -> dict[str, str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    return env


def _run(manifest: Path, out: Path, *extra: str, fault: str = "") -> subprocess.CompletedProcess:
    """A build and what it printed: with a fault, in a process of its own (the fault kills it); without, in
    this process (a process would import Beam again, about 3 s of CPU a build)."""
    args = _args(manifest, out, *extra)
    if fault:
        return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True,
                              env=_env(fault), timeout=300)
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = cli.main(args)
    return subprocess.CompletedProcess(args, code, "", err.getvalue())


def _published_id(out: Path) -> str:
    return json.loads((out / "metadata.json").read_text())["build_id"]


def _builds(out: Path) -> list[str]:
    return sorted(p.name for p in (out / BUILDS_DIR).iterdir())


def test_a_failing_overwrite_never_removes_the_published_build(label_sorted_set, tmp_path):
    out = tmp_path / "out"
    assert _run(label_sorted_set.manifest, out).returncode == 0
    published = _published_id(out)
    (out / BUILDS_DIR / published / "metadata.json").unlink()  # the build's own copy lost; it is still published
    missing = tmp_path / "missing.csv"
    with missing.open("w", newline="") as f:
        csv.writer(f).writerows([["split", "image_uri", "label"],
                                 *[[s, str(tmp_path / "nowhere" / f"{i}.jpg"), label]
                                   for i, (s, _, label) in enumerate(label_sorted_set.rows)]])
    failed = _run(missing, out, "--overwrite")
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert _published_id(out) == published
    assert published in _builds(out), "a failing --overwrite removed the published build"
    assert len(list(load(str(out), "validation", batch_size=None))) == 31, "the published build still loads"
    again = _run(label_sorted_set.manifest, out, "--overwrite")
    assert again.returncode == 0, again.stderr[-2000:]
    assert _published_id(out) != published


def test_look_alike_user_files_in_a_build_folder_survive_retirement_and_later_builds_run(
        label_sorted_set, tmp_path):
    out = tmp_path / "out"
    assert _run(label_sorted_set.manifest, out).returncode == 0
    first = out / BUILDS_DIR / _published_id(out)
    theirs = {"pets-train.tfrecord-00000-of-00002.bak": b"the user's backup of a shard",
              "transform_fn/mine/analysis.ipynb": b"the user's notebook",
              "pets-train.tfrecord-00001-of-00009": b"named like a shard this build never wrote"}
    for name, data in theirs.items():
        (first / name).parent.mkdir(parents=True, exist_ok=True)
        (first / name).write_bytes(data)
    retiring = _run(label_sorted_set.manifest, out, "--overwrite", "--keep_days", "0", "--keep_builds", "1")
    assert retiring.returncode == 0, retiring.stderr[-2000:]
    left = {str(p.relative_to(first)): p.read_bytes() for p in first.rglob("*") if p.is_file()}
    assert left == theirs, "retirement removes the build's own files and nothing else"
    for extra in (("--overwrite",), ("--overwrite", "--keep_days", "0", "--keep_builds", "1")):
        later = _run(label_sorted_set.manifest, out, *extra)
        assert later.returncode == 0, later.stderr[-2000:]
        reported = [line for line in later.stderr.splitlines() if "left in place" in line]
        assert len(reported) == 1 and f"{BUILDS_DIR}/{first.name}" in reported[0], later.stderr[-2000:]
    assert {str(p.relative_to(first)): p.read_bytes() for p in first.rglob("*") if p.is_file()} == theirs
    assert len(_builds(out)) == 2, "the folder of user files is not counted as a build"


def test_kill_while_transform_fn_is_written_then_a_later_build_runs(label_sorted_set, tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "pipeline", *_args(label_sorted_set.manifest, out)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(),
                               start_new_session=True)
    deadline = time.monotonic() + 240
    killed = False
    while process.poll() is None and time.monotonic() < deadline:
        if any("transform_fn" in folders for _, folders, _ in os.walk(out / BUILDS_DIR)):
            os.killpg(process.pid, signal.SIGKILL)  # the build and its helper processes, as a lost machine
            killed = True
            break
        time.sleep(0.002)
    process.wait(timeout=60)
    assert killed, "transform_fn/ never appeared: " + process.stderr.read()[-2000:]
    assert not (out / "metadata.json").exists(), "killed before it published"
    (killed_build,) = _builds(out)
    rerun = _run(label_sorted_set.manifest, out)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [BUILDS_DIR, "metadata.json"]
    assert killed_build not in _builds(out), "the killed build's folder, transform_fn/ included, was removed"
    again = _run(label_sorted_set.manifest, out, "--overwrite")
    assert again.returncode == 0, again.stderr[-2000:]


def test_a_kill_just_before_the_switch_publishes_nothing_and_is_cleaned_up(label_sorted_set, tmp_path):
    out = tmp_path / "out"
    assert _run(label_sorted_set.manifest, out).returncode == 0
    published = _published_id(out)
    killed = _run(label_sorted_set.manifest, out, "--overwrite", fault="before_switch")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (killed_build,) = set(_builds(out)) - {published}
    assert _published_id(out) == published
    kept = _run(label_sorted_set.manifest, out, "--overwrite", "--keep_days", "0", "--keep_builds", "2")
    assert kept.returncode == 0, kept.stderr[-2000:]
    newest = _published_id(out)
    assert _builds(out) == sorted([published, newest]), "the killed build was removed, not kept as a published one"
    assert sorted(p.name for p in out.iterdir()) == [BUILDS_DIR, "metadata.json"]


def test_a_kill_just_before_the_first_switch_leaves_a_folder_a_plain_rerun_takes(label_sorted_set, tmp_path):
    out = tmp_path / "out"
    killed = _run(label_sorted_set.manifest, out, fault="before_switch")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == [LOCK_FILE, BUILDS_DIR]
    (killed_build,) = _builds(out)
    rerun = _run(label_sorted_set.manifest, out)  # no --overwrite: nothing was published
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _builds(out) == [_published_id(out)] and killed_build not in _builds(out)


def test_a_scratch_folder_inside_the_output_folder_is_a_usage_error(label_sorted_set, tmp_path, shardsmith):
    out = tmp_path / "out"
    for extra in (("--temp_dir", str(out / "scratch")), ("--temp_dir", str(out)),
                  ("--temp_location", str(out / "beam-temp"))):
        result = shardsmith(*_args(label_sorted_set.manifest, out, *extra))
        assert result.code == 2, result.err
        assert "inside the output folder" in result.err and result.err.count("\n") == 1
        assert not out.exists()
