"""The launcher's helper processes cannot hang a build: a wrong-key or silent connection to the tf.transform
process is refused and logged while it keeps serving; a killed tf.transform process fails the build within
seconds, naming its death; a shard writer that stops answering is killed at its deadline. Real processes,
real sockets, real signals."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import AuthenticationError, Client
from pathlib import Path

import pytest

from pipeline.running.transform_fn_process import transform_fn_process
from shardsmith.core.fault_injection import FAULT_ENV, WRITER_KILLED_ALWAYS
from shardsmith.core.rows import ManifestRow, PlacedRow
from shardsmith.core.shard_file import WriterConfig
from shardsmith.core.shard_worker import ShardWriterPool
from shardsmith.format.naming import LOCK_FILE
from transforms.place import order_key

REPO = Path(__file__).resolve().parents[1]
HELPER_MODULE = b"pipeline.running.transform_fn_process"


def _children(parent: int) -> dict[int, list[bytes]]:
    """pid -> argv of the processes whose parent is `parent`."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            if int(stat[stat.rindex(")") + 2:].split()[1]) == parent:
                found[int(entry.name)] = (entry / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
    return found


def _helper_of(build: subprocess.Popen, within_s: float = 60) -> tuple[int, str]:
    """The build's tf.transform process and its socket's path, once the socket exists."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        assert build.poll() is None, "the build ended before its tf.transform process was seen"
        for pid, argv in _children(build.pid).items():
            if HELPER_MODULE in argv and os.path.exists(argv[-1]):
                return pid, argv[-1].decode()
        time.sleep(0.02)
    raise AssertionError(f"no tf.transform process with a socket after {within_s} s")


def _start_build(manifest: Path, out: Path, env_extra: dict[str, str] | None = None) -> subprocess.Popen:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO), **(env_extra or {})}
    env.pop(FAULT_ENV, None)
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "build", "--manifest", str(manifest), "--output_dir", str(out),
         "--name", "pets", "--num_shards", "train=2,validation=1,test=1"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(build: subprocess.Popen, timeout_s: float) -> tuple[int, str, str]:
    try:
        out, err = build.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        build.kill()
        out, err = build.communicate()
        raise AssertionError(f"the build hung: still running after {timeout_s} s; stderr: {err[-2000:]}") from None
    return build.returncode, out, err


def _wrong_key_and_silent_connections(address: str) -> socket.socket:
    """Connects once with a wrong key (refused) and once without a word (left open); returns the silent one."""
    with pytest.raises(AuthenticationError):
        Client(address, family="AF_UNIX", authkey=b"not the key")
    silent = socket.socket(socket.AF_UNIX)
    silent.connect(address)
    return silent


def _within(seconds: float, call) -> BaseException | object:
    """Runs `call` in a thread; its result or exception, or fails the test if it has not returned in time."""
    outcome: list = []

    def run():
        try:
            outcome.append(call())
        except BaseException as error:  # handed to the test
            outcome.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert outcome, f"no answer within {seconds} s: the call hangs"
    return outcome[0]


def test_the_helper_keeps_serving_after_a_wrong_key_and_a_silent_connection():
    with transform_fn_process() as client:
        with pytest.raises(RuntimeError, match="no such request"):  # it is up and serving
            client.wait("0" * 64)
        silent = _wrong_key_and_silent_connections(client.address)
        with silent:
            answer = _within(30, lambda: client.wait("0" * 64))
            assert isinstance(answer, RuntimeError) and "no such request" in str(answer), answer
            answer = _within(30, lambda: client.wait("0" * 64))  # and again: its accept loop still runs
            assert isinstance(answer, RuntimeError) and "no such request" in str(answer), answer


def test_a_build_finishes_while_a_wrong_key_connects_to_its_helper(label_sorted_set, tmp_path):
    build = _start_build(label_sorted_set.manifest, tmp_path / "out")
    try:
        _, address = _helper_of(build)
        silent = _wrong_key_and_silent_connections(address)
    except BaseException:
        build.kill()
        build.communicate()
        raise
    with silent:
        code, _, err = _finish(build, timeout_s=120)
    assert code == 0, err[-2000:]
    assert "handshake" in err, "the refused connection should be logged"


def _stderr_lines(build: subprocess.Popen) -> list[str]:
    """The build's stderr lines as they come (read by a thread of their own)."""
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(build.stderr.readline, "")), daemon=True).start()
    return lines


