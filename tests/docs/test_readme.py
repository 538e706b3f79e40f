"""What the README and docs/ show, run: every command, snippet and sample output, and every table of keys or
flags, against a real build or the code; and the README's shape (size, table of contents, links).

Each fenced block in README.md and docs/*.md sits under a marker naming the test that runs it:
`<!-- test: NAME ARGS -->` (the blocks up to the next marker or heading belong to it), or
`<!-- not-run: REASON -->` for a block that is no command, snippet or output. `HANDLERS` maps each NAME to the
blocks it expects and the function that runs them; `test_every_block_is_run_by_a_test` fails on a block
without a marker, so a snippet that moves between files keeps its test and a new one cannot go untested.
docs/design.md is written elsewhere and shows no commands: only its links are checked.

Most blocks run against the demo dataset, built once by the quick start's own `bash launch.sh demo` into a
temporary folder that stands for the checkout (its `demo/` folder). Sample outputs are compared with real
ones after masking what changes from run to run: timings, build ids, the temporary folder.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
# Linked from here, written by someone else: a missing one does not fail the link check until it exists.
WRITTEN_ELSEWHERE = {DOCS / "design.md"}
README_MAX_BYTES = 20 * 1024
DOCUMENTS = [README] + sorted(p for p in DOCS.glob("*.md") if p not in WRITTEN_ELSEWHERE)

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
FENCE_END = re.compile(r"^\s*```\s*$")
MARKER = re.compile(r"^\s*<!-- (test|not-run): (.*?) -->\s*$")
HEADING = re.compile(r"^(#{1,6}) (.*)$")


# ---------------------------------------------------------------------------------------------------------
# Reading the documents


@dataclass
class Block:
    lang: str
    text: str
    line: int


@dataclass
class Group:
    """A marker and what follows it up to the next marker or heading: its fenced blocks and its raw text."""

    doc: Path
    line: int
    name: str
    args: list[str]
    blocks: list[Block] = field(default_factory=list)
    text: str = ""

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{' '.join([self.name, *self.args])}"


def parse(doc: Path) -> tuple[list[Group], list[Block]]:
    """The document's marker groups, and the fenced blocks that no marker covers."""
    lines = doc.read_text().splitlines()
    groups: list[Group] = []
    orphans: list[Block] = []
    current: Group | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = FENCE.match(line)
        if fence:  # outside a block, any fence opens one
            indent, start, body = fence.group(1), i + 1, []
            i += 1
            while not FENCE_END.match(lines[i]):
                body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
                i += 1
            block = Block(fence.group(2), "\n".join(body) + "\n", start)
            if current is None:
                orphans.append(block)
            else:
                current.blocks.append(block)
                current.text += "\n".join(lines[start - 1:i + 1]) + "\n"
            i += 1
            continue
        if HEADING.match(line):
            current = None
        marker = MARKER.match(line)
        if marker:
            kind, rest = marker.groups()
            words = rest.split()
            current = (Group(doc, i + 1, words[0], words[1:]) if kind == "test"
                       else Group(doc, i + 1, "not-run", [rest]))
            groups.append(current)
        elif current is not None:
            current.text += line + "\n"
        i += 1
    return groups, orphans


