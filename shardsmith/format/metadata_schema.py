"""metadata.json's schema: typed entries for the whole document, and the one place that turns it into JSON and
back. Pure: dataclasses and JSON, no file access (shardsmith/format/metadata.py reads and writes the file).

Guarantees:
- `metadata_bytes(Metadata)` of a build's metadata is byte for byte what builds wrote before there was a
  schema: the same keys in the same order, indented by 2, UTF-8 as is, a final newline.
- `parse_metadata` reads every metadata.json shardsmith ever wrote (tests/data/metadata/ holds one of each
  layout): an entry a layout lacks reads as None (or its empty default) and is not written back.
- A key this version does not know is kept (`extra`) and written back where it was; a document read and written
  again keeps its key order.
"""

from __future__ import annotations

import json
import re
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from shardsmith.format.file_checksum import CRC32C_HEX
from shardsmith.format.indented_json import dumps_indented
from shardsmith.format.naming import METADATA_FILE

# The keys every shardsmith metadata.json has; a JSON file without them is not one.
REQUIRED_KEYS = ("name", "splits", "labels", "features")
FEATURE_KINDS = ("bytes", "int64", "float")  # and each with "_list"
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


class MetadataError(ValueError):
    """metadata.json is missing, unreadable or not shardsmith's; the message says which, in one line."""


class MetadataMissing(MetadataError):
    """The folder holds no metadata.json: no finished dataset."""


