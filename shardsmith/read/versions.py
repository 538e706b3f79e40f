"""`shardsmith versions OUT [--json]`: the dataset's versions, and `--version ID` for the read-side commands.

A version is a build a reader can pin: the published one (the top-level metadata.json names it) and every kept
build under `builds/<id>/` that finished and was published once (its own metadata.json written, no staged
top-level copy left: `build_folder.finished`). A version's id is its build id. Unfinished builds and builds
killed before their publish switch are not versions, and neither is a folder a person left behind.

Guarantees: listing reads names, build records and metadata.json files only (no shard); it writes nothing and
takes no lock. Versions are listed newest first (build ids sort by start time).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.format.build_folder import build_dir, finished, published_build_id, scan
from shardsmith.format.build_record import BuildRecord
from shardsmith.format.metadata import read_metadata
from shardsmith.format.metadata_schema import MetadataError, MetadataMissing
from shardsmith.format.naming import BUILD_RECORD, BUILDS_DIR, METADATA_FILE, join
from shardsmith.read.sequence import open_build


@dataclass(frozen=True)
class Version:
    """One version of a dataset: its build, when that build started (UTC), and what it holds."""

    id: str
    started: str
    current: bool
    records: dict[str, int]  # split -> records, in metadata.json's order
    num_errors: int
    rows_added: int | None = None  # --incremental: manifest rows new to this version (None: a full build)
    rows_removed: int | None = None
    previous: str | None = None  # --incremental: the version it was built on

    def as_json(self) -> dict:
        return {"id": self.id, "started": self.started, "current": self.current, "records": self.records,
                "num_records": sum(self.records.values()), "num_errors": self.num_errors,
                "rows_added": self.rows_added, "rows_removed": self.rows_removed, "previous": self.previous,
                "build_dir": f"{BUILDS_DIR}/{self.id}"}

    def line(self) -> str:
        splits = ", ".join(f"{split} {count:,}" for split, count in self.records.items())
        change = "full build" if self.rows_added is None else f"+{self.rows_added:,} -{self.rows_removed:,} rows"
        return f"{self.id}  {self.started:<20}  {change:<18}  {splits}" + ("  (current)" if self.current else "")


def _started(output_dir: str, build_id: str) -> str:
    """When the build started, from its record; from its id (which carries its start to the second) when the
    record cannot be read."""
    data = storage.read_bytes(join(build_dir(output_dir, build_id), BUILD_RECORD))
    if data is not None:
        try:
            return BuildRecord.from_json(data).started
        except (ValueError, KeyError):
            pass
    stamp = build_id.split("-", 1)[0]
    return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z"


def list_versions(output_dir: str) -> list[Version]:
    """Every version of the dataset in `output_dir`, newest first; UsageError (one line) when it holds no
    published dataset in the layout that has versions."""
    output_dir = os.fspath(output_dir).rstrip("/")
    state = scan(output_dir)
    current = published_build_id(state)
    if current is None:
        try:
            published = read_metadata(output_dir)
        except MetadataMissing:
            raise UsageError(f"{output_dir} holds no published shardsmith dataset (no metadata.json)") from None
        except MetadataError as e:  # its path and why, e.g. not valid JSON (line 1 column 29): ...
            raise UsageError(f"{e}; it names the published version, so the versions cannot be listed") from None
        if published.build_dir is not None:  # a build folder it names, but not one scan() accepts
            raise UsageError(f"{join(output_dir, METADATA_FILE)} does not name a build folder of this dataset "
                             f"({published.build_dir!r}, format {published.format!r})")
        raise UsageError(f"{output_dir} was built before builds had folders: it has one version, its files; "
                         "build it again to keep versions")
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
                                change and change.num_removed_rows, change and change.previous))
    return versions


def version_folder(output_dir: str, version: str | None) -> str:
    """The folder the read-side commands read for `--version` (None: `output_dir`, the published build): the
    version's build folder, whose own metadata.json describes it; UsageError (one line) for an id that is not a
    version of this dataset."""
    output_dir = os.fspath(output_dir).rstrip("/")
    if version is None:
        return output_dir
    try:
        _, folder = open_build(output_dir, version)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(f"{e}; `shardsmith versions {output_dir}` lists its versions") from None
    return folder


def add_version_argument(parser) -> None:
    parser.add_argument("--version", default=None, metavar="BUILD_ID",
                        help="a kept version (builds/BUILD_ID; `shardsmith versions` lists them) instead of the "
                             "published one")


def add_arguments(parser) -> None:
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    parser.add_argument("--json", action="store_true", help="print the versions as a JSON list")


def run(args) -> list[Version]:
    """`shardsmith versions`: one line per version, newest first (or a JSON list with --json)."""
    versions = list_versions(args.output_dir)
    if args.json:
        print(json.dumps([version.as_json() for version in versions], indent=2), flush=True)
    else:
        print("\n".join(version.line() for version in versions), flush=True)
    return versions
