"""The versioned, scheduled side of the chaos benchmark (tests/benchmarks/chaos.py): a nightly export's manifest,
tampering with a published version, and what a version built from a manifest must hold
(tests/benchmarks/chaos_versions.py checks it).

- `Nights`: a pool of demo images (the sample's three shapes and a fourth label, "hexagon", that nights bring in)
  and the manifest listed now. Each night's manifest is the previous one with a few rows added and a few removed
  (fewer than --max_removed_fraction of the published version, or the flag raised), sometimes reordered, and a
  few broken rows (a missing file, a truncated JPEG) that stay broken across nights until one is fixed (its file
  written whole). Sometimes a night brings a new broken row: that night must fail its error budget, and the next
  night's manifest leaves the row out again.
- `Expected`: what a published version must hold: the good rows of the manifest it was built from (URI, label,
  and split where the row names one), its errors (the broken rows' URIs) and its labels in id order.
- `tamper`: one change a person or a bug could make to the published version before the next night or
  compaction: a row list deleted, a line dropped from one, two lines swapped, a shard's "build" or "file" in
  metadata.json pointed outside the dataset, metadata.json corrupted.
- `Outside`: a folder beside the dataset (where the redirected names point) holding a copy of the redirected
  files, with their access times set far back: a read of one moves its access time (relatime), a write its
  size or modification time.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.sample import _draw, _encode, make_sample

NEW_LABEL = "hexagon"
SPLITS = ("train", "validation", "test")
# With two broken rows the first --incremental build (and every --incremental --overwrite, a full build) stays under
# --max_error_fraction 0.05: 2 / (40 + 2) < 0.05.
MIN_GOOD_ROWS = 40
MAX_BROKEN_ROWS = 2
ERROR_BUDGET = 0.05
REMOVED_DEFAULT = 0.1  # --max_removed_fraction's default; nights that remove more raise it
TAMPERS = ("delete_row_list", "drop_row_line", "swap_row_lines", "build_outside", "file_outside",
           "corrupt_metadata")
PAST_ATIME_NS = 978_307_200 * 10**9  # 2001-01-01: older than any file's mtime, so relatime updates it on a read


@dataclass(frozen=True)
class Row:
    split: str  # as the manifest writes it ("" and mixed case included: the build normalises or assigns)
    uri: str
    label: str

    @property
    def split_name(self) -> str | None:
        return self.split.strip().lower() or None


@dataclass
class Expected:
    """What a version must hold."""

    rows: Counter  # (uri, label) of the records
    splits: dict[str, str]  # uri -> split, for rows that name one
    errors: Counter  # URIs of errors.jsonl's lines
    labels: tuple[str, ...] = ()
    epoch: int = 0  # label ids mean the same within an epoch; a full build that renumbers starts the next


@dataclass
class NightPlan:
    """One night's manifest, and what the harness expects of the night that builds it."""

    added: int = 0
    removed_from_published: int = 0
    fixed: list[str] = field(default_factory=list)
    new_broken: list[str] = field(default_factory=list)
    reordered: bool = False
    max_removed_fraction: float | None = None  # raised for a night removing more than the default allows