# The entries' common part ----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class _Entry:
    """An object of metadata.json. Field names are its JSON keys; `extra` holds keys this version does not know
    and `read_keys` the keys of the object as read (empty for one the build made), which decide what is written
    back: a built entry writes every field (None ones only where `NULLABLE`), a read one the keys it had (and a
    field set since)."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset()  # written as null rather than left out
    NESTED: ClassVar[dict[str, Any]] = {}  # field -> how its JSON value becomes typed (_entry, _list_of, _map_of)

    extra: dict[str, Any] = field(default_factory=dict, repr=False)
    read_keys: tuple[str, ...] = field(default=(), repr=False, compare=False)

    def to_json(self) -> dict:
        """This entry as a JSON object (new containers throughout: editing it leaves the entry unchanged)."""
        known = {}
        for f in _schema_fields(type(self)):
            value = getattr(self, f.name)
            if self._written(f, value):
                known[f.name] = _encode(value)
        if not self.read_keys:
            return known | {k: _encode(v) for k, v in self.extra.items()}
        ordered = {}
        for key in self.read_keys:
            if key in known:
                ordered[key] = known.pop(key)
            elif key in self.extra:
                ordered[key] = _encode(self.extra[key])
        return ordered | known | {k: _encode(v) for k, v in self.extra.items() if k not in ordered}

    def _written(self, f, value) -> bool:
        if value is None:
            return f.name in self.NULLABLE and (not self.read_keys or f.name in self.read_keys)
        if self.read_keys and f.name not in self.read_keys:
            return value != _default(f)  # a layout without the key: write it only when set since
        return True

    @classmethod
    def from_json(cls, raw: Any, where: str = "", path: str = METADATA_FILE):
        """The entry of a JSON object read from `path` at `where` (a JSON path, for messages). Values are taken
        as they are (`check_readable` checks the types the read side needs); MetadataError when `raw`, a
        container the schema nests, or a required entry is not there."""
        _require(isinstance(raw, dict), path, where, raw, "an object")
        names = {f.name: f for f in _schema_fields(cls)}
        values = {}
        for key, value in raw.items():
            if key in names:
                decode = cls.NESTED.get(key)
                values[key] = value if decode is None or value is None else decode(value, _at(where, key), path)
        missing = [n for n, f in names.items() if n not in values and _default(f) is MISSING]
        if missing:
            raise MetadataError(f"{path}{': ' + where if where else ''} has no {missing[0]!r} entry")
        return cls(**values, extra={k: v for k, v in raw.items() if k not in names}, read_keys=tuple(raw))


def _schema_fields(cls) -> list:
    return [f for f in fields(cls) if f.name not in ("extra", "read_keys")]


def _default(f):
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _encode(value):
    if isinstance(value, _Entry):
        return value.to_json()
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _require(holds: bool, path: str, where: str, value, expected: str) -> None:
    if not holds:
        raise MetadataError(f"{path}: {where or 'the document'} is {described(value)}, not {expected}")


def _entry(cls):
    return lambda raw, where, path: cls.from_json(raw, where, path)


def _list_of(cls):
    def decode(raw, where: str, path: str) -> list:
        _require(isinstance(raw, list), path, where, raw, "a list")
        return [cls.from_json(item, f"{where}[{i}]", path) for i, item in enumerate(raw)]
    return decode


def _map_of(cls):
    def decode(raw, where: str, path: str) -> dict:
        _require(isinstance(raw, dict), path, where, raw, "an object")
        return {key: cls.from_json(item, _at(where, key), path) for key, item in raw.items()}
    return decode


# The entries -------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class ShardEntry(_Entry):
    """One shard file of a split, and what it must be (docs/format.md, "Shard identity")."""

    NULLABLE: ClassVar[frozenset[str]] = frozenset({"first_key", "index"})

    file: str
    num_examples: int | None = None
    num_bytes: int | None = None
    label_counts: dict[str, int] = field(default_factory=dict)
    sha256: str | None = None  # the file's SHA-256: builds before `crc32c` (None: before shards were hashed)
    crc32c: str | None = None  # the file's CRC32C, 8 hex digits (format/file_checksum.py); None: written before
    first_key: str | None = None  # the first record's image/key/sha256; None for an empty shard (or as sha256)
    index: str | None = None  # its index file (<file>.idx); None for a gzip shard, or written before index files
    # --incremental: the build whose folder holds the file, when it is not the version's own (a shard carried over
    # from an earlier generation); None: the version's own folder
    build: str | None = None

    def _written(self, f, value) -> bool:
        if f.name == "first_key" and not self.read_keys:
            return self.sha256 is not None or self.crc32c is not None  # first_key came with the file's checksum
        return super()._written(f, value)


@dataclass(kw_only=True)
class SplitEntry(_Entry):
    """One split: its records, bytes and labels, what placement planned, and its shards in order."""

    NESTED: ClassVar[dict[str, Any]] = {"shards": _list_of(ShardEntry)}

    num_examples: int | None = None
    num_bytes: int | None = None
    num_shards: int | None = None
    num_placed: int | None = None  # rows placed before the images were read
    source_bytes: int | None = None
    label_counts: dict[str, int] = field(default_factory=dict)
    shards: list[ShardEntry] = field(default_factory=list)

    @classmethod
    def of_shards(cls, shards: list[ShardEntry], labels: list[str] | tuple[str, ...], **placed) -> SplitEntry:
        """The entry of a split made of `shards`: its counts are their sums, its label counts in id order
        (`labels`), without labels it holds none of; `placed`: num_shards, num_placed, source_bytes."""
        label_counts: dict[str, int] = {}
        for shard in shards:
            for label, n in shard.label_counts.items():
                label_counts[label] = label_counts.get(label, 0) + n
        return cls(num_examples=sum(s.num_examples for s in shards), num_bytes=sum(s.num_bytes for s in shards),
                   label_counts={label: label_counts[label] for label in labels if label_counts.get(label)},
                   shards=shards, **placed)


@dataclass(kw_only=True)
class LookAlikeLabels(_Entry):
    """One group of `look_alike_labels`: labels that print alike but are different strings (shardsmith/manifest/
    look_alike_labels.py): `kind` "unicode" (equal once NFC-normalized) or "case" (equal but for case, where the
    other labels are all one case), and each label's records."""

    kind: str
    labels: list[str]
    records: list[int]


@dataclass(kw_only=True)
class DuplicateCopy(_Entry):
    split: str
    uri: str


@dataclass(kw_only=True)
class DuplicateGroup(_Entry):
    """One image that occurs more than once: its SHA-256 and every copy."""

    NESTED: ClassVar[dict[str, Any]] = {"copies": _list_of(DuplicateCopy)}

    sha256: str
    copies: list[DuplicateCopy] = field(default_factory=list)


