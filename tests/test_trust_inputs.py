"""Never lose users' data, never trust their inputs: a dataset name is exactly what it looks like, and shard
writer processes die with the build that started them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


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
    from pipeline.options import UsageError
    from pipeline.preflight import resolve_sources

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
