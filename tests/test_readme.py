"""The README's promises that code can check: its tf.data snippet reads a real build, and the quick start's
commands exist."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from PIL import Image

README = Path(__file__).parent.parent / "README.md"


def readme_snippet(marker: str) -> str:
    text = README.read_text()
    after = text[text.index(f"<!-- snippet: {marker}"):]
    return re.search(r"```python\n(.*?)```", after, re.S).group(1)


def test_the_read_snippet_yields_batches_of_images_and_labels(built):
    code = readme_snippet("read").replace('out = "demo/tfrecords"', f"out = {str(built)!r}")
    assert f"out = {str(built)!r}" in code
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    images, labels = next(iter(scope["dataset"]))
    assert images.shape == (32, 224, 224, 3)
    assert labels.shape == (32,)
    assert set(labels.numpy().tolist()) <= {0, 1, 2}
    total = sum(int(b[1].shape[0]) for b in scope["dataset"])
    assert total == 225  # every training record, once


def test_quick_start_is_two_launch_commands():
    text = README.read_text()
    block = text[text.index("## Quick start"):]
    commands = re.search(r"```bash\n(.*?)```", block, re.S).group(1).strip().splitlines()
    assert [c.split("#")[0].strip() for c in commands] == ["bash launch.sh demo", "bash launch.sh test"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "bash launch.sh test" in ci


@pytest.mark.parametrize("kind", ["multi_label", "detection", "segmentation", "features"])
def test_each_worked_example_builds_and_loads(kind, tmp_path, shardsmith, monkeypatch):
    """The README's example for a task, as written: its manifest lines (with made-up images at their paths),
    its commands, and its load() snippet."""
    text = README.read_text()
    after = text[text.index(f"<!-- example: {kind} "):]
    manifest_text = re.search(r"```\n(.*?)```", after, re.S).group(1)
    commands = re.search(r"```bash\n(.*?)```", after, re.S).group(1).replace("\\\n", " ")
    code = re.search(r"```python\n(.*?)```", after, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    rows = [line.split(",") for line in manifest_text.splitlines() if line and not line.startswith("split,")]
    for index, fields in enumerate(rows):
        path = tmp_path / fields[1]
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (64, 48), (40 * index, 90, 160)).save(path, "JPEG")
        if kind == "segmentation":
            (tmp_path / fields[3]).parent.mkdir(parents=True, exist_ok=True)
            Image.new("L", (64, 48), 2).save(tmp_path / fields[3])
    for line in commands.strip().splitlines():
        command, _, comment = line.partition("#")
        args = shlex.split(command)
        assert args[0] == ".venv/bin/shardsmith", line
        manifest = args[args.index("--manifest") + 1] if args[1] == "build" else args[2]
        (tmp_path / manifest).write_text(manifest_text)
        result = shardsmith(*args[1:])
        assert result.code == 0, (line, result.err)
        if "prints:" in comment:
            assert result.out.strip().splitlines()[-1] == comment.split("prints:")[1].strip()
    exec(compile(code, "README.md", "exec"), {})
