"""The dataset's side files, read and written here only: metadata.json, labels.txt, errors.jsonl and
near_duplicates.jsonl.

`read_metadata` is the one reader of metadata.json (the build's summary, `load()`, `verify`, `inspect`, the
output folder's scan); each caller turns MetadataError into its own kind of failure. Text files are UTF-8 and
split on "\\n" only, so a label holding another Unicode line separator (U+2028, U+0085) reads back as written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields

from shardsmith import storage
from shardsmith.format.naming import METADATA_FILE, index_file_name, join

# The keys every shardsmith metadata.json has; a JSON file without them is not one.
REQUIRED_KEYS = ("name", "splits", "labels", "features")
# metadata.json's summary of near-duplicate pairs (only with --near_duplicates report|drop).
NEAR_DUPLICATES_KEY = "near_duplicates"


@dataclass(frozen=True)
class NearDuplicatesEntry:
    """metadata.json's `near_duplicates` entry: how pairs were found and how many, per split pair. Written by
    transforms/near_duplicates.py, read by the build's summary and `inspect`; the field names are the JSON keys."""

    mode: str  # report | drop
    max_distance: int
    hash: str
    min_structure_similarity: float | None  # None: a build from before pairs were confirmed
    low_detail_min_structure_similarity: float | None  # None: a build from before the stricter low-detail test
    num_low_detail_pairs: int
    num_pairs: int
    num_listed: int  # pairs in `file`, the closest first
    file: str
    split_pairs: dict[str, int]  # "train-test", "train-validation", "validation-test", then pairs within a split
    num_label_mismatches: int
    label_mismatches: list[dict] = field(default_factory=list)
    num_dropped: int = 0
    num_capped_buckets: int = 0
    max_bucket_members: int = 0
    capped_buckets: list[dict] = field(default_factory=list)
    max_bucket_candidates: int = 0  # 0: a build from before buckets were capped by their candidates too
    # Rows with one signature, from this many on, are one group compared once (shardsmith/core/identical_groups.py);
    # 0 and no groups: a build from before.
    identical_group_min_size: int = 0
    num_identical_groups: int = 0
    num_identical_images: int = 0  # rows in those groups
    identical_groups: list[dict] = field(default_factory=list)  # the largest: size, splits, examples

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, metadata: dict) -> NearDuplicatesEntry | None:
        """The entry of a parsed metadata.json; None when the build ran without --near_duplicates."""
        entry = metadata.get(NEAR_DUPLICATES_KEY)
        if entry is None:
            return None
        defaults = {"min_structure_similarity": None, "low_detail_min_structure_similarity": None,
                    "num_low_detail_pairs": 0}
        return cls(**(defaults | {f.name: entry[f.name] for f in fields(cls) if f.name in entry}))

    def split_pairs_text(self) -> str:
        """'train-test 2, validation-test 1': the split pairs that hold pairs, in the entry's order."""
        return ", ".join(f"{name} {n}" for name, n in self.split_pairs.items() if n)


class MetadataError(ValueError):
    """metadata.json is missing, unreadable or not shardsmith's; the message says which, in one line."""


class MetadataMissing(MetadataError):
    """The folder holds no metadata.json: no finished dataset."""


def read_metadata(folder: str, read_bytes: Callable[[str], bytes | None] | None = None) -> dict:
    """The metadata.json of `folder` (a dataset, or one build's folder), parsed and checked to be shardsmith's.
    `read_bytes(path)` returns a file's bytes or None when it does not exist (default: local files and gs://,
    shardsmith.storage.read_bytes)."""
    path = join(folder, METADATA_FILE)
    data = (read_bytes or storage.read_bytes)(path)
    if data is None:
        raise MetadataMissing(f"{folder.rstrip('/')} holds no finished shardsmith dataset: {path} does not exist")
    return parse_metadata(data, path)