def all_groups() -> list[Group]:
    return [g for doc in DOCUMENTS for g in parse(doc)[0] if g.name != "not-run"]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every row of the Markdown tables in `text` (header and separator rows left out)."""
    rows, header_next = [], True
    for line in text.splitlines():
        if not line.startswith("|"):
            header_next = True
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header_next:
            header_next = False
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        rows.append(cells)
    return rows


def tables(text: str) -> list[list[list[str]]]:
    """Each Markdown table in `text`, as its rows (see table_rows)."""
    found, current = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line)
        elif current:
            found.append(table_rows("\n".join(current)))
            current = []
    return found


def ticked(text: str) -> list[str]:
    return re.findall(r"`([^`]+)`", text)


def commands_of(block: Block) -> list[str]:
    """The block's commands: continuation lines joined, comments kept (after `#`)."""
    return [c.strip() for c in block.text.replace("\\\n", " ").splitlines() if c.strip()]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    in_fence = False
    for line in doc.read_text().splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        heading = HEADING.match(line)
        if heading and not in_fence:
            base = slug(heading.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


# ---------------------------------------------------------------------------------------------------------
# Running what the documents show


def normalize(text: str, *roots: Path) -> str:
    """Masks what differs from run to run: temporary folders (paths then start at the checkout), build ids,
    timings and speeds."""
    for root in roots:
        text = text.replace(f"{root}/", "")
    text = re.sub(r"\d{8}T\d{6}Z-[0-9a-f]{8}", "<build id>", text)
    text = re.sub(r"\bin \d+(\.\d+)? s\b", "in <t> s", text)
    text = re.sub(r"\(\d+ records/s\)", "(<n> records/s)", text)
    text = re.sub(r"(?m)^  speed .*$", "  speed <masked>", text)
    return text


def launch(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    """`bash launch.sh ARGS` with no SHARDSMITH_* setting inherited from this process."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SHARDSMITH_")}
    clean.update(env or {})
    return subprocess.run(["bash", str(ROOT / "launch.sh"), *args], cwd=cwd, env=clean, capture_output=True,
                          text=True, timeout=600)


def launch_words(command: str) -> list[str]:
    words = shlex.split(command.partition(" #")[0])
    assert words[:2] == ["bash", "launch.sh"], command
    return words[2:]


def shardsmith_words(command: str) -> list[str]:
    words = shlex.split(command.partition(" #")[0])
    assert words[0] == "shardsmith", command
    return words[1:]


def console(block: Block) -> list[tuple[str, list[str]]]:
    """A console block's (command after `$ `, continuation lines joined; the output lines that follow)."""
    runs: list[tuple[str, list[str]]] = []
    lines = block.text.splitlines()
    i = 0
    while i < len(lines):
        assert lines[i].startswith("$ "), (block.line, lines[i])
        command = lines[i][2:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        output = []
        i += 1
        while i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        while output and not output[-1].strip():
            output.pop()
        runs.append((command, output))
    return runs


PARSE_ONLY = """
import argparse, runpy, sys

class Parsed(Exception):
    pass

inside = []
original_args, original_known = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args

def parse_args(self, *args, **kwargs):
    inside.append(self)
    original_args(self, *args, **kwargs)
    raise Parsed

def parse_known_args(self, *args, **kwargs):
    result = original_known(self, *args, **kwargs)
    if not inside:
        raise Parsed
    return result

argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args = parse_args, parse_known_args
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except Parsed:
    sys.exit(0)
sys.exit("the script finished without parsing its arguments")
"""


def assert_script_parses(command: str) -> None:
    """Runs a `python SCRIPT ARGS` command up to its argument parsing only: the flags shown must still exist
    and hold valid values (benchmarks take minutes; this takes a second)."""
    words = shlex.split(command.partition(" #")[0])
    assert words[0] == "python" and (ROOT / words[1]).is_file(), command
    done = subprocess.run([sys.executable, "-c", PARSE_ONLY, *words[1:]], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, (command, done.stderr[-2000:])


def save_image(path: Path, index: int) -> None:
    """A small real image in the format its name says (JPEG, PNG, TIFF, ...)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (64, 48), (40 * index % 256, 90, 160)).save(path)


def build_help(request) -> str:
    capsys = request.getfixturevalue("capsys")
    run = request.getfixturevalue("shardsmith")
    with pytest.raises(SystemExit) as exited:
        run("build", "--help")
    assert exited.value.code == 0
    return capsys.readouterr().out


@pytest.fixture(scope="session")
def demo(tmp_path_factory) -> SimpleNamespace:
    """The quick start's `bash launch.sh demo`, run as a user would (into a temporary checkout's demo/)."""
    root = tmp_path_factory.mktemp("checkout")
    done = launch("demo", env={"SHARDSMITH_DEMO_DIR": str(root / "demo"), "SHARDSMITH_VENV": sys.prefix})
    assert done.returncode == 0, done.stderr[-3000:]
    out = root / "demo" / "tfrecords"
    metadata = json.loads((out / "metadata.json").read_text())
    return SimpleNamespace(root=root, out=out, stdout=done.stdout, metadata=metadata,
                           build=out / metadata["build_dir"])


HANDLERS: dict = {}


def handles(name: str, *langs: str):
    """Registers the test for marker NAME; `langs`: the languages of the blocks it runs, in order."""

    def register(function):
        HANDLERS[name] = (langs, function)
        return function

    return register


# ---------------------------------------------------------------------------------------------------------
# The tests behind the markers


@handles("why-figures")
def why_figures(group: Group, request) -> None:
    """The mixing table is the benchmark's output, figure for figure."""
    command = re.search(r"`(python tests/benchmarks/shuffle_mix\.py[^`]*)`", group.text).group(1)
    words = shlex.split(command)
    done = subprocess.run([sys.executable, *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "100000 rows, 10 labels (sorted manifest), 64 shards" in lines[0]
    assert "interleave(cycle_length=4) + shuffle(1024) + batch(32)" in lines[0]
    assert "100,000 rows, 10 labels, 64 shards" in group.text
    measured = [line.split()[-2:] for line in lines[2:6]]
    shown = [[cell.strip("*") for cell in row[1:]] for row in table_rows(group.text)]
    assert shown == measured


@handles("quick-start", "bash")
def quick_start(group: Group, request) -> None:
    commands = [c.partition("#")[0].strip() for c in commands_of(group.blocks[0])]
    assert commands == ["bash launch.sh demo", "bash launch.sh test"]
    request.getfixturevalue("demo")  # runs `bash launch.sh demo`
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash launch.sh test" in ci.splitlines()  # CI runs the second


@handles("demo-summary", "")
def demo_summary(group: Group, request) -> None:
    demo = request.getfixturevalue("demo")
    shown = normalize(group.blocks[0].text).strip()
    assert shown in normalize(demo.stdout, demo.root), demo.stdout


@handles("build-commands", "bash")
def build_commands(group: Group, request) -> None:
    """Each command on made-up inputs of the kind it names: a CSV, a folder of class folders, JSONL parts."""
    tmp_path, run = request.getfixturevalue("tmp_path"), request.getfixturevalue("shardsmith")
    request.getfixturevalue("monkeypatch").chdir(tmp_path)
    labels = ("daisy", "rose", "tulip")
    for command in commands_of(group.blocks[0]):
        args = shardsmith_words(command)
        manifest = args[args.index("--manifest") + 1]
        if manifest.endswith("/"):
            for i in range(15):
                save_image(tmp_path / manifest / labels[i % 3] / f"{i:03d}.jpg", i)
        elif manifest.endswith(".csv"):
            lines = ["split,image_uri,label"]
            for i in range(15):
                save_image(tmp_path / "images" / f"{i:03d}.png", i)
                lines.append(f"{('train', 'validation', 'test')[i % 5 // 3]},images/{i:03d}.png,{labels[i % 3]}")
            (tmp_path / manifest).write_text("\n".join(lines) + "\n")
        else:
            assert "*" in manifest and manifest.endswith(".jsonl"), manifest
            for part in range(2):
                path = tmp_path / manifest.replace("*", str(part))
                rows = []
                for i in range(part, 16, 2):
                    save_image(path.parent / "img" / f"{i:03d}.jpg", i)
                    rows.append(json.dumps({"image_uri": f"img/{i:03d}.jpg", "label": labels[i % 3]}))
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("\n".join(rows) + "\n")
        result = run(*args)
        assert result.code == 0, (command, result.err[-2000:])
        out = tmp_path / args[args.index("--output_dir") + 1]
        assert json.loads((out / "metadata.json").read_text())["num_errors"] == 0


@pytest.fixture(scope="module")
def outcomes_by_block() -> dict[str, list]:
    """What a block's commands gave, by the block's text: a block shown word for word in two documents (README.md
    and docs/building.md) runs once in this module and both its markers check the outcome."""
    return {}


@handles("tfrecorder", "bash")
def tfrecorder(group: Group, request) -> None:
    """Run as shown from a checkout: a temporary folder whose tests/data/tfrecorder is the real one."""
    outcomes = request.getfixturevalue("outcomes_by_block")
    text = group.blocks[0].text
    if text not in outcomes:
        tmp_path, run = request.getfixturevalue("tmp_path"), request.getfixturevalue("shardsmith")
        request.getfixturevalue("monkeypatch").chdir(tmp_path)
        (tmp_path / "tests" / "data").mkdir(parents=True)
        (tmp_path / "tests" / "data" / "tfrecorder").symlink_to(ROOT / "tests" / "data" / "tfrecorder")
        ran = []
        for command in commands_of(group.blocks[0]):
            args = shardsmith_words(command)
            result = run(*args)
            assert result.code == 0, (command, result.err[-2000:])
            metadata = json.loads((tmp_path / args[args.index("--output_dir") + 1] / "metadata.json").read_text())
            ran.append((command, metadata["num_examples"], metadata["num_errors"]))
        outcomes[text] = ran  # only once every command ran
    assert outcomes[text] and all((examples, errors) == (6, 0) for _, examples, errors in outcomes[text]), \
        outcomes[text]


@handles("load", "python")
def load_snippet(group: Group, request) -> None:
    demo = request.getfixturevalue("demo")
    request.getfixturevalue("monkeypatch").chdir(demo.root)
    fitted = []

    class Model:  # the snippet's `model`: takes what fit() gets and reads one batch of it
        def fit(self, dataset, epochs):
            images, labels = next(iter(dataset))
            fitted.append((tuple(images.shape), images.dtype.name, tuple(labels.shape), epochs))

    exec(compile(group.blocks[0].text, str(group.doc), "exec"), {"model": Model()})
    assert fitted == [((32, 224, 224, 3), "float32", (32,), 10)]


@handles("read", "python")
def read_snippet(group: Group, request) -> None:
    """The tf.data snippet, unchanged, from the checkout that holds the demo build."""
    demo = request.getfixturevalue("demo")
    request.getfixturevalue("monkeypatch").chdir(demo.root)
    scope: dict = {}
    exec(compile(group.blocks[0].text, str(group.doc), "exec"), scope)
    images, labels = next(iter(scope["dataset"]))
    assert images.shape == (32, 224, 224, 3)
    assert labels.shape == (32,)
    assert set(labels.numpy().tolist()) <= {0, 1, 2}
    total = sum(int(b[1].shape[0]) for b in scope["dataset"])
    assert total == demo.metadata["splits"]["train"]["num_examples"] == 94  # every training record, once


def _demo_for_snippet(request, framework: str):
    """The demo build, the working folder set to it (as the README's snippets assume); skipped without
    `framework` installed."""
    pytest.importorskip(framework)
    demo = request.getfixturevalue("demo")
    request.getfixturevalue("monkeypatch").chdir(demo.root)
    return demo


@handles("torch", "python")
def torch_snippet(group: Group, request) -> None:
    """Two epochs of the PyTorch snippet on the demo build: every training record once an epoch."""
    demo = _demo_for_snippet(request, "torch")
    steps = []

    def train_step(images, labels):
        steps.append((tuple(images.shape), str(images.dtype), len(labels), str(labels.dtype)))

    exec(compile(group.blocks[0].text, str(group.doc), "exec"), {"train_step": train_step})
    assert steps[0] == ((32, 3, 224, 224), "torch.float32", 32, "torch.int64")
    assert sum(step[2] for step in steps) == 2 * demo.metadata["splits"]["train"]["num_examples"] == 2 * 94


@handles("torch-resume", "python")
def torch_resume_snippet(group: Group, request) -> None:
    """The resume snippet on the demo build, after the PyTorch snippet's dataset: stopped after two batches, a new
    StatefulDataLoader given the saved state reads the rest of the epoch, the training split's labels once in all."""
    demo = _demo_for_snippet(request, "torchdata")
    import torch

    from shardsmith.torch import StreamingShardDataset

    labels_seen = []
    scope = {"torch": torch, "dataset": StreamingShardDataset("demo/tfrecords", "train", image_size=32),
             "train_step": lambda images, labels: labels_seen.append(labels.tolist())}
    exec(compile(group.blocks[0].text, str(group.doc), "exec"), scope)
    sizes = [len(labels) for labels in labels_seen]
    assert sizes[:2] == [32, 32] and sum(sizes) == 94, sizes  # two batches, then the other 30 of 94
    counts = demo.metadata["splits"]["train"]["label_counts"]
    assert sorted(label for labels in labels_seen for label in labels) == sorted(
        demo.metadata["labels"].index(name) for name, n in counts.items() for _ in range(n))


@handles("grain", "python")
def grain_snippet(group: Group, request) -> None:
    _demo_for_snippet(request, "grain")
    shapes = []

    def train_step(state, batch):
        shapes.append((batch["image"].shape, batch["image"].dtype.name, batch["label"].dtype.name))
        return state + len(batch["label"])

    scope = {"train_step": train_step, "state": 0}
    exec(compile(group.blocks[0].text, str(group.doc), "exec"), scope)
    assert shapes[0] == ((32, 224, 224, 3), "uint8", "int64")
    assert scope["state"] == 2 * 94, "every training record once an epoch"


@handles("tfds", "python")
def tfds_snippet(group: Group, request) -> None:
    demo = request.getfixturevalue("demo")
    request.getfixturevalue("monkeypatch").chdir(demo.root)
    scope: dict = {}
    code = group.blocks[0].text
    exec(compile(code, str(group.doc), "exec"), scope)
    image, label = next(iter(scope["dataset"]))
    assert image.dtype.name == "uint8" and image.shape[-1] == 3 and label.dtype.is_integer
    expression, _, shown = code.strip().splitlines()[-1].partition("#")
    assert eval(expression, scope) == ast.literal_eval(shown.strip())


@handles("incremental-commands", "bash")
def incremental_commands(group: Group, request) -> None:
    """A first build, then the same command the next night on a manifest that gained rows and lost one: the second
    build reads only the new rows, and `versions` lists both."""
    tmp_path, run = request.getfixturevalue("tmp_path"), request.getfixturevalue("shardsmith")
    request.getfixturevalue("monkeypatch").chdir(tmp_path)
    build, versions = (shardsmith_words(command) for command in commands_of(group.blocks[0]))
    manifest = tmp_path / build[build.index("--manifest") + 1]
    rows = []
    for i in range(24):
        save_image(tmp_path / "lists" / "images" / f"{i:03d}.png", i)
        rows.append(f"{('train', 'validation', 'test')[i % 6 // 4]},images/{i:03d}.png,{('daisy', 'rose')[i % 2]}")
    out = tmp_path / build[build.index("--output_dir") + 1]
    for lines in (rows[:20], rows[1:]):
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text("split,image_uri,label\n" + "\n".join(lines) + "\n")
        result = run(*build)
        assert result.code == 0, result.err[-2000:]
    change = json.loads((out / "metadata.json").read_text())["incremental"]
    assert (change["num_carried_rows"], change["num_added_rows"], change["num_removed_rows"]) == (19, 4, 1)
    listed = run(*versions)
    assert listed.code == 0 and len(listed.out.splitlines()) == 2 and "+4 -1 records" in listed.out


@handles("tag-commands", "bash")
def tag_commands(group: Group, request) -> None:
    """The tag command (its ID the folder's first version) keeps that version through two builds with
    --keep_builds 1 --keep_days 0, and `versions` shows the tag; after the untag command the next build retires it,
    and a reader asking for it says it is no longer kept."""
    from shardsmith import records

    tmp_path, run = request.getfixturevalue("tmp_path"), request.getfixturevalue("shardsmith")
    request.getfixturevalue("monkeypatch").chdir(tmp_path)
    tag, untag = (shardsmith_words(command) for command in commands_of(group.blocks[0]))
    out, name = tmp_path / tag[1], tag[3]
    assert untag == ["untag", tag[1], name]
    rows = []
    for i in range(12):
        save_image(tmp_path / "images" / f"{i:03d}.png", i)
        rows.append(f"train,images/{i:03d}.png,{('daisy', 'rose')[i % 2]}")

    def build(count: int) -> str:
        (tmp_path / "m.csv").write_text("split,image_uri,label\n" + "\n".join(rows[:count]) + "\n")
        built = run("build", "--manifest", "m.csv", "--output_dir", out, "--name", "flowers", "--overwrite",
                    "--keep_builds", "1", "--keep_days", "0")
        assert built.code == 0, built.err[-2000:]
        return json.loads((out / "metadata.json").read_text())["build_id"]

    pinned = build(8)
    assert run(*tag[:2], pinned, name).code == 0
    build(10)
    build(12)
    assert len(records(out, "train", version=name)) == len(records(out, "train", version=pinned)) == 8
    listed = run("versions", out)
    (line,) = [line for line in listed.out.splitlines() if line.startswith(pinned)]
    assert listed.code == 0 and line.endswith(f"tags: {name}"), listed.out
    assert run(*untag).code == 0
    build(12)
    with pytest.raises(FileNotFoundError, match=f"version {pinned} is no longer kept"):
        records(out, "train", version=pinned)


@handles("compact-commands", "bash")
def compact_commands(group: Group, request) -> None:
    """The command after a first build and two incremental nights (three generations): with --compact_after 7 it
    writes nothing; with --compact_after 2 the same command compacts into one generation."""
    tmp_path, run = request.getfixturevalue("tmp_path"), request.getfixturevalue("shardsmith")
    request.getfixturevalue("monkeypatch").chdir(tmp_path)
    (command,) = (shardsmith_words(command) for command in commands_of(group.blocks[0]))
    out = tmp_path / command[1]
    rows = []
    for i in range(30):
        save_image(tmp_path / "images" / f"{i:03d}.png", i)
        rows.append(f"train,images/{i:03d}.png,{('daisy', 'rose')[i % 2]}")
    for night in (20, 25, 30):
        (tmp_path / "m.csv").write_text("split,image_uri,label\n" + "\n".join(rows[:night]) + "\n")
        built = run("build", "--manifest", "m.csv", "--output_dir", out, "--name", "flowers", "--incremental")
        assert built.code == 0, built.err[-2000:]
    published = (out / "metadata.json").read_text()
    done = run(*command)
    assert done.code == 0 and (out / "metadata.json").read_text() == published, done.err[-2000:]
    done = run(*command[:command.index("--compact_after") + 1], "2")
    assert done.code == 0, done.err[-2000:]
    assert json.loads((out / "metadata.json").read_text())["incremental"]["generations"] == 1


@handles("check-commands", "bash")
def check_commands(group: Group, request) -> None:
    demo, run = request.getfixturevalue("demo"), request.getfixturevalue("shardsmith")
    request.getfixturevalue("monkeypatch").chdir(demo.root)
    for command in commands_of(group.blocks[0]):
        result = run(*shardsmith_words(command))
        assert result.code == 0, (command, result.out[-2000:], result.err[-2000:])


def shown_output_matches(request, block: Block, root: Path, prepare=None) -> None:
    """Runs each `$ shardsmith ...` of a console block in `root` and compares its output with the one shown
    (lines shown as `...` stand for any lines)."""
    run = request.getfixturevalue("shardsmith")
    request.getfixturevalue("monkeypatch").chdir(root)
    for command, shown in console(block):
        result = run(*shardsmith_words(command))
        actual = normalize(result.out, root).strip().splitlines()
        pieces, piece = [], []
        for line in shown + ["  ..."]:
            if line.strip() == "...":
                pieces.append(normalize("\n".join(piece), root).splitlines())
                piece = []
            else:
                piece.append(line)
        position = 0
        for piece in pieces:
            matches = [i for i in range(position, len(actual) - len(piece) + 1) if actual[i:i + len(piece)] == piece]
            assert matches, (command, piece, actual)
            position = matches[0] + len(piece)
        if len(pieces) == 1:
            assert actual == pieces[0], command
        assert result.code == (1 if "FAILED" in "\n".join(shown) else 0), (command, result.err[-2000:])


@handles("verify-ok", "console")
def verify_ok(group: Group, request) -> None:
    shown_output_matches(request, group.blocks[0], request.getfixturevalue("demo").root)


@handles("verify-bitflip", "console")
def verify_bitflip(group: Group, request) -> None:
    """The demo build copied, one bit flipped in the data of the record the sample output names."""
    demo, tmp_path = request.getfixturevalue("demo"), request.getfixturevalue("tmp_path")
    out = tmp_path / "demo" / "tfrecords"
    shutil.copytree(demo.out, out)
    shard, record, at = re.search(r"(\S+) record (\d+): record data checksum mismatch \(at byte (\d+)\)",
                                  group.blocks[0].text).groups()
    path = out / demo.metadata["build_dir"] / shard
    data = bytearray(path.read_bytes())
    offset = 0
    for _ in range(int(record)):
        (length,) = struct.unpack("<Q", data[offset:offset + 8])
        offset += 8 + 4 + length + 4
    (length,) = struct.unpack("<Q", data[offset:offset + 8])
    data[offset + 12 + length // 2] ^= 0x10
    path.write_bytes(bytes(data))
    shown_output_matches(request, group.blocks[0], tmp_path)


@handles("inspect", "console")
def inspect_output(group: Group, request) -> None:
    shown_output_matches(request, group.blocks[0], request.getfixturevalue("demo").root)


@handles("options-table")
def options_table(group: Group, request) -> None:
    """Every flag in the table is one `shardsmith build --help` lists; with `all`, the table lists them all."""
    listed = {flag for row in table_rows(group.text) for flag in re.findall(r"`(--\w+)", row[0])}
    known = set(re.findall(r"(?m)^  (--\w+)", build_help(request)))
    assert listed <= known, listed - known
    if group.args == ["all"]:
        assert listed == known, known - listed


@handles("settings-table")
def settings_table(group: Group, request) -> None:
    """Every setting is one `bash launch.sh dataflow --help` documents, under the same flag and variable."""
    done = launch("dataflow", "--help")
    assert done.returncode == 0
    for row in table_rows(group.text):
        for flag in re.findall(r"`(--[\w-]+)", row[0]):
            assert flag in done.stdout, flag
        for variable in re.findall(r"(SHARDSMITH_[A-Z_]+)", row[1]):
            assert variable in done.stdout, variable


@handles("dataflow-commands", "bash")
def dataflow_commands(group: Group, request) -> None:
    """Each command, with its settings from the environment, as a dry run: it must print what it would run."""
    settings = {"SHARDSMITH_PROJECT": "my-project", "SHARDSMITH_REGION": "us-central1",
                "SHARDSMITH_BUCKET": "my-bucket", "SHARDSMITH_DRY_RUN": "true",
                "SHARDSMITH_VENV": str(ROOT / ".no-such-venv")}
    for command in commands_of(group.blocks[0]):
        done = launch(*launch_words(command), env=settings)
        assert done.returncode == 0, (command, done.stderr)
        lines = done.stdout.splitlines()
        assert lines and all(line.split()[0] in ("gcloud", "docker") or line.split()[0].endswith("/python")
                             for line in lines), (command, done.stdout)
    assert not (ROOT / ".no-such-venv").exists()


@handles("dry-run", "bash", "console")
def dry_run(group: Group, request) -> None:
    """The config file as shown, each command as shown: the same output, REPO standing for the checkout."""
    tmp_path = request.getfixturevalue("tmp_path")
    (tmp_path / "shardsmith.env").write_text(group.blocks[0].text)
    for command, shown in console(group.blocks[1]):
        done = launch(*launch_words(command), cwd=tmp_path)
        assert done.returncode == (2 if "missing setting" in "\n".join(shown) else 0), (command, done.stderr)
        actual = (done.stdout + done.stderr).replace(str(ROOT), "REPO")
        assert actual.strip().splitlines() == shown, command


def flex_template_metadata() -> dict:
    """The Flex Template's metadata file, wherever the code keeps it."""
    found = [p for top in ROOT.iterdir() if top.is_dir() and not top.name.startswith(".")
             and top.name not in ("tests", "demo", "docs") for p in top.rglob("flex_template_metadata.json")]
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


@handles("scheduler", "json", "bash")
def scheduler(group: Group, request) -> None:
    """launch.json's parameters pass the template's own checks; gcloud accepts the scheduler command up to
    asking for an account."""
    tmp_path = request.getfixturevalue("tmp_path")
    body = json.loads(group.blocks[0].text)["launchParameter"]
    declared = {p["name"]: p for p in flex_template_metadata()["parameters"]}
    # Beyond the declared ones, the parameters `launch.sh run-template` itself passes (the worker image).
    launched = launch("run-template", "--dry-run", "--project", "my-project", "--region", "us-central1",
                      "--bucket", "my-bucket", "--manifest", "gs://my-bucket/m.csv", "--output_dir", "gs://my-bucket/o",
                      "--name", "n")
    assert launched.returncode == 0, launched.stderr
    passed = set(re.findall(r"(?:^|[~,])(\w+)=", launched.stdout.partition("--parameters=")[2]))
    assert "sdk_container_image" in passed, launched.stdout
    for name, value in body["parameters"].items():
        assert name in declared or name in passed, name
        for regex in declared.get(name, {}).get("regexes", []):
            assert re.fullmatch(regex, value), (name, value, regex)
    required = {name for name, p in declared.items() if not p.get("isOptional")}
    assert required <= set(body["parameters"]), required - set(body["parameters"])
    assert re.fullmatch(r"gs://[\w.-]+/shardsmith/templates/shardsmith-[\w.-]+\.json", body["containerSpecGcsPath"])
    (tmp_path / "launch.json").write_text(group.blocks[0].text)
    (command,) = commands_of(group.blocks[1])
    words = shlex.split(command)
    assert words[:5] == ["gcloud", "scheduler", "jobs", "create", "http"]
    assert "--message-body-from-file=launch.json" in words
    if shutil.which("gcloud") is None:
        pytest.skip("gcloud is not installed: launch.json was checked, the gcloud command was not run")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLOUDSDK_", "GOOGLE_"))}
    env.update({"CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "CLOUDSDK_CORE_DISABLE_PROMPTS": "1",
                "CLOUDSDK_CORE_CHECK_GCE_METADATA": "false"})
    done = subprocess.run(words, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "You do not currently have an active account selected" in done.stderr, done.stderr


@handles("benchmark-commands", "bash")
def benchmark_commands(group: Group, request) -> None:
    for command in commands_of(group.blocks[0]):
        assert_script_parses(command)


@handles("layout", "")
def layout(group: Group, request) -> None:
    """The folder tree names exactly what the demo build holds (shard names by their template)."""
    demo = request.getfixturevalue("demo")
    shard = re.compile(r"^[\w.-]+-(train|validation|test)\.tfrecord-\d{5}-of-\d{5}(\.idx)?$")  # and its index
    build_id = re.compile(r"^builds/\d{8}T\d{6}Z-[0-9a-f]{8}/$")

    def kind(name: str) -> str:
        found = shard.match(name)
        return "SHARD" + (found.group(2) or "") if found else "builds/<id>/" if build_id.match(name) else name

    top, inside = set(), set()
    for line in group.blocks[0].text.splitlines()[1:]:
        entry = re.match(r"^( +)(\S.*?)(?: {2,}.*)?$", line)
        if entry.group(2) == "...":
            continue
        for name in entry.group(2).split(", "):
            (top if len(entry.group(1)) == 2 else inside).add(kind(name))
    assert top == {p.name + ("/" if p.is_dir() else "") for p in demo.out.iterdir()} - {"builds/"} | {"builds/<id>/"}
    actual = {kind(p.name) if shard.match(p.name) else p.name + ("/" if p.is_dir() else "")
              for p in demo.build.iterdir()}
    assert inside == actual - {"readcheck.json"}  # written by `shardsmith readcheck` (card.md's commands) only


def record_keys_table() -> dict[str, str]:
    (group,) = [g for g in all_groups() if g.name == "record-keys"]
    return {key: row[1] for row in table_rows(group.text) for key in ticked(row[0])}


def task_keys_rows() -> dict[str, tuple[dict[str, str], set[str]]]:
    """kind (multi_label, path, ...) -> (keys added or retyped, keys removed), from the format reference."""
    (group,) = [g for g in all_groups() if g.name == "task-keys"]
    rows = {}
    for build, added, removed in table_rows(group.text):
        kind = re.fullmatch(r"`--(?:task|image_mode) (\w+)`", build).group(1)
        rows[kind] = (dict(re.findall(r"`([^`]+)` \((\w+)", added)), set(ticked(removed)))
    return rows


@handles("record-keys")
def record_keys(group: Group, request) -> None:
    assert record_keys_table() == request.getfixturevalue("demo").metadata["features"]


@handles("task-keys")
def task_keys(group: Group, request) -> None:
    """Each row is checked by the worked example of its kind (`example KIND`), which must exist."""
    examples = {g.args[0] for g in all_groups() if g.name == "example"}
    assert set(task_keys_rows()) <= examples, set(task_keys_rows()) - examples


@handles("metadata-keys")
def metadata_keys(group: Group, request) -> None:
    metadata = request.getfixturevalue("demo").metadata
    rows = {row[0]: row[1] for row in table_rows(group.text)}
    assert {key for cell in rows for key in ticked(cell)} == set(metadata)
    assert set(ticked(rows["`duplicates`"])) == set(metadata["duplicates"])
    split_part, _, shard_part = rows["`splits`"].partition("each with")
    split = metadata["splits"]["train"]
    assert set(ticked(split_part)) == set(split)
    assert set(ticked(shard_part)) == set(split["shards"][0])


@handles("errors-jsonl")
def errors_jsonl(group: Group, request) -> None:
    """The record keys are those of a real errors.jsonl line; the stages, every stage the code names."""
    demo = request.getfixturevalue("demo")
    keys_table, stages_table = tables(group.text)
    lines = [json.loads(line) for line in (demo.build / "errors.jsonl").read_text().splitlines()]
    assert {key for row in keys_table for key in ticked(row[0])} == set(lines[0])
    documented = {stage for row in stages_table for stage in ticked(row[0])}
    in_code = set()
    for top in ROOT.iterdir():
        if top.is_dir() and not top.name.startswith(".") and top.name not in ("tests", "demo", "docs"):
            for source in top.rglob("*.py"):
                in_code |= set(re.findall(r'(?m)^STAGE = "(\w+)"', source.read_text()))
    assert documented == in_code
    assert {line["stage"] for line in lines} <= documented


@handles("guarantees")
def guarantees(group: Group, request) -> None:
    """Every test and test file the table names exists."""
    tests = ROOT / "tests"
    sources = {p.relative_to(tests).as_posix(): p.read_text() for p in tests.rglob("test_*.py")}
    named = [name for name in ticked(group.text) if name.startswith(("tests/", "test_"))]
    assert named
    for name in named:
        file, _, test = name.partition("::") if name.startswith("tests/") else ("", "", name)
        if file:
            assert file.removeprefix("tests/") in sources, name
        if test:
            holders = [sources[file.removeprefix("tests/")]] if file else list(sources.values())
            assert any(re.search(rf"(?m)^def {test}\(", text) for text in holders), name


@handles("example", "", "bash", "python")
def example(group: Group, request) -> None:
    """A worked example as written: its manifest lines (with made-up images, and masks, at their paths), its
    commands, its load() snippet; and its records' keys against the format reference."""
    (kind,) = group.args
    tmp_path, run = request.getfixturevalue("tmp_path"), request.getfixturevalue("shardsmith")
    request.getfixturevalue("monkeypatch").chdir(tmp_path)
    manifest_text, commands, code = (b.text for b in group.blocks)
    rows = [line.split(",") for line in manifest_text.splitlines() if line and not line.startswith("split,")]
    for index, fields in enumerate(rows):
        save_image(tmp_path / fields[1], index)
        if kind == "segmentation":
            (tmp_path / fields[3]).parent.mkdir(parents=True, exist_ok=True)
            Image.new("L", (64, 48), 2).save(tmp_path / fields[3])
    out = None
    for line in commands.replace("\\\n", " ").strip().splitlines():
        command, _, comment = line.partition("#")
        args = shardsmith_words(command)
        manifest = args[args.index("--manifest") + 1] if args[0] == "build" else args[1]
        (tmp_path / manifest).write_text(manifest_text)
        result = run(*args)
        assert result.code == 0, (line, result.err[-2000:])
        if "prints:" in comment:
            assert result.out.strip().splitlines()[-1] == comment.split("prints:")[1].strip()
        if args[0] == "build":
            out = tmp_path / args[args.index("--output_dir") + 1]
    exec(compile(code, str(group.doc), "exec"), {})
    rows_by_kind = task_keys_rows()
    if kind in rows_by_kind:
        added, removed = rows_by_kind[kind]
        expected = {k: v for k, v in record_keys_table().items() if k not in removed} | added
        assert json.loads((out / "metadata.json").read_text())["features"] == expected


@pytest.mark.parametrize("group", all_groups(), ids=lambda g: g.id)
def test_what_the_docs_show(group, request):
    langs, run = HANDLERS[group.name]
    assert tuple(b.lang for b in group.blocks) == langs, (group.id, "blocks differ from what its test runs")
    run(group, request)


# ---------------------------------------------------------------------------------------------------------
# Coverage and shape


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda d: str(d.relative_to(ROOT)))
def test_every_block_is_run_by_a_test(doc):
    groups, orphans = parse(doc)
    assert not orphans, [f"{doc.name}:{b.line}: a ``` block with no <!-- test: ... --> marker" for b in orphans]
    for group in groups:
        if group.name == "not-run":
            assert group.args[0] and [b.lang for b in group.blocks] in ([""], ["text"]), group.id
        else:
            assert group.name in HANDLERS, f"{group.id}: no test of that name in tests/docs/test_readme.py"
            assert tuple(b.lang for b in group.blocks) == HANDLERS[group.name][0], group.id


def test_every_documentation_test_is_used():
    assert set(HANDLERS) == {g.name for g in all_groups()}


def test_every_benchmark_command_shown_still_parses():
    shown = {re.sub(r"\s+", " ", c) for doc in DOCUMENTS for c in re.findall(r"`(python tests/benchmarks/[^`]+)`",
                                                                            doc.read_text())}
    assert shown
    for command in sorted(shown):
        assert_script_parses(command)


def test_every_launch_command_named_exists():
    done = launch("--help")
    commands = set(re.findall(r"(?m)^  ([a-z][a-z-]+)(?: |$)", done.stdout.partition("commands:")[2].partition(
        "environment:")[0]))
    named = {c for doc in DOCUMENTS for c in re.findall(r"bash launch\.sh ([a-z][a-z-]+)", doc.read_text())}
    assert named and named <= commands, named - commands


def test_readme_is_short():
    assert len(README.read_bytes()) <= README_MAX_BYTES


def test_readme_table_of_contents_reaches_every_section():
    text = README.read_text()
    contents = text[text.index("## Contents"):].split("\n## ")[0]
    linked = re.findall(r"\]\(#([^)]+)\)", contents)
    sections = [slug(h) for h in re.findall(r"(?m)^## (.*)$", text) if h != "Contents"]
    assert linked == sections


@pytest.mark.parametrize("doc", [README, *sorted(DOCS.glob("*.md"))], ids=lambda d: str(d.relative_to(ROOT)))
def test_links_reach_a_file_and_heading(doc):
    for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path).resolve() if path else doc
        if file in WRITTEN_ELSEWHERE and not file.exists():
            continue
        assert file.exists(), f"{doc.name}: {target}"
        if anchor:
            assert anchor in anchors(file), f"{doc.name}: {target}"


def test_readme_links_every_document():
    linked = {(ROOT / t).resolve() for t in re.findall(r"\]\((docs/[^)#]+)", README.read_text())}
    assert set(DOCUMENTS[1:]) | WRITTEN_ELSEWHERE <= linked
