"""A dataset's versions, as `shardsmith versions` (pipeline/commands/versions.py) and the card list them.

A version is a build a reader can pin: the published one (the top-level metadata.json names it) and every kept
build under `builds/<id>/` that finished and was published once (its own metadata.json written, no staged
top-level copy left: `build_folder.finished`). A version's id is its build id. Unfinished builds and builds
killed before their publish switch are not versions, and neither is a folder a person left behind.

A tag (`shardsmith tag`, pipeline/commands/tag.py) is a name for a version that retention never removes;
`versions` lists each version's tags beside it, and `--version` takes a tag's name as it takes an id.

Guarantees: listing reads names, build records, metadata.json files and tags.json only (no shard); it writes
nothing and takes no lock. Versions are listed newest first (build ids sort by start time). A tags.json that
cannot be read is said in one line on stderr (retention removes no build while it is so); the versions are
listed all the same. After them, the versions retention removed last (retired.json): when, by which build, with
which --keep_builds and --keep_days.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from shardsmith.errors import UsageError
from shardsmith.format.metadata import read_metadata
from shardsmith.format.metadata_schema import MetadataError, MetadataMissing
from shardsmith.format.naming import BUILDS_DIR, METADATA_FILE, RETIRED_FILE, join
from shardsmith.output_folder import (
    Tag,
    build_dir,
    build_id_time,
    finished,
    open_version,
    published_build_id,
    read_build_record,
    read_retired,
    retention_text,
    scan,
)

MAX_RETIRED_SHOWN = 5  # retired versions `versions` lists after the kept ones; retired.json holds more


@dataclass(frozen=True)
class Version:
    """One version of a dataset: its build, when that build started (UTC), and what it holds."""

    id: str
    started: str
    current: bool
    records: dict[str, int]  # split -> records, in metadata.json's order
    num_errors: int
    rows_added: int | None = None  # --incremental: manifest rows read by its build (None: a full build)
    rows_removed: int | None = None  # --incremental: rows of the previous version's records no longer listed
    previous: str | None = None  # --incremental: the version it was built on
    records_added: int | None = None  # --incremental: records its build made (None: a full build, or older)
    records_removed: int | None = None
    tags: tuple[str, ...] = ()  # the names that pin it (tags.json), sorted

    def as_json(self) -> dict:
        return {"id": self.id, "started": self.started, "current": self.current, "records": self.records,
                "num_records": sum(self.records.values()), "num_errors": self.num_errors,
                "rows_added": self.rows_added, "rows_removed": self.rows_removed, "records_added": self.records_added,
                "records_removed": self.records_removed, "previous": self.previous,
                "build_dir": f"{BUILDS_DIR}/{self.id}", "tags": list(self.tags)}

    def change(self) -> str:
        """`full build`, or what it added and removed against the version it was built on."""
        if self.rows_added is None or self.previous is None:
            return "full build"
        if self.records_added is not None:
            return f"+{self.records_added:,} -{self.records_removed:,} records"
        return f"+{self.rows_added:,} -{self.rows_removed:,} rows"

    def line(self) -> str:
        splits = ", ".join(f"{split} {count:,}" for split, count in self.records.items())
        change = self.change()
        errors = f", {self.num_errors:,} errors" if self.num_errors else ""
        return (f"{self.id}  {self.started:<20}  {change:<21}  {splits}{errors}"
                + ("  (current)" if self.current else "") + (f"  tags: {', '.join(self.tags)}" if self.tags else ""))


def _started(output_dir: str, build_id: str) -> str:
    """When the build started, from its record; from its id (which carries its start to the second) when the
    record cannot be read."""
    record = read_build_record(build_dir(output_dir, build_id))
    return record.started if record is not None else build_id_time(build_id)


def list_versions(output_dir: str, tags: dict[str, Tag] | None = None) -> list[Version]:
    """Every version of the dataset in `output_dir`, newest first, each with the names in `tags` (by name) that
    pin it; UsageError (one line) when it holds no published dataset in the layout that has versions."""
    output_dir = os.fspath(output_dir).rstrip("/")
    state = scan(output_dir)
    current = published_build_id(state)
    if current is None:
        try:
            published = open_version(output_dir, readable=False).metadata
        except FileNotFoundError:
            raise UsageError(f"{output_dir} holds no published shardsmith dataset (no metadata.json)") from None
        except MetadataError as e:  # its path and why, e.g. not valid JSON (line 1 column 29): ...
            raise UsageError(f"{e}; it names the published version, so the versions cannot be listed") from None
        if published.build_dir is not None:  # a build folder it names, but not one scan() accepts
            raise UsageError(f"{join(output_dir, METADATA_FILE)} does not name a build folder of this dataset "
                             f"({published.build_dir!r}, format {published.format!r})")
        raise UsageError(f"{output_dir} was built before builds had folders: it has one version, its files; "
                         "build it again to keep versions")
    names: dict[str, list[str]] = {}
    for name, tag in sorted((tags or {}).items()):
        names.setdefault(tag.version, []).append(name)
    versions = []
    for build_id in sorted(state.builds, reverse=True):
        if build_id != current and not finished(state, build_id):
            continue
        try:
            metadata = read_metadata(build_dir(output_dir, build_id))
        except (MetadataMissing, MetadataError):
            continue  # not complete enough to read: not a version a reader could pin
        records = {split: entry.num_examples or 0 for split, entry in metadata.splits.items()}
        change = metadata.incremental
        versions.append(Version(build_id, _started(output_dir, build_id), build_id == current, records,
                                metadata.error_count, change and change.num_added_rows,
                                change and change.num_removed_rows, change and change.previous,
                                change and change.num_added_records, change and change.num_removed_records,
                                tuple(names.get(build_id, ()))))
    return versions


def retired_lines(output_dir: str) -> list[str]:
    """The versions retention removed last (retired.json), newest first, MAX_RETIRED_SHOWN of them: what a job
    pinned to one of them now fails on."""
    retired = sorted(read_retired(output_dir).values(), key=lambda e: (e.retired, e.version), reverse=True)
    lines = [f"{entry.version}  retired at {entry.retired}" + (f" by {entry.by}" if entry.by else "")
             + f" ({retention_text(entry)})" for entry in retired[:MAX_RETIRED_SHOWN]]
    if len(retired) > MAX_RETIRED_SHOWN:
        lines.append(f"... and {len(retired) - MAX_RETIRED_SHOWN} more retired ({RETIRED_FILE})")
    return lines
