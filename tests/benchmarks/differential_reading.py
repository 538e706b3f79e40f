"""What a version reads as, for the differential checker (tests/benchmarks/differential.py), and how two readings
differ.

A `Reading` holds what a user of the version can observe: each split's records as a multiset of their serialized
bytes (so key, label id and text, image bytes and every other feature at once), labels.txt, errors.jsonl's rows, the
identical- and near-duplicate summaries, and the counts in metadata.json. Two versions that read the same are the
same dataset to every reader, whatever shards hold the records.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

# The near-duplicate entry's fields that a night and a full build share. A night's pair counts are the pairs with
# one of its new images (docs/near_duplicates.md), not the version's: its drops are compared through the records
# and errors.jsonl instead.
NEAR_DUPLICATE_FIELDS = ("mode", "max_distance")
# metadata.json's counts of the rows a version stands for. Not compared: `label_image_counts` and
# `labels_taken_from`, which describe the rows a build placed (a night: its new rows; docs/format.md).
COUNT_FIELDS = ("num_input_rows", "num_examples", "num_example_rows", "num_errors", "errors_by_reason", "labels")
# A night names the build that holds the kept copy of an image it dropped; a full build holds both.
PUBLISHED_IN = re.compile(r", published in build \d{8}T\d{6}Z-[0-9a-f]{8}")
NEAR_DROPPED = "near duplicate dropped (--near_duplicates drop)"
KEPT_COPY = re.compile(r"near duplicate of (.+) in ([a-z]+)(?:,| \()")
MAX_SHOWN = 3  # differing items shown per difference


@dataclass
class Reading:
    version: str
    records: dict[str, Counter] = field(default_factory=dict)  # split -> Counter of record SHA-256
    described: dict[str, str] = field(default_factory=dict)  # record SHA-256 -> "uri (label id text)"
    uris: dict[str, str] = field(default_factory=dict)  # record SHA-256 -> its image/filename
    labels_txt: str = ""
    errors: Counter = field(default_factory=Counter)  # errors.jsonl rows as canonical JSON, without "line"
    error_lines: Counter = field(default_factory=Counter)  # (uri, split, label, line) of each errors.jsonl row
    duplicates: dict = field(default_factory=dict)
    near_duplicates: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    near_dropped: set = field(default_factory=set)  # ((uri, split) dropped, (uri, split) kept) per near drop
    kept_published: set = field(default_factory=set)  # (uri, split) of the copies a night dropped for a published one

    def record_digest(self) -> str:
        """One hash of every split's records, to compare a kept version with itself later."""
        text = json.dumps({split: sorted(c.items()) for split, c in sorted(self.records.items())})
        return hashlib.sha256(text.encode()).hexdigest()


def read_version(out: Path, version: str | None = None) -> Reading:
    """The published version of `out` (or the kept `version`) as a user reads it; raises what the readers raise."""
    from shardsmith.format.example import parse_example
    from shardsmith.format.tfrecord import iter_records
    from shardsmith.output_folder.opening import open_version
    from shardsmith.read.version_files import split_shards

    opened = open_version(out, version)
    metadata = opened.metadata
    folder = Path(opened.folder)
    files = out / "builds" / metadata.build_id if opened.build_id is None else folder
    reading = Reading(metadata.build_id)
    for split in metadata.splits:
        counter: Counter = Counter()
        for shard in split_shards(str(folder), metadata, split):
            with open(shard.path, "rb") as stream:
                for record in iter_records(stream):
                    digest = hashlib.sha256(record).hexdigest()
                    counter[digest] += 1
                    if digest not in reading.described:
                        example = parse_example(record)
                        reading.uris[digest] = _text(example, "image/filename")
                        reading.described[digest] = (
                            f"{_text(example, 'image/filename')} (label {_ints(example, 'image/class/label')} "
                            f"{_text(example, 'image/class/text')}, sha {_text(example, 'image/key/sha256')[:8]})")
        reading.records[split] = counter
    reading.labels_txt = (files / "labels.txt").read_text(encoding="utf-8")
    errors = files / "errors.jsonl"
    if errors.exists():
        for text in errors.read_text(encoding="utf-8").splitlines():
            if text.strip():
                entry = json.loads(text)
                line = entry.pop("line", None)
                reading.error_lines[(entry.get("uri"), entry.get("split"), entry.get("label"), line)] += 1
                reading.errors[PUBLISHED_IN.sub("", json.dumps(entry, sort_keys=True, ensure_ascii=False))] += 1
                if entry.get("reason") == NEAR_DROPPED:
                    kept = KEPT_COPY.match(entry.get("detail", ""))
                    reading.near_dropped.add(((entry.get("uri"), entry.get("split")),
                                              (kept.group(1), kept.group(2)) if kept else ("", "")))
                    if PUBLISHED_IN.search(entry.get("detail", "")):
                        reading.kept_published.add((entry.get("uri"), entry.get("split")))
    raw = json.loads((files / "metadata.json").read_text(encoding="utf-8"))
    reading.duplicates = raw.get("duplicates") or {}
    reading.near_duplicates = {key: (raw.get("near_duplicates") or {}).get(key) for key in NEAR_DUPLICATE_FIELDS}
    reading.counts = {key: raw.get(key) for key in COUNT_FIELDS}
    reading.counts["splits"] = {split: {"num_examples": entry["num_examples"], "label_counts": entry["label_counts"]}
                                for split, entry in raw["splits"].items()}
    return reading


