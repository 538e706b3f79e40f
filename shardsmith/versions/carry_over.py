"""`--incremental`: the published version a build starts from, and how a manifest's rows are paired with its
records. Beam-free: the launcher makes a `CarriedVersion` from metadata.json; the stages
(transforms/versions/carried_rows.py) pair rows with `pair_rows`, and transforms/versions/rewritten_shards.py
rewrites shards with shardsmith/versions/shard_rewrite.py.

The model: every shard of a version lists its records' row identities (shardsmith/format/row_list.py). A manifest
row whose identity a record of the published version carries is *carried*: its record stays where it is and its
image is neither read nor stat'ed. A row with no such record is *new*: it goes through the usual stages and lands
in a new generation of shards. A record whose identity no manifest row carries any more is *removed*: the shard
holding it is rewritten, from its own records, without it.

Guarantee: identities pair as multisets. With n manifest rows and m records of one identity, min(n, m) are
carried (the earliest rows, by source and line, with the first records, by shard and position), the other
n - m rows are new or m - n records removed. The result depends on the rows and the version only, never on the
order they arrive in.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from shardsmith.format.metadata_schema import (
    DuplicatesEntry,
    IncrementalEntry,
    ManifestDigestEntry,
    Metadata,
    ShardEntry,
    SplitEntry,
)
from shardsmith.format.naming import SPLITS, shard_generation
from shardsmith.format.record_file import TFRECORD, RecordFileFormat
from shardsmith.manifest import AppendedPlan
from shardsmith.near_duplicates.perceptual_hash import ImageSignature
from shardsmith.rows import ManifestRow, ShardResult
from shardsmith.shard_writer.shard_file import STAGE as LOAD_STAGE


@dataclass(frozen=True)
class CarriedShard:
    """One shard of the published version: its split, the build whose folder holds it and its entry."""

    split: str
    build: str
    entry: ShardEntry


@dataclass(frozen=True)
class CarriedVersion:
    """The published version an --incremental build adds to (`previous` None and no shards: a first build)."""

    previous: str | None
    generation: int  # the number of this build's generation: 1 for a first build, then one more each time
    labels: tuple[str, ...] = ()  # the version's labels in id order; new labels get the next ids
    shards: tuple[CarriedShard, ...] = ()
    num_rows: int = 0  # manifest lines the version's records stand for
    num_records: int = 0  # the version's records
    max_removed_fraction: float = 1.0
    source_bytes: dict[str, int | None] = field(default_factory=dict)  # per split, as the version lists it
    # Why a lost row list cannot be rebuilt from its shard's records ("" where it can: shardsmith/versions/row_check.py)
    why_not_rebuilt: str = ""
    compression: str = "none"  # the version's shards'
    file_format: RecordFileFormat = TFRECORD  # the version's shards' record file (metadata.json's `format`)
    # How a night reads a manifest that only had rows appended (None: every row is paired)
    appended: AppendedPlan | None = None
    duplicates: DuplicatesEntry | None = None  # the version's, which a night that reads only its new rows adds to

    @property
    def is_first(self) -> bool:
        return self.previous is None

    def for_stages(self) -> CarriedVersion:
        """This version as the carry-over's stages hold it: each shard's entry without its `label_counts` (the
        same version otherwise). Beam pickles a stage's version into the stage, and once per stage the label
        counts were most of it (105 shards of 1,000 labels: 750 KB, bz2-compressed at each graph's
        submission and decompressed for each bundle processor); only the new version's metadata (the report,
        `merged_version`) reads them, and it holds the whole version."""
        return replace(self, shards=tuple(replace(shard, entry=replace(shard.entry, label_counts={}))
                                          for shard in self.shards))


@dataclass(frozen=True)
class RecordPlace:
    """Where a record of the published version is: the index of its shard in `CarriedVersion.shards` and its
    position in the shard, with the manifest lines it stands for, its image's size (source bytes) and SHA-256 (""
    when its row list predates the field), and, when an --incremental night looks for near-duplicates, its
    perceptual signature (None when its row list holds none)."""

    shard: int
    position: int
    lines: int
    size: int = 0
    sha256: str = ""
    signature: ImageSignature | None = None


@dataclass(frozen=True)
class Pairing:
    """One identity's rows and records, paired: rows with no record are new, records with no row removed."""

    carried_lines: int
    new_rows: list[ManifestRow]
    removed: list[RecordPlace]
    carried: list[tuple[ManifestRow, RecordPlace]]  # each carried row with the record that stays for it


def pair_rows(rows: list[ManifestRow], records: list[RecordPlace]) -> Pairing:
    """Pairs the manifest rows of one identity with the version's records of it (see the module)."""
    rows = sorted(rows, key=lambda r: (r.source_index, r.line))
    records = sorted(records, key=lambda p: (p.shard, p.position))
    kept = min(len(rows), len(records))
    return Pairing(sum(p.lines for p in records[:kept]), rows[kept:], records[kept:],
                   list(zip(rows[:kept], records[:kept], strict=True)))


