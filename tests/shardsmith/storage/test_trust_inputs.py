"""Never lose users' data, never trust their inputs: a dataset name is exactly what it looks like, and shard
writer processes die with the build that started them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from shardsmith.fault_injection import FAULT_ENV
from shardsmith.format.naming import TEMP_PREFIX


def test_name_with_a_trailing_line_break_is_a_usage_error(tmp_path, shardsmith, label_sorted_set):
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", tmp_path / "o",
                        "--name", "ds\n")
    assert result.code == 2
    assert result.err.startswith("shardsmith: error: --name") and len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.fixture
def special_files(tmp_path) -> dict[str, str]:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    return {"fifo": str(fifo), "zero": "/dev/zero", "null": "/dev/null", "glob": str(tmp_path / "pipe.*")}


@pytest.mark.parametrize(("which", "words"), [("fifo", "named pipe"), ("zero", "device"), ("null", "device"),
                                              ("glob", "named pipe")])
def test_a_manifest_that_is_not_a_regular_file_is_a_usage_error(which, words, special_files):
    from shardsmith.errors import UsageError
    from shardsmith.manifest import resolve_sources

    with pytest.raises(UsageError, match=words) as raised:
        resolve_sources((special_files[which],))
    assert "not a regular file" in str(raised.value) and "\n" not in str(raised.value)


def test_a_fifo_manifest_with_no_writer_fails_at_once_instead_of_hanging(special_files, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pipeline", "build", "--manifest", special_files["fifo"], "--output_dir",
         str(tmp_path / "out"), "--name", "d"],
        capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=120,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"shardsmith: error: manifest {special_files['fifo']} is a named pipe (FIFO), not a regular file"]


def _process_state(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a live process, or None once it is gone (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    state, ppid = stat.rsplit(")", 1)[1].split()[:2]
    return None if state in "ZX" else (int(ppid), state)


def _shard_writers_of(pid: int) -> list[int]:
    writers = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        state = _process_state(int(entry.name))
        if b"shardsmith.shard_writer.shard_worker" in command and state is not None and state[0] == pid:
            writers.append(int(entry.name))
    return writers


def _shard_files(out: Path) -> tuple[set[str], set[str]]:
    """(final shard names, temporary shard files) in `out`."""
    names = {p.name for p in out.rglob("*") if ".tfrecord-" in p.name} if out.is_dir() else set()  # builds/<id>/
    return {n for n in names if not n.startswith(TEMP_PREFIX)}, {n for n in names if n.startswith(TEMP_PREFIX)}


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the writer processes through /proc")
def test_writer_processes_die_with_a_killed_build(label_sorted_set, tmp_path):
    """kill -9 of the build while its writer processes are mid-shard: they are gone at once, and no shard is
    renamed into place after the kill (a temporary file being written at the kill stays temporary)."""
    out = tmp_path / "out"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    env.pop(FAULT_ENV, None)
    with (tmp_path / "stderr.txt").open("w") as stderr:
        build = subprocess.Popen(
            [sys.executable, "-m", "pipeline", "build", "--manifest", str(label_sorted_set.manifest),
             "--output_dir", str(out), "--name", "pets", "--num_shards", "train=2,validation=1,test=1",
             "--writer_processes", "2"],
            stdout=subprocess.DEVNULL, stderr=stderr, env=env,
        )
    deadline = time.monotonic() + 240
    writers: list[int] = []
    while True:
        assert build.poll() is None, "the build ended before a shard was being written"
        assert time.monotonic() < deadline, "no shard was being written within 240 s"
        writers = writers or _shard_writers_of(build.pid)
        if writers and _shard_files(out)[1]:
            break
        time.sleep(0.002)
    build.kill()
    build.wait()
    finals_at_kill, temporary_at_kill = _shard_files(out)
    assert temporary_at_kill, "the kill should have hit a shard mid-write"

    gone_by = time.monotonic() + 2
    while any(_process_state(pid) for pid in writers) and time.monotonic() < gone_by:
        time.sleep(0.05)
    assert not [pid for pid in writers if _process_state(pid)], "writer processes outlived the build"
    time.sleep(1)
    finals, temporary = _shard_files(out)
    assert finals == finals_at_kill, "a shard was renamed into place after the build was killed"
    assert temporary_at_kill <= temporary
