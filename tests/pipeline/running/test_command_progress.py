"""Progress of the long commands other than a build: `compact` (records copied), `verify` (records checked),
`index` (records indexed), and a night's carry-over (published rows read), counted by the real steps into the
real counters (shardsmith/progress_signal.py) and drawn as a build's line is (pipeline/running/progress.py)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

from pipeline.running import progress

ROOT = Path(__file__).resolve().parents[3]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDSMITH_")}
    env.update(PYTHONPATH=str(ROOT), SHARDSMITH_PROGRESS_INTERVAL="0.02", TF_CPP_MIN_LOG_LEVEL="3")
    return env


def _shardsmith(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pipeline", *map(str, args)], env=_env(), cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    return done


def _counts(pattern: str, output: str) -> list[tuple[int, int]]:
    return [(int(m.group(1)), int(m.group(2))) for m in re.finditer(pattern, output)]


def test_a_night_shows_the_published_rows_it_reads_and_compact_the_records_it_copies(tmp_path, image_set_factory):
    images = image_set_factory(tmp_path / "data", {"cat": {"train": 40, "test": 5}, "dog": {"train": 40, "test": 5}})
    rows = images.manifest.read_text().splitlines()
    first = images.root / "first.csv"
    first.write_text("\n".join(rows[:61]) + "\n")  # the header and 60 rows
    out = tmp_path / "out"
    _shardsmith("build", "--manifest", first, "--output_dir", out, "--name", "p", "--incremental")
    night = _shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "p", "--incremental")
    published = _counts(r"(\d+) of (\d+) published rows read", night.stdout)
    assert published and published[-1] == (60, 60) and all(total == 60 for _, total in published), night.stdout
    compacted = _shardsmith("compact", out)
    copied = _counts(r"shardsmith: compact: (\d+) of (\d+) records copied", compacted.stdout)
    assert copied and {total for _, total in copied} == {90}, compacted.stdout
    assert [n for n, _ in copied] == sorted(n for n, _ in copied)
    assert compacted.stdout.rstrip().splitlines()[-1].startswith("shardsmith: compacted version")


def test_verify_and_index_count_every_record_into_their_line(tmp_path, image_set_factory):
    from pipeline.commands.index import index_build
    from shardsmith.read.dataset_checks import verify

    images = image_set_factory(tmp_path / "data", {"cat": {"train": 30}, "dog": {"train": 25}})
    out = tmp_path / "out"
    _shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "p", "--num_shards", "3")
    for task, run in ((progress.Task("verify", "checked"), lambda: verify(str(out))),
                      (progress.Task("index", "indexed"), lambda: index_build(str(out)))):
        with progress.Progress(io.StringIO(), task=task):
            run()
            counts = progress.Counts.read(os.environ["SHARDSMITH_PROGRESS_DIR"])
        assert (counts.done, counts.total) == (55, 55)
        assert progress.plain_line(counts, 0.0, task) == f"shardsmith: {task.command}: 55 of 55 records {task.verb}"


def test_on_a_terminal_verify_prints_its_shard_lines_above_the_live_line(tmp_path, image_set_factory, on_terminal):
    images = image_set_factory(tmp_path / "data", {"cat": {"train": 30}, "dog": {"train": 25}})
    out = tmp_path / "out"
    _shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "p", "--num_shards", "4")
    env = {k: v for k, v in _env().items() if k != "SHARDSMITH_PROGRESS_INTERVAL"}
    verify = on_terminal(["verify", str(out)], env)
    terminal = verify.terminal
    assert verify.returncode == 0, terminal[-3000:]
    lines = re.split(r"[\r\n]", terminal)
    shard_lines = [line for line in lines if re.search(r"ok +p-train", line)]
    assert len(shard_lines) == 4, terminal
    assert all(re.match(r" *ok +p-train", line) for line in shard_lines), shard_lines
    assert any(line.startswith("shardsmith verify ") for line in lines), terminal  # not glued to the live line
    assert "OK: 55 of 55 records" in terminal