def test_a_killed_helper_fails_the_build_within_seconds_naming_its_death(label_sorted_set, tmp_path):
    out = tmp_path / "out"
    build = _start_build(label_sorted_set.manifest, out, {"SHARDSMITH_PROGRESS_INTERVAL": "0.1"})
    err = _stderr_lines(build)
    try:
        helper, _ = _helper_of(build)
        deadline = time.monotonic() + 120
        while not any("rows read" in line for line in err):  # the launcher is running the pipeline now
            assert build.poll() is None and time.monotonic() < deadline, "".join(err)[-2000:]
            time.sleep(0.02)
        os.kill(helper, signal.SIGKILL)
        killed_at = time.monotonic()
        code = build.wait(timeout=120)
    except BaseException:
        build.kill()
        build.wait()
        raise
    took = time.monotonic() - killed_at
    print(f"the build failed {took:.1f} s after the kill")
    text = "".join(err)
    assert code == 1, text[-2000:]
    (failed,) = [line for line in text.splitlines() if line.startswith("shardsmith: the job failed")] or [text]
    assert "the tf.transform process" in failed and "died" in failed and "SIGKILL" in failed, failed
    assert "run the same command again" in failed, failed
    assert took < 10, f"took {took:.1f} s after the kill"
    assert not (out / LOCK_FILE).exists(), "a failed build releases its lock"


def _placed_rows(image_set, count: int) -> list[PlacedRow]:
    rows = []
    for line, (split, uri, label) in enumerate(image_set.rows[:count], start=2):
        path = str(image_set.path_of(uri))
        row = ManifestRow("m.csv", 0, line, uri, path, split, label, os.path.getsize(path), 0)
        rows.append(PlacedRow(row, 0, 1, order_key(row, 42)))
    return rows


def _writer_pids() -> list[int]:
    return [pid for pid, argv in _children(os.getpid()).items() if b"shardsmith.core.shard_worker" in argv]


def test_a_writer_that_stops_answering_is_killed_at_its_deadline(label_sorted_set, tmp_path):
    pool = ShardWriterPool(1, shard_deadline_s=2)
    try:
        (writer,) = _writer_pids()
        os.kill(writer, signal.SIGSTOP)
        job = pool.submit(WriterConfig(str(tmp_path), "pets"), "train", 0, [_placed_rows(label_sorted_set, 10)])
        started = time.monotonic()
        error = _within(30, job.result)
        assert isinstance(error, RuntimeError), error
        assert "no answer" in str(error) and "2 s" in str(error) and "train shard 1 of 1" in str(error), error
        assert time.monotonic() - started < 10
    finally:
        pool.close()
    assert not _writer_pids(), "close() leaves no writer behind"


def test_a_writer_killed_twice_on_one_shard_fails_it_naming_the_shard(label_sorted_set, tmp_path, monkeypatch):
    monkeypatch.setenv(FAULT_ENV, f"{WRITER_KILLED_ALWAYS}:3")
    pool = ShardWriterPool(1)
    try:
        job = pool.submit(WriterConfig(str(tmp_path), "pets"), "train", 0, [_placed_rows(label_sorted_set, 10)])
        error = _within(60, job.result)
    finally:
        pool.close()
    assert isinstance(error, RuntimeError), error
    text = str(error)
    assert "died twice" in text and "train shard 1 of 1" in text and "SIGKILL" in text, text
    assert not any(p.name.endswith("-of-00001") for p in tmp_path.iterdir()), "no final shard after two deaths"