def _text(example: dict[str, list], key: str) -> str:
    values = example.get(key) or [b""]
    return values[0].decode("utf-8", "replace")


def _ints(example: dict[str, list], key: str) -> list[int]:
    return list(example.get(key) or [])


def differences(version: Reading, full: Reading, built_now: bool) -> list[str]:
    """How the version reads differently from the full build of its rows, one line each (none: the same).
    `built_now`: the version was built from the manifest as it is, so its errors name the rows' lines too (a
    night that changed nothing keeps a version whose errors name the lines of the manifest it was built from)."""
    swapped = kept_published(version, full)
    if swapped:
        version, full = without(version, swapped), without(full, swapped)
    found = []
    if built_now and version.error_lines != full.error_lines:
        extra, missing = version.error_lines - full.error_lines, full.error_lines - version.error_lines
        found.append(f"errors.jsonl's lines: only in the version {sorted(extra, key=str)[:MAX_SHOWN]}, "
                     f"only in the full build {sorted(missing, key=str)[:MAX_SHOWN]}")
    for split in sorted(set(version.records) | set(full.records)):
        mine, theirs = version.records.get(split, Counter()), full.records.get(split, Counter())
        if mine != theirs:
            extra = [version.described.get(d, d) for d in (mine - theirs).elements()]
            missing = [full.described.get(d, d) for d in (theirs - mine).elements()]
            found.append(f"{split} records: {len(extra)} only in the version {sorted(extra)[:MAX_SHOWN]}, "
                         f"{len(missing)} only in the full build {sorted(missing)[:MAX_SHOWN]}")
    if version.labels_txt != full.labels_txt:
        found.append(f"labels.txt: {version.labels_txt.split()} against {full.labels_txt.split()}")
    if version.errors != full.errors:
        extra, missing = version.errors - full.errors, full.errors - version.errors
        found.append(f"errors.jsonl: only in the version {sorted(extra.elements())[:MAX_SHOWN]}, "
                     f"only in the full build {sorted(missing.elements())[:MAX_SHOWN]}")
    for name in ("duplicates", "near_duplicates", "counts") if not swapped else ("near_duplicates",):
        mine, theirs = getattr(version, name), getattr(full, name)
        if mine != theirs:
            keys = sorted(key for key in set(mine) | set(theirs) if mine.get(key) != theirs.get(key))
            found.append(f"{name}: " + "; ".join(f"{key} {mine.get(key)!r} against {theirs.get(key)!r}"
                                                  for key in keys[:MAX_SHOWN]))
    return found


def kept_published(version: Reading, full: Reading) -> set[str]:
    """The URIs of near-duplicate groups a night decided apart from a full build, by its rule (docs/
    near_duplicates.md): a new training copy of published validation/test records is dropped and the published
    records stay, where a full build keeps the training image and drops its validation/test copies. A group is
    what the drops of the two readings connect (each drop joins the copy dropped and the copy kept); a group in
    which the version dropped a copy for a published record where the full build did not is left out. Empty
    where the drops are the same."""
    parent: dict[tuple[str, str], tuple[str, str]] = {}

    def root(node: tuple[str, str]) -> tuple[str, str]:
        while parent.setdefault(node, node) != node:
            node = parent[node]
        return node

    for dropped, kept in version.near_dropped | full.near_dropped:
        parent[root(dropped)] = root(kept)
    decided = {root(dropped) for dropped, _ in version.near_dropped - full.near_dropped
               if dropped in version.kept_published}
    return {uri for (uri, _split) in list(parent) if root((uri, _split)) in decided}


def without(reading: Reading, uris: set[str]) -> Reading:
    """`reading` less the records and errors of `uris` (and the counts they change, which are then not compared)."""
    records = {split: Counter({d: n for d, n in counter.items() if reading.uris.get(d) not in uris})
               for split, counter in reading.records.items()}
    errors = Counter({e: n for e, n in reading.errors.items() if json.loads(e).get("uri") not in uris})
    lines = Counter({key: n for key, n in reading.error_lines.items() if key[0] not in uris})
    return replace(reading, records=records, errors=errors, error_lines=lines)
