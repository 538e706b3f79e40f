"""The versions side of the chaos benchmark (tests/benchmarks/chaos.py): what each published version must hold,
and the readers and kept versions checked after every step.

- `Versions.note`: records, for a version a step published, what it must hold (`Expected`: the good rows of the
  manifest it was built from, or for a compaction its version's; the broken rows as errors) and checks its label
  ids: a night, a compaction or `--incremental --overwrite` keeps every id of the version before; a full build
  that renumbers says so ("label ids changed"), and starts a new numbering ("epoch").
- `version_problems`: a version's records read back (shardsmith.records) and compared with `Expected`: rows,
  each record's label id, errors.jsonl.
- `Versions.open_reader` / `finish_reader`: a reader that opened a kept version (records or load, version=ID)
  before the step reads it to the end with the same records, or fails with an exception only if retention
  removed that version's shards.
- `Versions.check_kept`: every version `shardsmith versions` lists still has its shards and its labels, with the
  published version's ids within one numbering.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from chaos_nights import Expected


@dataclass
class Reader:
    """A reader that opened a version before the step."""

    version: str
    via: str  # records or load
    expected: Counter
    got: Counter
    iterator: object
    shard_paths: list[str]


def version_problems(out: Path, build_id: str, expected: Expected) -> list[str]:
    """How the version `build_id` differs from `expected`: its records (URI, label, split; each record's label id
    is its label's id in labels), its errors.jsonl, its labels against the labels recorded when it was published."""
    import shardsmith

    metadata = json.loads((out / "builds" / build_id / "metadata.json").read_text())
    labels = list(metadata["labels"])
    problems = []
    if expected.labels and tuple(labels) != expected.labels:
        problems.append(f"version {build_id}'s labels are {labels}, {list(expected.labels)} when it was published")
    found: Counter = Counter()
    for split in metadata["splits"]:
        for record in shardsmith.records(str(out), split, version=build_id):
            uri = record["image/filename"].decode()
            label = record["image/class/text"].decode()
            found[(uri, label)] += 1
            if label not in labels or record["image/class/label"] != labels.index(label):
                problems.append(f"{uri}: label {label!r} has id {record['image/class/label']}, labels list it "
                                f"at {labels.index(label) if label in labels else None}")
            if expected.splits.get(uri, split) != split:
                problems.append(f"{uri} is in {split}, the manifest says {expected.splits[uri]}")
    if found != expected.rows:
        missing, extra = expected.rows - found, found - expected.rows
        problems.append(f"version {build_id}'s records are not the manifest's good rows: "
                        f"missing {sorted(missing)[:3]} ({sum(missing.values())}), "
                        f"extra {sorted(extra)[:3]} ({sum(extra.values())})")
    errors_path = out / "builds" / build_id / "errors.jsonl"
    listed = Counter()
    if errors_path.exists():
        for line in errors_path.read_text().splitlines():
            entry = json.loads(line)
            if entry.get("stage") != "duplicate":
                listed[entry.get("uri", "")] += 1
    if listed != expected.errors:
        problems.append(f"version {build_id}'s errors.jsonl lists {sorted(listed.elements())}, the broken rows are "
                        f"{sorted(expected.errors.elements())}")
    return problems[:6]


class Versions:
    """What the run knows of the dataset's versions."""

    def __init__(self, out: Path, rng: random.Random) -> None:
        self.out = out
        self.rng = rng
        self.expected: dict[str, Expected] = {}  # version -> what it must hold, from the step that published it
        self.epoch = 0
        self.tampered: set[str] = set()  # versions a tamper changed (or a tampered step published): not checked
        self.reported: set[str] = set()  # kept-version findings already reported (each once)
        self.last_version: str | None = None  # the version published last
        self.unpublished_from: str | None = None  # the version published last before metadata.json was moved out

    def metadata_moved_out(self) -> None:
        self.unpublished_from = self.last_version

    def note(self, result, version: str, before_id: str | None, snapshot: Expected,
                     log: str) -> None:
        """Records what the version a step published must hold, and checks its label ids against the one before."""
        before = self.expected.get(before_id or "")
        try:
            labels = tuple(json.loads((self.out / "builds" / version / "metadata.json").read_text())["labels"])
        except (OSError, ValueError, KeyError) as error:
            result.failures.append(f"the new version {version} has no readable metadata.json: {error}")
            return
        expect = replace(before, labels=labels) if result.command == "compact" and before else \
            replace(snapshot, labels=labels)
        expect.epoch = before.epoch if before else self.epoch
        keeps_ids = result.command in ("night", "compact")  # --incremental (with --overwrite too) and compact
        if before is not None:
            moved = [label for label in set(labels) & set(before.labels)
                     if labels.index(label) != before.labels.index(label)]
            if keeps_ids and (moved or labels[:len(before.labels)] != before.labels):
                result.failures.append(f"version {version} ({result.command}) changed label ids of {before_id}: "
                                       f"{list(before.labels)} -> {list(labels)}")
            elif moved:
                self.epoch += 1
                expect.epoch = self.epoch
                if "label ids changed" not in log:
                    result.failures.append(f"a full build renumbered labels {sorted(moved)} without saying so")
        elif self.unpublished_from is not None:
            # metadata.json was moved out as a refusal said: the folder's versions still use the ids of this one.
            last = self.expected[self.unpublished_from]
            moved = [label for label in set(labels) & set(last.labels)
                     if labels.index(label) != last.labels.index(label)]
            if moved:
                self.epoch += 1
                expect.epoch = self.epoch
                result.failures.append(f"after metadata.json was moved out as the refusal said, version {version} "
                                       f"numbered labels afresh ({list(labels)}), silently; the kept versions, "
                                       f"{self.unpublished_from} among them, have {list(last.labels)}")
        if result.command == "compact" and before is None:
            result.failures.append(f"compaction published {version} over a version the harness does not know")
        self.expected[version] = expect
        self.last_version, self.unpublished_from = version, None

    def open_reader(self, result) -> Reader | None:
        """Opens a kept version (the published one or an older one) and reads its first records."""
        import shardsmith
        from shardsmith.read.versions import list_versions

        try:
            versions = [v.id for v in list_versions(str(self.out)) if v.id not in self.tampered]
        except Exception:  # noqa: BLE001 - no versions to read: no reader this step
            return None
        if not versions:
            return None
        version = self.rng.choice(versions)
        result.reader_version = version
        try:
            expected = Counter(r["image/filename"] for r in shardsmith.records(str(self.out), "train", version=version))
            paths = self.shards(version)
        except Exception as error:  # noqa: BLE001 - a listed version that cannot be read: check_kept_versions says so
            result.reader_outcome = f"could not open it: {type(error).__name__}: {str(error)[:200]}"
            return None
        if self.rng.random() < 0.3:
            dataset = shardsmith.load(str(self.out), "train", batch_size=None, shuffle_buffer=None, features=True,
                                      version=version)
            iterator = (example["image/filename"].numpy() for example in dataset)
            via = "load"
        else:
            iterator = iter(shardsmith.records(str(self.out), "train", version=version))
            iterator = (record["image/filename"] for record in iterator)
            via = "records"
        got = Counter(name for _, name in zip(range(5), iterator, strict=False))
        return Reader(version, via, expected, got, iterator, paths)

    def shards(self, version: str) -> list[str]:
        from shardsmith.format.metadata import read_metadata
        from shardsmith.output_folder.layout import dataset_dir, shard_file_path

        folder = str(self.out / "builds" / version)
        metadata = read_metadata(folder)
        return [shard_file_path(dataset_dir(folder, metadata), shard) for _, shard in metadata.all_shards()]

    def finish_reader(self, result, reader: Reader) -> None:
        try:
            reader.got.update(reader.iterator)
        except Exception as error:  # noqa: BLE001 - a reader failing loudly is right only if its version went
            gone = [p for p in reader.shard_paths if not os.path.exists(p)]
            if gone:
                result.reader_outcome = (f"{reader.via}: failed loudly ({type(error).__name__}): retention removed "
                                         f"{len(gone)} shard(s)")
            else:
                result.failures.append(f"a {reader.via} reader of kept version {reader.version} failed though its "
                                       f"shards are there: {type(error).__name__}: {str(error)[:300]}")
            return
        if reader.got != reader.expected:
            result.failures.append(f"a {reader.via} reader of version {reader.version} read "
                                   f"{sum(reader.got.values())} records, not the {sum(reader.expected.values())} "
                                   "it held (silently different)")
        result.reader_outcome = f"{reader.via}: read {sum(reader.got.values())} records to the end"

    def check_kept(self, result, published: str | None) -> None:
        """Every version `shardsmith versions` lists still has its shards and the labels it was published with,
        with the ids of the published version's numbering where they share it."""
        from shardsmith.read.versions import list_versions

        current = self.expected.get(published or "")
        for version in list_versions(str(self.out)):
            if version.id in self.tampered or version.id not in self.expected:
                continue
            try:
                gone = [p for p in self.shards(version.id) if not os.path.exists(p)]
                labels = tuple(json.loads((self.out / "builds" / version.id / "metadata.json").read_text())["labels"])
            except Exception as error:  # noqa: BLE001
                self.report_once(result, f"unreadable {version.id}",
                                 f"kept version {version.id} cannot be read: {type(error).__name__}: {error}")
                continue
            if gone:
                self.report_once(result, f"gone {version.id}", f"`shardsmith versions` lists {version.id}, whose shard "
                                 f"{os.path.relpath(gone[0], self.out)} is gone ({len(gone)} gone)")
            expect = self.expected[version.id]
            if labels != expect.labels:
                result.failures.append(f"kept version {version.id}'s labels changed: {list(expect.labels)} -> "
                                       f"{list(labels)}")
            if current is not None and expect.epoch == current.epoch and \
                    any(current.labels.index(label) != labels.index(label)
                        for label in set(labels) & set(current.labels)):
                result.failures.append(f"kept version {version.id} gives labels other ids than the published one: "
                                       f"{list(labels)} against {list(current.labels)}")


    def report_once(self, result, key: str, finding: str) -> None:
        """A finding about a kept version, reported at the step that first shows it (it stays while kept)."""
        if key not in self.reported:
            self.reported.add(key)
            result.failures.append(finding)
