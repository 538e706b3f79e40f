"""The metadata schema, defined in one place: every entry of metadata.json (`Metadata`, its splits and shards, the
duplicates, near duplicates, look-alike labels and incremental entries) as a typed dataclass.

Guarantee: each key of metadata.json is a field here, named as the key, in the order builds write it; an entry a
layout lacks reads as None (or its empty default). How an entry becomes JSON and back: json_entry.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from shardsmith.format.metadata_schema.json_entry import Entry, entry_of, list_of, map_of


@dataclass(kw_only=True)
class ShardEntry(Entry):
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
class SplitEntry(Entry):
    """One split: its records, bytes and labels, what placement planned, and its shards in order."""

    NESTED: ClassVar[dict[str, Any]] = {"shards": list_of(ShardEntry)}

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
class LookAlikeLabels(Entry):
    """One group of `look_alike_labels`: labels that print alike but are different strings (shardsmith/manifest/
    look_alike_labels.py): `kind` "unicode" (equal once NFC-normalized) or "case" (equal but for case, where the
    other labels are all one case), and each label's records."""

    kind: str
    labels: list[str]
    records: list[int]


@dataclass(kw_only=True)
class DuplicateCopy(Entry):
    split: str
    uri: str


@dataclass(kw_only=True)
class DuplicateGroup(Entry):
    """One image that occurs more than once: its SHA-256 and every copy."""

    NESTED: ClassVar[dict[str, Any]] = {"copies": list_of(DuplicateCopy)}

    sha256: str
    copies: list[DuplicateCopy] = field(default_factory=list)


@dataclass(kw_only=True)
class DuplicatesEntry(Entry):
    """`duplicates`: identical images, found by SHA-256 of the bytes (transforms/duplicates.py)."""

    NESTED: ClassVar[dict[str, Any]] = {"examples": list_of(DuplicateGroup)}

    num_groups: int = 0  # distinct images that occur more than once
    num_extra_copies: int = 0  # rows beyond the first of each group
    num_groups_across_splits: int = 0
    split_pairs: dict[str, int] = field(default_factory=dict)  # "test+train" -> groups spanning both, sorted
    examples: list[DuplicateGroup] = field(default_factory=list)  # at most 20, the smallest hashes


@dataclass(kw_only=True)
class NearDuplicatesEntry(Entry):
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
class ManifestDigestEntry(Entry):
    """`incremental.manifest`: the one manifest file a version was built from, as read: its first `bytes` bytes
    (ending with a line end), their SHA-256, the lines they hold and the data rows among them. A night whose
    manifest starts with these bytes reads only what follows them (and the rows that failed): shardsmith/
    manifest/appended.py."""

    bytes: int
    sha256: str
    lines: int
    rows: int


@dataclass(kw_only=True)
class IncrementalEntry(Entry):
    """`incremental`: a version made by `--incremental` (its shards' rows are listed, so the next incremental
    build can tell new rows from carried ones): the version it was built on and how the rows changed."""

    NESTED: ClassVar[dict[str, Any]] = {"manifest": entry_of(ManifestDigestEntry)}

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
class Metadata(Entry):
    """The whole of metadata.json (docs/format.md, "metadata.json"). The errors summary is `num_errors` and
    `errors_by_reason`; `options` is every build option as used, an ordered mapping carried as the build gave
    it. `build_id`/`build_dir` are set when the build is published (shardsmith/output_folder/publishing.py)."""

    NESTED: ClassVar[dict[str, Any]] = {
        "splits": map_of(SplitEntry),
        "duplicates": entry_of(DuplicatesEntry),
        "near_duplicates": entry_of(NearDuplicatesEntry),
        "incremental": entry_of(IncrementalEntry),
        "look_alike_labels": list_of(LookAlikeLabels),
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

