"""The launcher's writer processes cannot hang a build: a shard writer that stops answering is killed at its
deadline, and one killed twice on a shard fails it, naming the shard. Real processes, real signals."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from shardsmith.fault_injection import FAULT_ENV, WRITER_KILLED_ALWAYS
from shardsmith.placement import order_key
from shardsmith.rows import ManifestRow, PlacedRow
from shardsmith.shard_writer.shard_file import write_shard_file
from shardsmith.shard_writer.shard_worker import ShardWriterPool
from shardsmith.shard_writer.writer_config import UnlockedFolder, WriterConfig

REPO = Path(__file__).resolve().parents[3]


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


def _placed_rows(image_set, count: int) -> list[PlacedRow]:
    rows = []
    for line, (split, uri, label) in enumerate(image_set.rows[:count], start=2):
        path = str(image_set.path_of(uri))
        row = ManifestRow("m.csv", 0, line, uri, path, split, label, os.path.getsize(path), 0)
        rows.append(PlacedRow(row, 0, 1, order_key(row, 42)))
    return rows


def _writer_pids() -> list[int]:
    return [pid for pid, argv in _children(os.getpid()).items() if b"shardsmith.shard_writer.shard_worker" in argv]


def test_a_writer_that_stops_answering_is_killed_at_its_deadline(label_sorted_set, tmp_path):
    pool = ShardWriterPool(1, shard_deadline_s=2)
    try:
        (writer,) = _writer_pids()
        os.kill(writer, signal.SIGSTOP)
        job = pool.submit(write_shard_file, WriterConfig(UnlockedFolder(str(tmp_path)), "pets"), "train", 0,
                          [_placed_rows(label_sorted_set, 10)])
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
        job = pool.submit(write_shard_file, WriterConfig(UnlockedFolder(str(tmp_path)), "pets"), "train", 0,
                          [_placed_rows(label_sorted_set, 10)])
        error = _within(60, job.result)
    finally:
        pool.close()
    assert isinstance(error, RuntimeError), error
    text = str(error)
    assert "died twice" in text and "train shard 1 of 1" in text and "SIGKILL" in text, text
    assert not any(p.name.endswith("-of-00001") for p in tmp_path.iterdir()), "no final shard after two deaths"


def test_a_reply_the_launcher_cannot_read_fails_its_shard_at_once_and_the_writer_is_replaced(label_sorted_set,
                                                                                            tmp_path, monkeypatch):
    """The writers run other code than the launcher (here: a class only they can import), so the launcher cannot
    unpickle their reply. Each shard fails at once, naming it, and the next shard gets a writer: none waits for
    the shard deadline (60 s here) for a writer that never went back to the pool."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "_only_in_the_writer.py").write_text("class Outcome:\n    pass\n")
    (site / "sitecustomize.py").write_text(
        "import _only_in_the_writer\n"
        "import shardsmith.shard_writer.shard_file as shard_file\n"
        "shard_file.write_shard_file = lambda *job: _only_in_the_writer.Outcome()\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    pool = ShardWriterPool(1, shard_deadline_s=60)
    try:
        config, rows = WriterConfig(UnlockedFolder(str(tmp_path / "out")), "pets"), [_placed_rows(label_sorted_set, 5)]
        for _ in range(2):
            started = time.monotonic()
            error = _within(40, pool.submit(write_shard_file, config, "train", 0, rows).result)
            assert isinstance(error, RuntimeError), error
            text = str(error)
            assert "train shard 1 of 1" in text and "_only_in_the_writer" in text and "run the same command" in text
            assert time.monotonic() - started < 20
    finally:
        pool.close()
    assert not _writer_pids(), "close() leaves no writer behind"
