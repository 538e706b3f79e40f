"""What a version's card shows, gathered from the files its build wrote: metadata.json, errors.jsonl,
near_duplicates.jsonl, the build record, tags.json, retired.json, the kept versions' metadata.json, the read
check's readcheck.json, and one bounded pass over records for pictures (shardsmith/card/thumbnails.py).

Guarantees: reads only (never writes); what it reads is bounded (MAX_ERROR_LINES lines of errors.jsonl,
MAX_PICTURED_GROUPS duplicate groups and pairs, the thumbnail pass's MAX_SCANNED_RECORDS), so gathering costs
the same for ten thousand records as for ten million.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from shardsmith import storage
from shardsmith.card.thumbnails import MAX_SCANNED_RECORDS, Scan, Thumbnail, scan_split
from shardsmith.format.metadata import parse_near_duplicates, read_metadata, reason_key, stream_errors
from shardsmith.format.metadata_schema import Metadata, MetadataError
from shardsmith.format.naming import BUILD_ID, ERRORS_FILE, NEAR_DUPLICATES_FILE, READ_CHECK_FILE, join
from shardsmith.output_folder import TagsUnreadable, build_dir, read_build_record, read_tags
from shardsmith.read.versions import Version, list_versions, retired_lines

DEFAULT_PER_LABEL = 5
MAX_PER_LABEL = 10
MAX_GRID_LABELS = 50  # labels with example pictures; the tables list every label
MAX_ERROR_EXAMPLES = 3  # per reason
MAX_ERROR_LINES = 20_000  # lines of errors.jsonl read for examples (the counts come from metadata.json)
MAX_PICTURED_GROUPS = 8  # identical groups and near-duplicate pairs drawn
MAX_NEAR_DUPLICATES_BYTES = 4 << 20


@dataclass(frozen=True)
class ErrorReason:
    reason: str
    count: int
    examples: list[dict]  # errors.jsonl lines: uri, split, label, detail


@dataclass
class CardFacts:
    output_dir: str
    build_id: str
    metadata: Metadata  # the version's own metadata.json
    started: str | None
    published: str | None
    tags: list[str]
    split: str  # the split the example grid shows
    grid_labels: list[int]
    scan: Scan
    errors: list[ErrorReason]
    identical: list[list[tuple[str, str]]]  # groups of (split, uri)
    near_pairs: list[dict]
    pictures: dict[tuple[str, str], Thumbnail]  # (split, uri) -> thumbnail, for the groups and pairs
    compared_with: tuple[str, Metadata, bool] | None  # (version, its metadata, whether this one was built on it)
    versions: list[Version]
    retired: list[str]
    read_check: dict | None
    notes: list[str] = field(default_factory=list)


def gather(output_dir: str, build_id: str, split: str | None = None, per_label: int = DEFAULT_PER_LABEL) -> CardFacts:
    """The facts of version `build_id` of `output_dir` (a kept version, published or not yet switched to)."""
    folder = build_dir(output_dir, build_id)
    metadata = read_metadata(folder)
    record = read_build_record(folder)
    split = split if split in metadata.splits else _first_split(metadata)
    notes: list[str] = []
    try:
        tags = sorted(name for name, tag in read_tags(output_dir).items() if tag.version == build_id)
    except TagsUnreadable as e:
        tags, notes = [], [f"tags.json cannot be read ({e})"]
    identical = _identical_groups(metadata)
    near_pairs = _near_pairs(folder, metadata)
    wanted = {copy for group in identical for copy in group} | {
        (side["split"], side["uri"]) for pair in near_pairs for side in (pair["first"], pair["second"])}
    grid_labels = [i for i, name in enumerate(metadata.labels)
                   if metadata.splits[split].label_counts.get(name, 0)][:MAX_GRID_LABELS] if split else []
    scan = (scan_split(folder, metadata, split, grid_labels, min(per_label, MAX_PER_LABEL),
                       {uri for s, uri in wanted if s == split}) if split else Scan())
    pictures = {(split, uri): thumb for uri, thumb in scan.wanted.items()}
    budget = MAX_SCANNED_RECORDS
    for other in sorted({s for s, _ in wanted} - {split} & set(metadata.splits)):
        found = scan_split(folder, metadata, other, [], 0, {uri for s, uri in wanted if s == other}, budget)
        budget -= found.records_read
        pictures.update({(other, uri): thumb for uri, thumb in found.wanted.items()})
        if budget <= 0:
            break
    versions = list_versions(output_dir, _tags_or_none(output_dir))
    return CardFacts(
        output_dir=output_dir, build_id=build_id, metadata=metadata, started=record and record.started,
        published=record and record.published, tags=tags, split=split or "", grid_labels=grid_labels, scan=scan,
        errors=_errors(folder, metadata), identical=identical, near_pairs=near_pairs, pictures=pictures,
        compared_with=_compared_with(output_dir, build_id, metadata, versions), versions=versions,
        retired=retired_lines(output_dir), read_check=read_check_figures(folder), notes=notes)


def _first_split(metadata: Metadata) -> str | None:
    for name in ("train", *metadata.splits):
        if name in metadata.splits and metadata.splits[name].num_examples:
            return name
    return next(iter(metadata.splits), None)


def _tags_or_none(output_dir: str):
    try:
        return read_tags(output_dir)
    except TagsUnreadable:
        return None


def _errors(folder: str, metadata: Metadata) -> list[ErrorReason]:
    """Reasons by count (metadata.json's), each with its first MAX_ERROR_EXAMPLES lines of errors.jsonl."""
    counts = metadata.errors_by_reason or {}
    examples: dict[str, list[dict]] = {reason: [] for reason in counts}
    if counts:
        for number, entry in enumerate(stream_errors(join(folder, ERRORS_FILE))):
            if number >= MAX_ERROR_LINES or all(len(e) >= MAX_ERROR_EXAMPLES for e in examples.values()):
                break
            shown = examples.get(reason_key(entry.get("stage"), entry.get("reason"))) if entry else None
            if shown is not None and len(shown) < MAX_ERROR_EXAMPLES:
                shown.append(entry)
    return [ErrorReason(reason, count, examples[reason])
            for reason, count in sorted(counts.items(), key=lambda item: (-item[1], item[0]))]


def _identical_groups(metadata: Metadata) -> list[list[tuple[str, str]]]:
    duplicates = metadata.duplicates
    if duplicates is None:
        return []
    return [[(copy.split, copy.uri) for copy in group.copies][:4]
            for group in duplicates.examples[:MAX_PICTURED_GROUPS]]


def _near_pairs(folder: str, metadata: Metadata) -> list[dict]:
    if metadata.near_duplicates is None:
        return []
    try:
        data = storage.read_small_file(join(folder, NEAR_DUPLICATES_FILE), MAX_NEAR_DUPLICATES_BYTES)
    except (OSError, ValueError):
        return []
    return parse_near_duplicates(data or b"")[:MAX_PICTURED_GROUPS]


def _compared_with(output_dir: str, build_id: str, metadata: Metadata,
                   versions: list[Version]) -> tuple[str, Metadata, bool] | None:
    """The version this one was built on (--incremental, compaction) when it is kept; else the next older kept
    version, so that a full build's card still says what changed since the one before it."""
    built_on = metadata.incremental.previous if metadata.incremental else None
    if built_on is not None and not BUILD_ID.fullmatch(str(built_on)):
        built_on = None  # not a build id (a hand-edited metadata.json): never a path to read through
    older = [v.id for v in versions if v.id < build_id]
    candidate = built_on or (max(older) if older else None)
    if candidate is None:
        return None
    try:
        return candidate, read_metadata(build_dir(output_dir, candidate)), candidate == built_on
    except (MetadataError, OSError, ValueError):
        return None


def read_check_figures(folder: str) -> dict | None:
    """readcheck.json of the build folder (written by `shardsmith readcheck`), or None."""
    try:
        data = storage.read_small_file(join(folder, READ_CHECK_FILE), 1 << 20)
        figures = json.loads(data.decode("utf-8")) if data else None
    except (OSError, ValueError):
        return None
    return figures if isinstance(figures, dict) else None
