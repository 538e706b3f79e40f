"""The differential checker's histories (tests/benchmarks/differential.py): a scheduled folder's inputs as a real
export changes them, night after night, drawn from a seed.

- `Images`: small distinct images made on the spot, exact copies of them under other names (a file copy or a hard
  link), near copies (resized and re-encoded), and broken files (missing, truncated) that a later step may fix.
  A file a good row listed is never changed again: a carried row's image is not read, so changing it would make a
  version differ from a full build by design (docs/versions.md).
- `Manifest`: the rows listed now, written as CSV or JSON Lines in one of several encodings of the same rows
  (line ends, quoting, column or key order) so a rewrite that changes no row is a step too.
- `History.step`: draws one step: the changes to the manifest and images, then the command that runs on the folder
  (a night, a night with `--label_file`, a compaction, a tag or untag then a night) and its `--keep_builds`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, ImageDraw

FIRST_LABELS = ("cat", "dog", "emu")
NEW_LABELS = ("fox", "gnu", "yak")
SPLIT_SPELLINGS = ("train", "train", "train", "validation", "test", "", "Train", "VALIDATION")
MIN_TRAIN_ROWS_PER_LABEL = 2  # a label keeps rows in the training split (full builds take ids from it)
CHANGES = ("append", "append_copies", "append_near_copies", "append_broken", "fix_broken", "remove", "edit_label",
           "edit_split", "reorder", "reencode", "new_label", "repeat_uri")
COMMANDS = ("night", "night", "night", "night", "night_label_file", "compact", "tag", "nothing")


@dataclass(frozen=True)
class Row:
    split: str  # as written (the build normalises case, and assigns a split to "")
    uri: str  # relative to the data folder, as written
    label: str


def draw_image(rng: random.Random, size: tuple[int, int] | None = None) -> Image.Image:
    """A small image whose blocks make its perceptual hash far from other draws'."""
    width, height = size or (rng.randrange(24, 57, 4), rng.randrange(24, 49, 4))
    image = Image.new("RGB", (width, height), tuple(rng.randrange(256) for _ in range(3)))
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x, y = rng.randrange(width), rng.randrange(height)
        draw.rectangle((x, y, x + rng.randrange(4, 16), y + rng.randrange(4, 16)),
                       fill=tuple(rng.randrange(256) for _ in range(3)))
    return image


def encoded(image: Image.Image, kind: str, quality: int = 90) -> bytes:
    out = io.BytesIO()
    if kind == "jpg":
        image.convert("RGB").save(out, "JPEG", quality=quality)
    else:
        image.save(out, "PNG")
    return out.getvalue()