@dataclass(kw_only=True)
class DuplicatesEntry(_Entry):
    """`duplicates`: identical images, found by SHA-256 of the bytes (transforms/duplicates.py)."""

    NESTED: ClassVar[dict[str, Any]] = {"examples": _list_of(DuplicateGroup)}

    num_groups: int = 0  # distinct images that occur more than once
    num_extra_copies: int = 0  # rows beyond the first of each group
    num_groups_across_splits: int = 0
    split_pairs: dict[str, int] = field(default_factory=dict)  # "test+train" -> groups spanning both, sorted
    examples: list[DuplicateGroup] = field(default_factory=list)  # at most 20, the smallest hashes


@dataclass(kw_only=True)
class NearDuplicatesEntry(_Entry):
    """`near_duplicates`: how pairs were found and how many, per split pair (only with --near_duplicates
    report|drop; transforms/near_duplicates.py). Entries from before a field existed read with its default."""

    mode: str  # report | drop
    max_distance: int
    hash: str
    min_structure_similarity: float | None = None  # None: a build from before pairs were confirmed
    low_detail_min_structure_similarity: float | None = None  # None: before the stricter low-detail test
    num_low_detail_pairs: int = 0
    num_pairs: int = 0
    num_listed: int = 0  # pairs in `file`, the closest first
    file: str = ""
    split_pairs: dict[str, int] = field(default_factory=dict)  # "train-test", ..., then pairs within a split
    num_label_mismatches: int = 0
    label_mismatches: list[dict] = field(default_factory=list)
    num_dropped: int = 0
    num_capped_buckets: int = 0
    max_bucket_members: int = 0
    capped_buckets: list[dict] = field(default_factory=list)
    max_bucket_candidates: int = 0  # 0: a build from before buckets were capped by their candidates too
    # Rows with one signature, from this many on, are one group compared once
    # (shardsmith/near_duplicates/identical_signatures.py); 0 and no groups: a build from before.
    identical_group_min_size: int = 0
    num_identical_groups: int = 0
    num_identical_images: int = 0  # rows in those groups
    identical_groups: list[dict] = field(default_factory=list)  # the largest: size, splits, examples
    # Only an --incremental night's entry has these (None, not written, for a build of all its rows): the version
    # its new images were compared with, its records compared (their row lists hold a signature) and not (lists
    # from a build without --near_duplicates, or rebuilt from a shard), the pairs of a new image and a published
    # record, and the hash comparisons a bucket may cost before it is capped.
    published_version: str | None = None
    num_published_compared: int | None = None
    num_published_not_compared: int | None = None
    num_published_pairs: int | None = None
    max_bucket_comparisons: int | None = None

    def split_pairs_text(self) -> str:
        """'train-test 2, validation-test 1': the split pairs that hold pairs, in the entry's order."""
        return ", ".join(f"{name} {n}" for name, n in self.split_pairs.items() if n)


@dataclass(kw_only=True)
class ManifestDigestEntry(_Entry):
    """`incremental.manifest`: the one manifest file a version was built from, as read: its first `bytes` bytes
    (ending with a line end), their SHA-256, the lines they hold and the data rows among them. A night whose
    manifest starts with these bytes reads only what follows them (and the rows that failed): shardsmith/
    manifest/appended.py."""

    bytes: int
    sha256: str
    lines: int
    rows: int