def parse_metadata(data: bytes, path: str = METADATA_FILE) -> dict:
    """metadata.json's bytes as a dict; MetadataError when they are not JSON or not shardsmith's."""
    try:
        metadata = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise MetadataError(f"{path} is not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise MetadataError(f"{path} is not valid JSON (line {e.lineno} column {e.colno}): {e.msg}") from None
    if not isinstance(metadata, dict):
        raise MetadataError(f"{path} holds {_described(metadata)}, not a JSON object: not a shardsmith metadata.json")
    missing = [key for key in REQUIRED_KEYS if key not in metadata]
    if missing:
        raise MetadataError(f"{path} has no {', '.join(map(repr, missing))} entr{'y' if len(missing) == 1 else 'ies'}")
    return metadata


FEATURE_KINDS = ("bytes", "int64", "float")  # and each with "_list"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def check_readable(metadata: dict, path: str = METADATA_FILE) -> None:
    """Checks that every entry the read side (`load()`, `verify`, `inspect`) takes from a parsed metadata.json
    is there with its type; raises MetadataError naming the first that is not, as a JSON path
    (`splits.train.shards[1].num_bytes`). Entries added later (a shard's `sha256`, `first_key`, `index`) may be
    absent."""
    at = _Entries(path)
    at.text(metadata, "name")
    for index, label in enumerate(at.typed(metadata, "labels", list, "a list")):
        at.check(isinstance(label, str), f"labels[{index}]", label, "a string")
    for key, kind in at.typed(metadata, "features", dict, "an object").items():
        at.check(isinstance(kind, str) and kind.removesuffix("_list") in FEATURE_KINDS, f"features.{key}", kind,
                 f"one of {', '.join(FEATURE_KINDS)} (or a _list of one)")
    at.count(metadata, "num_examples")
    if "compression" in metadata:
        at.check(metadata["compression"] in ("none", "gzip"), "compression", metadata["compression"],
                 "none or gzip")
    for split, info in at.typed(metadata, "splits", dict, "an object").items():
        where = f"splits.{split}"
        at.check(isinstance(info, dict), where, info, "an object")
        at.count(info, "num_examples", where)
        at.count(info, "num_bytes", where)
        at.counts(info, where)
        for index, shard in enumerate(at.typed(info, "shards", list, "a list", where)):
            shard_at = f"{where}.shards[{index}]"
            at.check(isinstance(shard, dict), shard_at, shard, "an object")
            at.text(shard, "file", shard_at)
            at.count(shard, "num_examples", shard_at)
            at.count(shard, "num_bytes", shard_at)
            at.counts(shard, shard_at)
            if "sha256" in shard:
                at.check(isinstance(shard["sha256"], str) and SHA256_HEX.fullmatch(shard["sha256"]) is not None,
                         f"{shard_at}.sha256", shard["sha256"], "64 hex digits")
            if shard.get("first_key") is not None:
                at.check(isinstance(shard["first_key"], str), f"{shard_at}.first_key", shard["first_key"],
                         "a string or null")
            if shard.get("index") is not None:
                at.check(shard["index"] == index_file_name(shard["file"]), f"{shard_at}.index", shard["index"],
                         f"null or {index_file_name(shard['file'])!r}")


@dataclass(frozen=True)
class _Entries:
    """check_readable's helpers: each raises MetadataError saying which entry of which file is wrong."""

    path: str

    def check(self, holds: bool, where: str, value, expected: str) -> None:
        if not holds:
            raise MetadataError(f"{self.path}: {where} is {_described(value)}, not {expected}")

    def typed(self, container: dict, key: str, kind: type, expected: str, where: str = ""):
        if key not in container:
            raise MetadataError(f"{self.path}{': ' + where if where else ''} has no {key!r} entry")
        value = container[key]
        self.check(isinstance(value, kind), f"{where}.{key}" if where else key, value, expected)
        return value

    def text(self, container: dict, key: str, where: str = "") -> None:
        self.typed(container, key, str, "a string", where)

    def count(self, container: dict, key: str, where: str = "") -> None:
        value = self.typed(container, key, object, "", where)
        self.check(isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                   f"{where}.{key}" if where else key, value, "a whole number")

    def counts(self, container: dict, where: str) -> None:
        """`label_counts`: label -> whole number."""
        for label, n in self.typed(container, "label_counts", dict, "an object", where).items():
            self.check(isinstance(n, int) and not isinstance(n, bool) and n >= 0, f"{where}.label_counts.{label}",
                       n, "a whole number")


def _described(value) -> str:
    """A JSON value as a message names it: short strings and numbers as they are, containers by kind."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def metadata_bytes(metadata: dict) -> bytes:
    """metadata.json as written: indented, keys in insertion order, UTF-8, a final newline."""
    return (json.dumps(metadata, indent=2, sort_keys=False, ensure_ascii=False) + "\n").encode("utf-8")


def labels_bytes(labels: Iterable[str]) -> bytes:
    """labels.txt: one label per line, in id order."""
    return "".join(label + "\n" for label in labels).encode("utf-8")


def parse_labels(data: bytes) -> list[str]:
    """labels.txt's labels, in id order."""
    text = data.decode("utf-8")
    return text.removesuffix("\n").split("\n") if text else []


def errors_bytes(errors: Iterable[dict]) -> bytes:
    """errors.jsonl: one JSON object per line (keys sorted, UTF-8 as is), in the order given."""
    return "".join(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n" for e in errors).encode("utf-8")


def parse_errors(data: bytes) -> list[dict]:
    """errors.jsonl's objects, in file order. Raises ValueError (json.JSONDecodeError) on a line that is not JSON."""
    return [json.loads(line) for line in data.decode("utf-8").split("\n") if line.strip()]


def near_duplicates_bytes(pairs: Iterable[dict]) -> bytes:
    """near_duplicates.jsonl: one pair per line (keys sorted, UTF-8 as is), closest first, as given."""
    return errors_bytes(pairs)


def parse_near_duplicates(data: bytes) -> list[dict]:
    """near_duplicates.jsonl's pairs, in file order."""
    return parse_errors(data)
