"""metadata.json's bytes: the one place that writes a Metadata as JSON (`metadata_bytes`) and parses it back
(`parse_metadata`), and the check that every entry the read side takes is there with its type (`check_readable`).

Guarantees: `metadata_bytes` of a build's metadata is byte for byte what builds wrote before there was a schema
(the same keys in the same order, indented by 2, UTF-8 as is, a final newline); `parse_metadata` reads every
metadata.json shardsmith ever wrote, and anything else raises MetadataError in one line naming the file.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from shardsmith.format.file_checksum import CRC32C_HEX
from shardsmith.format.indented_json import dumps_indented
from shardsmith.format.metadata_schema.entries import Metadata
from shardsmith.format.metadata_schema.json_entry import MetadataError, described, json_path
from shardsmith.format.naming import METADATA_FILE

# The keys every shardsmith metadata.json has; a JSON file without them is not one.
REQUIRED_KEYS = ("name", "splits", "labels", "features")
FEATURE_KINDS = ("bytes", "int64", "float")  # and each with "_list"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def metadata_bytes(metadata: Metadata) -> bytes:
    """metadata.json as written: indented, keys in the schema's (or the read file's) order, UTF-8, a final
    newline."""
    return (dumps_indented(metadata.to_json()) + "\n").encode("utf-8")


def parse_metadata(data: bytes, path: str = METADATA_FILE, readable: bool = False) -> Metadata:
    """metadata.json's bytes as a Metadata; MetadataError (one line naming `path`) when they are not JSON or not
    shardsmith's, or, with `readable`, when an entry the read side takes is missing or of the wrong type."""
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise MetadataError(f"{path} is not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise MetadataError(f"{path} is not valid JSON (line {e.lineno} column {e.colno}): {e.msg}") from None
    if not isinstance(raw, dict):
        raise MetadataError(f"{path} holds {described(raw)}, not a JSON object: not a shardsmith metadata.json")
    missing = [key for key in REQUIRED_KEYS if key not in raw]
    if missing:
        raise MetadataError(f"{path} has no {', '.join(map(repr, missing))} entr{'y' if len(missing) == 1 else 'ies'}")
    if readable:
        check_readable(raw, path)
    return Metadata.from_json(raw, "", path)


def check_readable(metadata: dict, path: str = METADATA_FILE) -> None:
    """Checks that every entry the read side (`load()`, `verify`, `inspect`) takes from a metadata.json object
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
            if "crc32c" in shard:
                at.check(isinstance(shard["crc32c"], str) and CRC32C_HEX.fullmatch(shard["crc32c"]) is not None,
                         f"{shard_at}.crc32c", shard["crc32c"], "8 hex digits")
            if shard.get("first_key") is not None:
                at.check(isinstance(shard["first_key"], str), f"{shard_at}.first_key", shard["first_key"],
                         "a string or null")
            if shard.get("index") is not None:  # readers find it by the shard's name (index_file_name)
                at.check(isinstance(shard["index"], str), f"{shard_at}.index", shard["index"], "a string or null")
            if "build" in shard:
                at.check(isinstance(shard["build"], str), f"{shard_at}.build", shard["build"], "a build id")


@dataclass(frozen=True)
class _Entries:
    """check_readable's helpers: each raises MetadataError saying which entry of which file is wrong."""

    path: str

    def check(self, holds: bool, where: str, value, expected: str) -> None:
        if not holds:
            raise MetadataError(f"{self.path}: {where} is {described(value)}, not {expected}")

    def typed(self, container: dict, key: str, kind: type, expected: str, where: str = ""):
        if key not in container:
            raise MetadataError(f"{self.path}{': ' + where if where else ''} has no {key!r} entry")
        value = container[key]
        self.check(isinstance(value, kind), json_path(where, key), value, expected)
        return value

    def text(self, container: dict, key: str, where: str = "") -> None:
        self.typed(container, key, str, "a string", where)

    def count(self, container: dict, key: str, where: str = "") -> None:
        value = self.typed(container, key, object, "", where)
        self.check(isinstance(value, int) and not isinstance(value, bool) and value >= 0, json_path(where, key), value,
                   "a whole number")

    def counts(self, container: dict, where: str) -> None:
        """`label_counts`: label -> whole number."""
        for label, n in self.typed(container, "label_counts", dict, "an object", where).items():
            self.check(isinstance(n, int) and not isinstance(n, bool) and n >= 0, f"{where}.label_counts.{label}",
                       n, "a whole number")