@dataclass(kw_only=True)
class IncrementalEntry(_Entry):
    """`incremental`: a version made by `--incremental` (its shards' rows are listed, so the next incremental
    build can tell new rows from carried ones): the version it was built on and how the rows changed."""

    NESTED: ClassVar[dict[str, Any]] = {"manifest": _entry(ManifestDigestEntry)}

    previous: str | None = None  # the version this one was built on; None: the first, a full build
    num_carried_rows: int = 0  # manifest rows whose records the previous version holds: kept, not read
    num_added_rows: int = 0  # manifest rows the previous version holds no record for: read (records or errors)
    num_added_records: int | None = None  # records made of them (None: written before the field)
    num_failed_again: int = 0  # of the added rows' errors, rows that failed in the previous version too
    num_removed_rows: int = 0  # rows of the previous version's records that the manifest no longer lists
    num_removed_records: int | None = None  # records those rows made (None: written before the field)
    num_rewritten_shards: int = 0  # shards of earlier generations rewritten, from their records, without them
    num_images_read: int = 0  # images this build read: its new records and the images rejected as read
    generation: int = 1  # this build's generation: its new shards' names carry the number (from 2 on)
    generations: int = 1  # generations whose shards make up this version
    manifest: ManifestDigestEntry | None = None  # None: several manifests, a folder, Parquet, or none recorded
    appended: bool = False  # the manifest started with the previous version's: only the lines after it were parsed


@dataclass(kw_only=True)
class Metadata(_Entry):
    """The whole of metadata.json (docs/format.md, "metadata.json"). The errors summary is `num_errors` and
    `errors_by_reason`; `options` is every build option as used, an ordered mapping carried as the build gave
    it. `build_id`/`build_dir` are set when the build is published (shardsmith/output_folder/publishing.py)."""

    NESTED: ClassVar[dict[str, Any]] = {
        "splits": _map_of(SplitEntry),
        "duplicates": _entry(DuplicatesEntry),
        "near_duplicates": _entry(NearDuplicatesEntry),
        "incremental": _entry(IncrementalEntry),
        "look_alike_labels": _list_of(LookAlikeLabels),
    }

    name: str
    format: str | None = None
    compression: str | None = None  # None: "none", from before the entry existed
    image_mode: str | None = None
    seed: int | None = None
    options: dict[str, Any] | None = None
    labels: list[str]
    labels_taken_from: str | None = None
    look_alike_labels: list[LookAlikeLabels] | None = None  # None: no labels look alike (or an older build)
    label_image_counts: list[int] | None = None  # picks the label that places a multi-label row
    task: str | None = None  # None: "classification", from before the entry existed
    features: dict[str, str]
    num_input_rows: int | None = None
    num_examples: int | None = None
    num_example_rows: int | None = None  # None: as num_examples, from before detection
    num_errors: int | None = None
    errors_by_reason: dict[str, int] | None = None
    duplicates: DuplicatesEntry | None = None
    near_duplicates: NearDuplicatesEntry | None = None
    splits: dict[str, SplitEntry]
    incremental: IncrementalEntry | None = None
    build_id: str | None = None
    build_dir: str | None = None  # builds/<id> in the top-level file, "." in a build's own; None: no builds yet

    @property
    def compression_or_default(self) -> str:
        return self.compression or "none"

    @property
    def task_or_default(self) -> str:
        return self.task or "classification"

    @property
    def error_count(self) -> int:
        """Rows that did not become records (0 in a layout without the count)."""
        return self.num_errors or 0

    @property
    def is_published(self) -> bool:
        """Whether this is a top-level metadata.json that names a build folder (not a build's own copy)."""
        return (self.build_dir or ".") != "."

    def all_shards(self) -> list[tuple[str, ShardEntry]]:
        """(split, shard) for every shard, splits in their order, shards in theirs."""
        return [(split, shard) for split, info in self.splits.items() for shard in info.shards]


# Bytes -------------------------------------------------------------------------------------------------------


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
        self.check(isinstance(value, kind), _at(where, key), value, expected)
        return value

    def text(self, container: dict, key: str, where: str = "") -> None:
        self.typed(container, key, str, "a string", where)

    def count(self, container: dict, key: str, where: str = "") -> None:
        value = self.typed(container, key, object, "", where)
        self.check(isinstance(value, int) and not isinstance(value, bool) and value >= 0, _at(where, key), value,
                   "a whole number")

    def counts(self, container: dict, where: str) -> None:
        """`label_counts`: label -> whole number."""
        for label, n in self.typed(container, "label_counts", dict, "an object", where).items():
            self.check(isinstance(n, int) and not isinstance(n, bool) and n >= 0, f"{where}.label_counts.{label}",
                       n, "a whole number")


def described(value) -> str:
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