class Nights:
    """The images, the manifest listed now, and which of its rows are broken."""

    def __init__(self, data: Path, per_label: int, rng: random.Random) -> None:
        if per_label < 16:
            raise SystemExit("--per_label: at least 16 (nights need 40 good rows to stay under a 5% error budget)")
        self.data = data
        self.rng = rng
        make_sample(str(data), per_label)
        with (data / "manifest.csv").open(newline="") as f:
            sample_rows = [Row(*line) for line in list(csv.reader(f))[1:] if len(line) == 3]
        self.pool = [row for row in sample_rows if not row.uri.startswith("images/broken/")
                     and not row.uri.endswith("missing.jpg")]
        draw_rng = random.Random(per_label)
        (data / "images" / NEW_LABEL).mkdir()
        for i in range(per_label // 2):
            encoded, ext = _encode(_draw(NEW_LABEL, draw_rng), i)
            relative = f"images/{NEW_LABEL}/{NEW_LABEL}_{i:03d}.{ext}"
            (data / relative).write_bytes(encoded)
            self.pool.append(Row(("train", "validation", "test", "")[i % 4], relative, NEW_LABEL))
        self.broken: set[str] = set()  # URIs whose file is missing or truncated now
        self.new_broken: set[str] = set()  # broken rows a night brought (never part of a published version)
        self.next_broken = 0
        first = [row for row in self.pool if row.label != NEW_LABEL]
        self.rows = rng.sample(first, min(len(first), MIN_GOOD_ROWS + 8))
        self.rows += [self._broken_row("missing", "train", "circle"), self._broken_row("truncated", "Train", "square")]
        rng.shuffle(self.rows)
        self.write()

    @property
    def manifest(self) -> Path:
        return self.data / "manifest.csv"

    def _broken_row(self, kind: str, split: str, label: str) -> Row:
        relative = f"images/broken/{kind}_{self.next_broken:03d}.jpg"
        self.next_broken += 1
        if kind == "truncated":
            whole, _ = _encode(_draw(label, self.rng).convert("RGB"), 0)
            (self.data / relative).write_bytes(whole[: len(whole) // 2])
        self.broken.add(relative)
        return Row(split, relative, label)

    def write(self) -> None:
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows([row.split, row.uri, row.label] for row in self.rows)
        temporary = self.manifest.with_suffix(".csv.tmp")
        temporary.write_text(text.getvalue())
        os.replace(temporary, self.manifest)

    def good_rows(self) -> list[Row]:
        return [row for row in self.rows if row.uri not in self.broken]

    def expected(self) -> Expected:
        """What a version built from the manifest as it is now must hold (labels and epoch: the caller's)."""
        good = self.good_rows()
        return Expected(Counter((row.uri, row.label) for row in good),
                        {row.uri: row.split_name for row in good if row.split_name},
                        Counter(row.uri for row in self.rows if row.uri in self.broken))

    def night(self, published: Expected | None, may_break: bool) -> NightPlan:
        """Changes the manifest as a night's export would; `may_break`: this night may bring a new broken row
        (whose night must then fail its error budget)."""
        plan = NightPlan()
        published_errors = published.errors if published else Counter()
        # A broken row a failed night brought and no version published: the export drops it again. One a version
        # lists as an error (a full build published it) is a broken row like the others from now on.
        unpublished = {uri for uri in self.new_broken if uri not in published_errors}
        self.rows = [row for row in self.rows if row.uri not in unpublished]
        self.new_broken = set()
        broken_listed = [row for row in self.rows if row.uri in self.broken]
        if broken_listed and self.rng.random() < 0.2:
            fixed = self.rng.choice(broken_listed)
            encoded, _ = _encode(_draw(fixed.label, self.rng).convert("RGB"), 0)
            (self.data / fixed.uri).write_bytes(encoded)
            self.broken.discard(fixed.uri)
            plan.fixed.append(fixed.uri)
        good = self.good_rows()
        removing = max(0, min(len(good) - MIN_GOOD_ROWS, self.rng.choice((0, 1, 1, 2, 3, 5))))
        for row in self.rng.sample(good, len(good)):
            if removing and self._may_remove(row):
                self.rows.remove(row)
                removing -= 1
        listed = {row.uri for row in self.rows}
        unlisted = [row for row in self.pool if row.uri not in listed]
        for row in self.rng.sample(unlisted, min(len(unlisted), self.rng.choice((0, 1, 2, 3, 4)))):
            if row.split_name == "train" or self._train_rows(row.label):
                self.rows.append(row)
                plan.added += 1
        if may_break and sum(row.uri in self.broken for row in self.rows) < MAX_BROKEN_ROWS \
                and self.rng.random() < 0.15:
            row = self._broken_row("missing", self.rng.choice(("train", "validation", "")), "triangle")
            self.rows.append(row)
            self.new_broken.add(row.uri)
            plan.new_broken.append(row.uri)
        if self.rng.random() < 0.15:
            self.rng.shuffle(self.rows)
            plan.reordered = True
        if published is not None:
            now = Counter((row.uri, row.label) for row in self.good_rows())
            plan.removed_from_published = sum((published.rows - now).values())
            if plan.removed_from_published > 0.8 * REMOVED_DEFAULT * max(1, sum(published.rows.values())):
                plan.max_removed_fraction = 0.5
        self.write()
        return plan

    def _train_rows(self, label: str) -> int:
        return sum(row.label == label and row.split_name == "train" for row in self.good_rows())

    def _may_remove(self, row: Row) -> bool:
        """A label's ids come from the training split: a full build fails the rows of a label that no row of the
        split has, so the last one stays while other rows of the label are listed."""
        if row.split_name != "train" or self._train_rows(row.label) > 1:
            return True
        return not any(other.label == row.label and other is not row for other in self.rows)

    def remove(self, uri: str) -> bool:
        """Leaves the row of `uri` out of the manifest, unless a label needs it; returns whether it did."""
        listed = [row for row in self.rows if row.uri == uri]
        if not listed or not self._may_remove(listed[0]):
            return False
        self.rows.remove(listed[0])
        self.write()
        return True

    def add_one_row(self) -> None:
        """Lists one more image (a tampered step's night must have work to do)."""
        listed = {row.uri for row in self.rows}
        unlisted = [row for row in self.pool if row.uri not in listed
                    and (row.split_name == "train" or self._train_rows(row.label))]
        if unlisted:
            self.rows.append(self.rng.choice(unlisted))
            self.write()


# Tampering ------------------------------------------------------------------------------------------------------

class Outside:
    """A folder beside the dataset that tampered names point into, holding copies of the files they name."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.state: dict[str, tuple[int, int, int]] = {}

    def fill(self, sources: list[Path], rows_sources: list[Path]) -> None:
        """Copies `sources` (shards) into the folder and `rows_sources` into its rows/, access times set far back."""
        if self.folder.exists():
            shutil.rmtree(self.folder)
        (self.folder / "rows").mkdir(parents=True)
        for source in sources:
            if source.exists():
                shutil.copy2(source, self.folder / source.name)
        for source in rows_sources:
            if source.exists():
                shutil.copy2(source, self.folder / "rows" / source.name)
        self.reset()

    def reset(self) -> None:
        self.state = {}
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file()):
            stat = path.stat()
            os.utime(path, ns=(PAST_ATIME_NS, stat.st_mtime_ns))
            self.state[str(path.relative_to(self.folder))] = (PAST_ATIME_NS, stat.st_mtime_ns, stat.st_size)

    def touched(self) -> list[str]:
        """What happened to the folder since `reset`: files read, written, added or removed."""
        if not self.folder.exists():
            return ["the folder outside the dataset was removed"] if self.state else []
        now = {}
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file()):
            stat = path.stat()
            now[str(path.relative_to(self.folder))] = (stat.st_atime_ns, stat.st_mtime_ns, stat.st_size)
        problems = [f"added {name}" for name in sorted(set(now) - set(self.state))]
        problems += [f"removed {name}" for name in sorted(set(self.state) - set(now))]
        for name in sorted(set(now) & set(self.state)):
            if now[name][1:] != self.state[name][1:]:
                problems.append(f"wrote {name}")
            elif now[name][0] != self.state[name][0]:
                problems.append(f"read {name}")
        return problems


def _shards(metadata: dict) -> list[tuple[str, dict]]:
    return [(split, shard) for split, entry in metadata.get("splits", {}).items() for shard in entry.get("shards", [])]


def _holder(out: Path, published_id: str, shard: dict) -> Path:
    return out / "builds" / str(shard.get("build") or published_id)


def _row_list(out: Path, published_id: str, shard: dict) -> Path:
    return _holder(out, published_id, shard) / "rows" / f"{shard['file']}.jsonl"


def _edit_metadata(out: Path, published_id: str, rng: random.Random, edit) -> str:
    """Applies `edit(metadata dict) -> description` to the top-level metadata.json, the version's own copy, or
    both alike (so that verify's comparison of the two finds nothing)."""
    where = rng.choice(("top-level", "own copy", "both"))
    paths = {"top-level": [out / "metadata.json"], "own copy": [out / "builds" / published_id / "metadata.json"],
             "both": [out / "metadata.json", out / "builds" / published_id / "metadata.json"]}[where]
    state = rng.getstate()
    description = ""
    for path in paths:
        rng.setstate(state)  # the same edit in both files
        metadata = json.loads(path.read_text())
        description = edit(metadata)
        path.write_text(json.dumps(metadata, indent=2))
    return f"{description} in {where} metadata.json"


def tamper(kind: str, out: Path, outside: Outside, rng: random.Random) -> tuple[str, list[str]]:
    """Changes the published version as `kind` says; returns what was done (one line) and the URIs of the row
    list lines it changed."""
    top = json.loads((out / "metadata.json").read_text())
    published_id = top["build_id"]
    shards = _shards(top)
    listed = [(split, shard) for split, shard in shards if _row_list(out, published_id, shard).exists()]
    if kind == "delete_row_list":
        split, shard = rng.choice(listed)
        path = _row_list(out, published_id, shard)
        uris = [json.loads(line)[4] for line in path.read_text().splitlines()]
        path.unlink()
        return f"deleted {path.relative_to(out)}", rng.sample(uris, len(uris))
    if kind in ("drop_row_line", "swap_row_lines"):
        least = 1 if kind == "drop_row_line" else 2
        candidates = [(s, shard) for s, shard in listed
                      if len(_row_list(out, published_id, shard).read_text().splitlines()) >= least]
        if not candidates:
            return tamper("delete_row_list", out, outside, rng)
        split, shard = rng.choice(candidates)
        path = _row_list(out, published_id, shard)
        lines = path.read_text().splitlines(keepends=True)
        if kind == "drop_row_line":
            index = rng.randrange(len(lines))
            dropped = lines.pop(index)
            path.write_text("".join(lines))
            uri = json.loads(dropped)[4]
            return f"dropped line {index + 1} ({uri}) of {path.relative_to(out)}", [uri]
        i, j = sorted(rng.sample(range(len(lines)), 2))
        lines[i], lines[j] = lines[j], lines[i]
        path.write_text("".join(lines))
        uris = [json.loads(lines[i])[4], json.loads(lines[j])[4]]
        return f"swapped lines {i + 1} and {j + 1} of {path.relative_to(out)}", rng.sample(uris, 2)
    if kind in ("build_outside", "file_outside"):
        split, shard = rng.choice(shards)
        holder = _holder(out, published_id, shard)
        name = shard["file"]
        outside.fill([holder / name, holder / f"{name}.idx"], [holder / "rows" / f"{name}.jsonl"])
        index = shards.index((split, shard))

        def point_outside(metadata: dict) -> str:
            entry = _shards(metadata)[index][1]
            if kind == "build_outside":
                entry["build"] = "../../" + outside.folder.name
                return f"shard {name} given build {entry['build']!r}"
            entry["file"] = rng.choice((f"../../../{outside.folder.name}/{name}", str(outside.folder / name)))
            return f"shard {name} given file {entry['file']!r}"

        return _edit_metadata(out, published_id, rng, point_outside), []
    if kind == "corrupt_metadata":
        how = rng.choice(("truncated", "not an object", "splits emptied", "counts changed"))
        where = rng.choice(("top-level", "own copy"))
        path = out / "metadata.json" if where == "top-level" else out / "builds" / published_id / "metadata.json"
        data = path.read_bytes()
        if how == "truncated":
            path.write_bytes(data[: rng.randrange(1, len(data) - 1)])
        elif how == "not an object":
            path.write_text("[]\n")
        else:
            metadata = json.loads(data)
            if how == "splits emptied":
                metadata["splits"] = {}
            else:
                for entry in metadata["splits"].values():
                    entry["num_examples"] = entry.get("num_examples", 0) + 1
            path.write_text(json.dumps(metadata, indent=2))
        return f"{where} metadata.json {how}", []
    raise ValueError(f"unknown tamper {kind!r}")
