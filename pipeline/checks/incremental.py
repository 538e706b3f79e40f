"""`--incremental`, on the launching machine: the published version a build adds to, read while the build holds
the folder's lock (the file opened, not the path checked earlier), and the usage errors that stop it before
anything is written. Reads metadata.json and lists the version's build folders: no row list, no shard, no image.
Every build id and file name it takes from metadata.json is checked first (`OpenedVersion.checked_id`), so a build never
reads outside the output folder.
"""

from __future__ import annotations

import json

from pipeline.options.build_options import BuildOptions, recorded_flags
from shardsmith import storage
from shardsmith.errors import UsageError
from shardsmith.format.metadata_schema import Metadata
from shardsmith.format.naming import BUILDS_DIR, ERRORS_FILE, LABELS_FILE, row_list_name
from shardsmith.format.record_file import record_file
from shardsmith.manifest import AppendedPlan, FixedLabels, valid_digest
from shardsmith.output_folder import OpenedVersion, build_dir, open_version
from shardsmith.versions import CarriedShard, CarriedVersion, unrecoverable

REBUILD = "rebuild it in full once with --incremental --overwrite"
# Recorded options that decide a record's bytes or a row's split (declared `same_in_every_version`), in
# metadata.json's order: an incremental build must use the published version's.
MUST_MATCH = tuple(flag.recorded_key for flag in recorded_flags() if flag.flag.same_in_every_version)


def carried_version(options: BuildOptions, label_file: FixedLabels | None = None,
                    newest: Metadata | None = None) -> CarriedVersion | None:
    """The version a build adds to: with --incremental, the published one, or, in a folder without one (or
    with --overwrite), a first version that keeps the published label ids; without the flag, a first version
    numbered as a full build numbers (every build lists its rows, so any published build can start a schedule).
    `label_file`: --label_file's list, which must extend the published ids unless --overwrite. `newest`: the
    newest version's metadata (build_folder.newest_version), whose ids a first version keeps. UsageError (one
    line, saying what to do) when the published version cannot be added to with these options. Call while
    holding the lock."""
    if not options.incremental:  # a full build: a first version whose rows are listed, so a night can follow
        return CarriedVersion(None, 1, max_removed_fraction=options.max_removed_fraction)
    out = options.output_dir
    if options.checks.on_duplicate == "drop":
        raise UsageError("--on_duplicate drop cannot be combined with --incremental yet (it would have to drop "
                         "published records): use --on_duplicate error to fail on a new copy of any image of the "
                         "version, or keep to list such copies in metadata.json")
    try:
        opened = open_version(out, readable=False)
    except FileNotFoundError:
        opened = None
    published = opened.metadata if opened is not None else None
    if published is not None and label_file is not None and not options.overwrite:
        _check_extends(published, label_file)
    if published is None or options.overwrite:  # a rebuild keeps the published ids too (carried_labels)
        base = published or newest  # no metadata.json at the top: the newest kept version's ids
        labels = tuple(base.labels) if base is not None else ()
        return CarriedVersion(None, 1, labels=labels, max_removed_fraction=options.max_removed_fraction)
    return _adding_to(opened, options)


def _check_extends(published: Metadata, label_file: FixedLabels) -> None:
    """UsageError unless --label_file lists the published labels first, in their id order: a night never changes
    what an id means (a model trained on an earlier version reads the same ids)."""
    build_id = published.build_id or "published"
    fix = (f"list its labels first, in id order ({BUILDS_DIR}/{build_id}/{LABELS_FILE}), then new ones, or rebuild "
           "with --overwrite to renumber")
    for label_id, label in enumerate(published.labels):
        if label not in label_file.labels:
            raise UsageError(f"--label_file {label_file.path} lacks {label!r}, id {label_id} in version {build_id}: "
                             f"an incremental build keeps every published id; {fix}")
        if label_file.labels.index(label) != label_id:
            raise UsageError(f"--label_file {label_file.path} gives {label!r} id {label_file.labels.index(label)}, "
                             f"version {build_id} id {label_id}: an incremental build keeps every published id; "
                             f"{fix}")


def _adding_to(opened: OpenedVersion, options: BuildOptions) -> CarriedVersion:
    out, published = options.output_dir, opened.metadata
    if published.incremental is None:
        build_id = published.build_id or str(published.build_dir).rsplit("/", 1)[-1]
        raise UsageError(f"{out}'s published version {build_id} was built before builds listed their rows: "
                         f"{REBUILD} (later builds then read only new rows)")
    try:
        build_id = opened.checked_id()
    except ValueError as e:
        raise UsageError(str(e)) from None
    recorded = options.recorded()
    for key in MUST_MATCH:
        was, now = (published.options or {}).get(key), recorded.get(key)
        if was != now:
            raise UsageError(f"{out}'s published version {build_id} was built with {key} {_shown(was)}, this build "
                             f"has {_shown(now)}: an incremental build adds rows with the same settings; use "
                             f"{_shown(was)}, or {REBUILD}")
    shards = tuple(CarriedShard(split, shard.build or build_id, shard) for split, shard in published.all_shards())
    return CarriedVersion(
        previous=build_id,
        generation=published.incremental.generation + 1,
        labels=tuple(published.labels),
        shards=shards,
        num_rows=published.num_example_rows if published.num_example_rows is not None else published.num_examples,
        num_records=published.num_examples or 0,
        max_removed_fraction=options.max_removed_fraction,
        source_bytes={split: entry.source_bytes for split, entry in published.splits.items()},
        compression=published.compression_or_default,
        file_format=record_file(published.format),
        why_not_rebuilt=unrecoverable(published.task_or_default, (published.options or {}).get("features")),
        appended=_appended_plan(options.output_dir, published, build_id, shards),
        duplicates=published.duplicates,
    )


def _appended_plan(out: str, published: Metadata, build_id: str, shards: tuple[CarriedShard, ...]
                   ) -> AppendedPlan | None:
    """How a night reads the manifest when it only has rows appended (shardsmith/manifest/appended.py):
    None when the version recorded no manifest (several, a folder, Parquet, a file without a final line end), or
    a shard's row list is missing (then the night pairs every row, and rewrites that shard with its list)."""
    digest = published.incremental.manifest if published.incremental is not None else None
    if not valid_digest(digest) or published.num_example_rows is None:
        return None
    listed: dict[str, set[str]] = {}  # per folder of row lists: the paths in it, listed once
    for shard in shards:
        path = storage.join(build_dir(out, shard.build), row_list_name(shard.entry.file))
        folder = storage.parent(path)
        if folder not in listed:
            listed[folder] = {storage.join(folder, name) for name in storage.list_files(folder)}
        if path not in listed[folder]:
            return None
    return AppendedPlan(digest, published.num_example_rows, storage.join(build_dir(out, build_id), ERRORS_FILE))


def carried_labels(version: CarriedVersion | None, label_file: FixedLabels | None = None) -> FixedLabels | None:
    """The labels a build numbers its rows with: --label_file's list when given (checked by carried_version);
    else, for an --incremental build into a folder with a published version (a rebuild with --overwrite too),
    the published labels, kept with their ids, which new labels extend; else None (alphabetical ids)."""
    if label_file is not None or version is None or not version.labels:
        return label_file
    return FixedLabels(version.labels, "", extendable=True)


def _shown(value) -> str:
    return json.dumps(value, ensure_ascii=False)