class Images:
    """The history's image files, under `root`."""

    def __init__(self, root: Path, rng: random.Random) -> None:
        self.root = root
        self.rng = rng
        self.count = 0
        self.good: list[str] = []  # files that decode, each once (copies included)
        self.broken: dict[str, bytes] = {}  # uri -> the whole bytes a fix writes

    def _name(self, label: str, ext: str) -> str:
        self.count += 1
        return f"img/{label}/{self.count:04d}.{ext}"

    def new(self, label: str) -> str:
        ext = self.rng.choice(("jpg", "png"))
        uri = self._name(label, ext)
        self._write(uri, encoded(draw_image(self.rng), ext))
        self.good.append(uri)
        return uri

    def copy(self, source: str, label: str) -> str:
        """An identical file under a new name: a hard link or a copy."""
        uri = self._name(label, source.rsplit(".", 1)[1])
        (self.root / uri).parent.mkdir(parents=True, exist_ok=True)
        if self.rng.random() < 0.5:
            os.link(self.root / source, self.root / uri)
        else:
            shutil.copyfile(self.root / source, self.root / uri)
        self.good.append(uri)
        return uri

    def near_copy(self, source: str, label: str) -> str:
        """The same picture resized by 1.5 and re-encoded as JPEG: other bytes, a near pHash."""
        with Image.open(self.root / source) as image:
            image = image.convert("RGB")
            bigger = image.resize((image.width * 3 // 2, image.height * 3 // 2), Image.Resampling.BILINEAR)
        uri = self._name(label, "jpg")
        self._write(uri, encoded(bigger, "jpg", 85))
        self.good.append(uri)
        return uri

    def broken_file(self, label: str) -> str:
        """A truncated JPEG or a missing file; `fix` later writes it whole."""
        uri = self._name(label, "jpg")
        whole = encoded(draw_image(self.rng), "jpg")
        self.broken[uri] = whole
        if self.rng.random() < 0.5:
            self._write(uri, whole[: len(whole) // 2])
        return uri

    def fix(self, uri: str) -> None:
        self._write(uri, self.broken.pop(uri))
        self.good.append(uri)

    def _write(self, uri: str, data: bytes) -> None:
        path = self.root / uri
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_bytes(data)
        os.replace(temporary, path)


@dataclass
class Manifest:
    path: Path
    rows: list[Row] = field(default_factory=list)
    encoding: str = "plain"

    def write(self) -> None:
        end = "\r\n" if self.encoding == "crlf" else "\n"
        if self.path.suffix == ".jsonl":
            keys = ("label", "image_uri", "split") if self.encoding == "reordered" else ("split", "image_uri", "label")
            lines = [json.dumps({key: _field(row, key) for key in keys},
                                separators=(",", ":") if self.encoding == "quoted" else (", ", ": "))
                     for row in self.rows]
            text = "".join(line + end for line in lines)
        else:
            columns = (("image_uri", "label", "split") if self.encoding == "reordered"
                       else ("split", "image_uri", "label"))
            out = io.StringIO()
            writer = csv.writer(out, lineterminator=end,
                                quoting=csv.QUOTE_ALL if self.encoding == "quoted" else csv.QUOTE_MINIMAL)
            writer.writerow(columns)
            writer.writerows([_field(row, key) for key in columns] for row in self.rows)
            text = out.getvalue()
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(text, encoding="utf-8", newline="")
        os.replace(temporary, self.path)


def _field(row: Row, key: str) -> str:
    return {"split": row.split, "image_uri": row.uri, "label": row.label}[key]


@dataclass
class Step:
    """One step of a history: what changed, and the command run."""

    number: int
    changes: list[str]
    command: str  # night | night_label_file | compact | tag | nothing
    keep_builds: int
    max_removed_fraction: float | None = None
    tag: tuple[str, str] | None = None  # (tag or untag, name)

    def describe(self) -> str:
        changes = "+".join(self.changes) or "no change"
        return f"step {self.number}: {changes}; {self.command} --keep_builds {self.keep_builds}"


class History:
    """One folder's inputs across a history; `options` are the build flags every night and full build share."""

    def __init__(self, root: Path, seed: int) -> None:
        self.rng = random.Random(seed)
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.images = Images(root, self.rng)
        suffix = ".jsonl" if self.rng.random() < 0.25 else ".csv"
        self.manifest = Manifest(root / f"manifest{suffix}")
        self.near = self.rng.choice(("off", "off", "report", "drop"))
        self.on_duplicate = "keep"  # drop and error refuse --incremental (a published record cannot be dropped)
        self.labels = list(FIRST_LABELS[: self.rng.choice((2, 3))])
        self.tags: set[str] = set()
        self.step_number = 0
        for label in self.labels:
            for _ in range(self.rng.randrange(4, 9)):
                self.manifest.rows.append(Row(self.rng.choice(SPLIT_SPELLINGS), self.images.new(label), label))
            for _ in range(MIN_TRAIN_ROWS_PER_LABEL):
                self.manifest.rows.append(Row("train", self.images.new(label), label))
        self._append_copies()
        if self.rng.random() < 0.5:
            self._append_broken()
        self.rng.shuffle(self.manifest.rows)
        self.manifest.write()

    def options(self) -> list[str]:
        flags = ["--name", "hist", "--num_shards", "train=2,validation=1,test=1", "--max_error_fraction", "1",
                 "--on_duplicate", self.on_duplicate, "--validate", "decode"]
        if self.near != "off":
            flags += ["--near_duplicates", self.near]
        return flags

    def step(self, kept_versions: list[str]) -> Step:
        """Changes the inputs as the next step's export would; returns the step (its command still to run)."""
        self.step_number += 1
        rng = self.rng
        command = rng.choice(COMMANDS)
        changes: list[str] = []
        if command in ("night", "night_label_file", "tag"):
            for change in rng.sample(CHANGES, rng.choice((1, 1, 2, 3))):
                if getattr(self, f"_{change}")():
                    changes.append(change)
        step = Step(self.step_number, changes, command, rng.choice((1, 2, 2, 3)))
        if "remove" in changes or "edit_label" in changes or "edit_split" in changes:
            step.max_removed_fraction = 0.9  # histories are small: one row can be over the default 10%
        if command == "tag":
            untag = [name for name in sorted(self.tags)]
            if untag and rng.random() < 0.4:
                name = rng.choice(untag)
                self.tags.discard(name)
                step.tag = ("untag", name)
            elif kept_versions:
                name = f"t{self.step_number}"
                self.tags.add(name)
                step.tag = ("tag", name)
        if changes or command != "compact":
            self.manifest.write()
        return step

    def label_file(self, published_labels: list[str]) -> str:
        """A --label_file for a night: the published labels in id order, sometimes one label more."""
        labels = list(published_labels) + sorted(set(self.labels) - set(published_labels))
        spare = [label for label in NEW_LABELS if label not in labels]
        if spare and self.rng.random() < 0.5:
            labels.append(spare[0])
            if spare[0] not in self.labels:
                self.labels.append(spare[0])
        path = self.root / f"labels-{self.step_number}.txt"
        path.write_text("".join(label + "\n" for label in labels), encoding="utf-8")
        return str(path)

    # The changes: each returns whether it changed anything.

    def _rows(self) -> list[Row]:
        return self.manifest.rows

    def _append(self) -> bool:
        for _ in range(self.rng.randrange(1, 5)):
            label = self.rng.choice(self.labels)
            self._rows().append(Row(self.rng.choice(SPLIT_SPELLINGS), self.images.new(label), label))
        return True

    def _append_copies(self) -> bool:
        """1 to 6 rows whose image is an exact copy of one listed (or of one appended now), in any split."""
        listed = [row for row in self._rows() if row.uri in self.images.good]
        if not listed:
            return False
        source = self.rng.choice(listed)
        for _ in range(self.rng.randrange(1, 7)):
            label = source.label if self.rng.random() < 0.8 else self.rng.choice(self.labels)
            self._rows().append(Row(self.rng.choice(SPLIT_SPELLINGS), self.images.copy(source.uri, label), label))
        return True

    def _append_near_copies(self) -> bool:
        listed = [row for row in self._rows() if row.uri in self.images.good]
        if not listed:
            return False
        source = self.rng.choice(listed)
        for _ in range(self.rng.randrange(1, 3)):
            self._rows().append(Row(self.rng.choice(SPLIT_SPELLINGS), self.images.near_copy(source.uri, source.label),
                                    source.label))
        return True

    def _append_broken(self) -> bool:
        label = self.rng.choice(self.labels)
        self._rows().append(Row(self.rng.choice(SPLIT_SPELLINGS), self.images.broken_file(label), label))
        return True

    def _fix_broken(self) -> bool:
        broken = sorted(self.images.broken)
        if not broken:
            return False
        self.images.fix(self.rng.choice(broken))
        return True

    def _removable(self) -> list[int]:
        """Rows that may go: any but a label's last MIN_TRAIN_ROWS_PER_LABEL good training rows."""
        train: dict[str, int] = {}
        for row in self._rows():
            if row.split.strip().lower() == "train" and row.uri in self.images.good:
                train[row.label] = train.get(row.label, 0) + 1
        return [i for i, row in enumerate(self._rows())
                if not (row.split.strip().lower() == "train" and row.uri in self.images.good
                        and train[row.label] <= MIN_TRAIN_ROWS_PER_LABEL)]

    def _remove(self) -> bool:
        removable = self._removable()
        if not removable:
            return False
        for i in sorted(self.rng.sample(removable, min(len(removable), self.rng.randrange(1, 4))), reverse=True):
            del self._rows()[i]
        return True

    def _edit_label(self) -> bool:
        removable = self._removable()
        if not removable:
            return False
        i = self.rng.choice(removable)
        row = self._rows()[i]
        others = [label for label in self.labels if label != row.label]
        self._rows()[i] = Row(row.split, row.uri, self.rng.choice(others))
        return True

    def _edit_split(self) -> bool:
        removable = self._removable()
        if not removable:
            return False
        i = self.rng.choice(removable)
        row = self._rows()[i]
        self._rows()[i] = Row(self.rng.choice([s for s in SPLIT_SPELLINGS if s != row.split]), row.uri, row.label)
        return True

    def _reorder(self) -> bool:
        self.rng.shuffle(self._rows())
        return True

    def _reencode(self) -> bool:
        self.manifest.encoding = self.rng.choice([e for e in ("plain", "crlf", "quoted", "reordered")
                                                  if e != self.manifest.encoding])
        return True

    def _new_label(self) -> bool:
        spare = [label for label in NEW_LABELS if label not in self.labels]
        if not spare:
            return False
        label = spare[0]
        self.labels.append(label)
        for _ in range(MIN_TRAIN_ROWS_PER_LABEL):
            self._rows().append(Row("train", self.images.new(label), label))
        if self.rng.random() < 0.5:
            self._rows().append(Row(self.rng.choice(("validation", "test", "")), self.images.new(label), label))
        return True

    def _repeat_uri(self) -> bool:
        """A listed row written again (the same URI listed twice, in the same or another split)."""
        if not self._rows():
            return False
        row = self.rng.choice(self._rows())
        split = row.split if self.rng.random() < 0.5 else self.rng.choice(SPLIT_SPELLINGS)
        self._rows().append(Row(split, row.uri, row.label))
        return True