def merged_version(new: Metadata, version: CarriedVersion, rewritten: dict[int, ShardResult], carried_lines: int,
                   removed_lines: int, removed_bytes: dict[str, int] | None = None, failed_again: int = 0,
                   manifest: ManifestDigestEntry | None = None, appended: bool = False) -> Metadata:
    """The metadata.json of the version an --incremental build makes: `new` (what the build's own rows made:
    its splits hold the new generation's shards) with the carried shards in front of each split's, in the
    published version's order (rewritten ones in place of theirs), and the counts of the whole version
    (`removed_bytes`: the source bytes of the removed records, per split; `failed_again`: error lines that failed
    in the published version too, shardsmith/versions/failed_again.py; `manifest`: what the build read of its
    one line manifest, which the next night compares its manifest with, shardsmith/manifest/appended.py;
    `appended`: the build parsed only the lines appended to the version's manifest and its failed ones).

    The counts, each with one meaning (docs/versions.md, "Counts"): rows are manifest lines; every row is carried
    (its record is kept) or added (read: a record or an error); added records are the new generation's records;
    removed rows and records are the published version's that the manifest no longer lists."""
    splits = {}
    for split in SPLITS:
        # A carried shard without records (all its rows failed, or were removed: then it was written nowhere) is not
        # listed: a split left with no record and no row placed tonight is no split of the version, as in a full
        # build of its rows. Nor is a shard of tonight's without records, unless the split has no other shard.
        carried = [entry for entry in (_carried_entry(index, shard, rewritten)
                                       for index, shard in enumerate(version.shards) if shard.split == split)
                   if entry.num_examples]
        added = new.splits.get(split)
        if not carried and added is None:
            continue
        shards = carried + [shard for shard in _tonight(added) if shard.num_examples] or _tonight(added)
        splits[split] = SplitEntry.of_shards(
            shards, new.labels, num_shards=len(shards),
            num_placed=sum(s.num_examples for s in carried) + (added.num_placed if added is not None else 0),
            source_bytes=_source_bytes(version, split, added, (removed_bytes or {}).get(split, 0)))
    num_input_rows = new.num_input_rows or 0
    images_read = sum(entry.num_examples or 0 for entry in new.splits.values()) + sum(
        n for reason, n in (new.errors_by_reason or {}).items() if reason.startswith(f"{LOAD_STAGE}:"))
    generations = {shard_generation(shard.file) for entry in splits.values() for shard in entry.shards}
    num_examples = sum(entry.num_examples for entry in splits.values())
    added_records = new.num_examples or 0
    return replace(
        new,
        num_examples=num_examples,
        num_example_rows=(new.num_example_rows or 0) + carried_lines,
        splits=splits,
        incremental=IncrementalEntry(
            previous=version.previous, num_carried_rows=carried_lines, num_added_rows=num_input_rows - carried_lines,
            num_added_records=added_records, num_failed_again=failed_again, num_removed_rows=removed_lines,
            num_removed_records=version.num_records - (num_examples - added_records),
            num_rewritten_shards=len(rewritten), num_images_read=images_read,
            generation=version.generation,
            generations=len(generations) or 1,
            manifest=manifest,
            appended=appended,
        ),
    )


def _tonight(added: SplitEntry | None) -> list[ShardEntry]:
    return added.shards if added is not None else []


def empty_new_shards(version: Metadata, written: list[ShardResult]) -> list[ShardResult]:
    """The shards this night wrote that its version does not list: each one whose rows all failed, in a split
    with records elsewhere (merged_version leaves them out, as a full build of the version's rows spreads its
    failures over shards with records). Their files are the night's own, in its build folder, to be removed
    before the version is published."""
    listed = {shard.file for entry in version.splits.values() for shard in entry.shards}
    return [result for result in written if result.num_examples == 0 and result.file not in listed]


def _source_bytes(version: CarriedVersion, split: str, added: SplitEntry | None, removed: int) -> int | None:
    """The split's source bytes: the published version's, less the removed records', plus the new rows' (None
    when the published version does not state them)."""
    carried = version.source_bytes.get(split, 0) if any(s.split == split for s in version.shards) else 0
    if carried is None:
        return None
    new_bytes = added.source_bytes if added is not None and added.source_bytes is not None else 0
    return carried - removed + new_bytes


def _carried_entry(index: int, shard: CarriedShard, rewritten: dict[int, ShardResult]) -> ShardEntry:
    result = rewritten.get(index)
    if result is None:
        return replace(shard.entry, build=shard.build)
    return result.entry()


def unchanged(carried: CarriedVersion, new_shards: list[ShardResult], removed_lines: int, version: Metadata) -> bool:
    """Whether an --incremental version would hold exactly what the published one holds: no record added, none
    removed, the same labels (the caller also requires that no shard was rewritten: a shard whose lost row list
    was rebuilt is rewritten with it, and publishing that repair spares every later night the same work)."""
    return (not carried.is_first and removed_lines == 0 and not any(s.num_examples for s in new_shards)
            and tuple(version.labels) == carried.labels)
