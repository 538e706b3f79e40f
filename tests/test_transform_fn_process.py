"""A local build writes transform_fn from a process of its own (pipeline/running/transform_fn_process.py), started at
launch so that TensorFlow's import overlaps the build. The launcher never imports TensorFlow; the process's
failures come back as one line; it does not outlive the build."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.running.transform_fn_process import SOCKET_NAME, transform_fn_process
from transforms.labels import Vocabulary

REPO = Path(__file__).resolve().parents[1]


def _processes_serving(address: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if address.encode() in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_a_local_build_never_imports_tensorflow_in_the_launcher(label_sorted_set, tmp_path):
    out = tmp_path / "out"
    script = (
        "import sys, json\n"
        "from pipeline import cli\n"
        f"code = cli.main(['build', '--manifest', {str(label_sorted_set.manifest)!r}, '--output_dir', "
        f"{str(out)!r}, '--name', 'pets', '--num_shards', '1'])\n"
        "print(json.dumps({'code': code, 'tensorflow': 'tensorflow' in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=600)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "tensorflow": False}, done.stderr
    import tensorflow as tf
    import tensorflow_transform as tft

    from shardsmith import published_dir

    layer = tft.TFTransformOutput(published_dir(out)).transform_features_layer()
    ids = layer({"label": tf.constant(["dog", "cat", "emu", "yak"])})["label_id"].numpy().tolist()
    assert ids == [1, 0, 2, -1]


def test_the_process_reports_a_failure_in_one_line_and_serves_the_next_request(tmp_path):
    vocabulary = Vocabulary(("a", "b"), "train", (3, 4))
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with transform_fn_process() as write:
        with pytest.raises(RuntimeError, match="tf.transform could not write transform_fn: ") as failed:
            write(vocabulary, str(blocker / "out"), str(tmp_path / "tmp"))
        assert "\n" not in str(failed.value)
        written = write(vocabulary, str(tmp_path / "out"), str(tmp_path / "tmp"))
    assert written == str(tmp_path / "out")
    assert (tmp_path / "out" / "transform_fn" / "saved_model.pb").exists()
    assert (tmp_path / "out" / "transform_fn" / "assets" / "labels").read_text().split() == ["a", "b"]


def test_the_process_and_its_socket_are_gone_when_the_build_ends():
    with transform_fn_process() as write:
        assert Path(write.address).name == SOCKET_NAME
        with pytest.raises(RuntimeError, match="no such request"):  # it answers: it is up
            write.wait("0" * 64)
        assert _processes_serving(write.address)
        clone = pickle.loads(pickle.dumps(write))  # a Beam step holds the client: it must travel
        assert clone == write
    assert not _processes_serving(write.address)
    assert not Path(write.address).parent.exists()


def test_a_retried_request_is_done_once_and_waits_for_the_same_work(tmp_path):
    vocabulary = Vocabulary(("cat", "dog"), "train", (1, 1))
    with transform_fn_process() as writer:
        first = writer.start(vocabulary, str(tmp_path / "out"), str(tmp_path / "tmp"))
        again = writer.start(vocabulary, str(tmp_path / "out"), str(tmp_path / "tmp"))
        assert first == again
        assert writer.wait(again) == writer.wait(first) == str(tmp_path / "out")
        with pytest.raises(RuntimeError, match="no such request"):
            writer.wait("0" * 64)
    assert (tmp_path / "out" / "transform_fn" / "assets" / "labels").read_text().split() == ["cat", "dog"]
