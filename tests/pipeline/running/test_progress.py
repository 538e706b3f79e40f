"""Progress of a local build: a real build whose stderr is not a terminal prints plain progress lines (the
interval made small) whose counts reach the total before the summary; the terminal line is drawn by tqdm on a
stream that says it is a terminal. The counters are the real ones the build's steps write
(shardsmith/progress_signal.py)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from pipeline.running import progress
from shardsmith import progress_signal

ROOT = Path(__file__).resolve().parents[3]
LINE = re.compile(r"shardsmith: progress: (\d+) rows read(?:; (\d+)(?: of (\d+))? images written)?")


def test_a_real_build_prints_progress_that_reaches_the_total_before_the_summary(tmp_path, image_set_factory):
    images = image_set_factory(tmp_path / "data", {"cat": {"train": 30, "test": 5}, "dog": {"train": 30, "test": 5}})
    (images.root / "img/cat/bad.jpg").write_bytes(b"not an image")
    with images.manifest.open("a") as f:
        f.write("train,img/cat/bad.jpg,cat\n")  # placed, then rejected when read: still counted as done
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDSMITH_")}
    env.update(PYTHONPATH=str(ROOT), SHARDSMITH_PROGRESS_INTERVAL="0.05")
    done = subprocess.run([sys.executable, "-m", "pipeline", "build", "--manifest", str(images.manifest),
                           "--output_dir", str(tmp_path / "out"), "--name", "p"], env=env, cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 0, done.stdout
    lines = done.stdout.splitlines()
    shown = [(i, LINE.match(line)) for i, line in enumerate(lines) if LINE.match(line)]
    assert len(shown) >= 2, done.stdout
    summary_at = next(i for i, line in enumerate(lines) if line.startswith("shardsmith: built 'p'"))
    assert max(i for i, _ in shown) < summary_at
    last = shown[-1][1]
    assert last.groups() == ("71", "71", "71"), lines[shown[-1][0]]  # 70 images and the bad one
    assert "(1 rejected)" in lines[shown[-1][0]]
    written = [int(m.group(2)) for _, m in shown if m.group(2)]
    assert written == sorted(written)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _count(folder: Path, counter: str, n: int) -> None:
    with (folder / counter).open("ab") as f:
        f.write(b"\x01" * n)


def test_on_a_terminal_a_live_line_shows_counts_rate_and_is_cleared(monkeypatch, tmp_path):
    monkeypatch.delenv(progress_signal.PROGRESS_DIR_ENV, raising=False)
    stream = _Terminal()
    with progress.Progress(stream) as shown:
        folder = Path(os.environ[progress_signal.PROGRESS_DIR_ENV])
        progress_signal.add(progress_signal.ROWS_READ, 500)
        progress_signal.set_total(400)
        _count(folder, progress_signal.IMAGES_WRITTEN, 100)
        shown._view.show(progress.Counts.read(str(folder)))
        drawn = stream.getvalue()
    assert progress_signal.PROGRESS_DIR_ENV not in os.environ and not folder.exists()
    assert "\r" in drawn and "100/400" in drawn and "500 rows read" in drawn
    assert stream.getvalue().endswith("\r") or stream.getvalue().endswith("\x1b[A")  # cleared, not left behind


def test_plain_lines_are_paced_and_say_time_left():
    assert progress.plain_line(progress.Counts(1200, 790, 10, 1200), 100.0) == (
        "shardsmith: progress: 1200 rows read; 800 of 1200 images written (10 rejected), 100 images/s, "
        "about 4 s left")
    assert progress.plain_line(progress.Counts(50), 0.0) == "shardsmith: progress: 50 rows read"
    stream = io.StringIO()
    lines = progress._LogLines(stream, interval=3600)
    for n in range(1, 6):
        lines.show(progress.Counts(n))
    lines.close(progress.Counts(5))
    assert stream.getvalue().splitlines() == ["shardsmith: progress: 1 rows read", "shardsmith: progress: 5 rows read"]


def test_the_log_interval_is_a_few_seconds_unless_set(monkeypatch):
    monkeypatch.delenv(progress.INTERVAL_ENV, raising=False)
    assert progress.non_tty_interval() == progress.NON_TTY_INTERVAL_S <= 10
    monkeypatch.setenv(progress.INTERVAL_ENV, "0.5")
    assert progress.non_tty_interval() == 0.5
    monkeypatch.setenv(progress.INTERVAL_ENV, "soon")
    assert progress.non_tty_interval() == progress.NON_TTY_INTERVAL_S


def test_on_a_real_terminal_the_line_is_drawn_and_tensorflow_stays_quiet(tmp_path, image_set_factory, on_terminal):
    """A build whose stderr is a sized pseudo-terminal: tqdm's line is drawn, log lines print above it, and
    TensorFlow's load-time lines (imported mid-build, with descriptor 2 captured) do not get through glued to
    the line."""
    images = image_set_factory(tmp_path / "data", {"cat": {"train": 20, "test": 4}, "dog": {"train": 20, "test": 4}})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SHARDSMITH_", "TF_CPP_"))}
    env["PYTHONPATH"] = str(ROOT)
    build = on_terminal(["build", "--manifest", str(images.manifest), "--output_dir", str(tmp_path / "out"),
                         "--name", "t"], env, pipe_stdout=True)
    terminal, out = build.terminal, build.stdout
    assert build.returncode == 0, terminal[-3000:]
    assert "shardsmith: writing" in terminal and "48/48" in terminal and "rows read" in terminal
    assert "INFO wrote train shard" in terminal
    assert "InitializeLog" not in terminal and "cuda" not in terminal.lower()
    assert "shardsmith: progress:" not in terminal  # the plain lines are for logs
    assert out.startswith("shardsmith: built 't'")
