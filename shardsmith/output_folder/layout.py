"""The output folder's layout (the tree is in the package's opening comment) and a build's lifecycle in it: its
id and folder, what the folder holds (`scan`), where a version's shards are, a build started, its temporary
files removed, and a build removed. With retention.py and publishing.py, the only code that deletes or replaces
anything in the output folder.

    builds/<build id>/
      build.json                 the build record, written before anything else of the build
      .shardsmith-written/       the build's written list: each file it writes here, listed before it is
                                 written (shardsmith/format/build_record.py)
      <name>-<split>.tfrecord-SSSSS-of-NNNNN, labels.txt, errors.jsonl, metadata.json, TFDS files,
      transform_fn/, transformed_metadata/

Guarantees:
- Ownership: a file is removed only if it lies in `builds/<id>/` beside that build's record and the record lists
  it as written (`BuildRecord.covered`). Nothing at the top level but metadata.json, the lock, tags.json and
  retired.json is ever written or removed, and a folder that holds anything else is refused before anything is
  written (`scan`). What cleanup leaves in a build's folder (files a person put there) stays, with the folder;
  the folder is then no build, and it blocks no later build (`FolderState.left_behind`).
- The published build, the one the top-level metadata.json names, is never removed as unfinished, whatever else
  is damaged. A build is finished only once its own metadata.json is written and the top-level one staged for
  it is gone (renamed over the top-level file): one killed just before that switch was never published.
- Readers: a published build's files are never rewritten. A new build is published by replacing the top-level
  metadata.json in one atomic step (os.replace locally, a single-object copy on Cloud Storage), so a reader that
  read metadata.json keeps reading one build's files until retention removes them, then fails on a missing file
  (publishing.py `publish`).
- Names: build ids sort by start time; shard names and build folders read from metadata.json are confined to
  the dataset folder (`dataset_dir`, `confined_file_name`); what adds to a version or rewrites it checks every
  one of them before it reads anything (`checked_version_id`).

Every file operation goes through shardsmith.storage (local paths and gs:// alike).
"""

from __future__ import annotations

import logging
import os
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from shardsmith import storage
from shardsmith.format.build_record import BuildRecord, claim, entry_file, write_atomically, written_entries
from shardsmith.format.metadata import read_metadata
from shardsmith.format.metadata_schema import Metadata, MetadataMissing, ShardEntry
from shardsmith.format.naming import (
    BUILD_ID,
    BUILD_RECORD,
    BUILDS_DIR,
    LOCK_FILE,
    METADATA_FILE,
    RETIRED_FILE,
    STAGED_METADATA,
    TAGS_FILE,
    TEMP_PREFIX,
    TOP_LEVEL_TEMPORARY,
    TRANSFORM_DIRS,
    WRITTEN_DIR,
    join,
)
from shardsmith.format.record_file import RECORD_FILES

_LOG = logging.getLogger("shardsmith")


class NotOurFolder(Exception):
    """The output folder holds something shardsmith did not write; the message names it."""


def new_build_id(now: float | None = None) -> str:
    """A fresh id that sorts by start time and differs between builds started together: the UTC second, then
    the millisecond as 3 hex digits (a build takes well under a second now: two in one second must still list
    and retire in start order), then 5 random hex digits."""
    second, millisecond = divmod(round((time.time() if now is None else now) * 1000), 1000)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(second))
    return f"{stamp}-{millisecond:03x}{secrets.token_hex(3)[:5]}"


def build_dir(output_dir: str, build_id: str) -> str:
    return join(output_dir, BUILDS_DIR, build_id)


# Reading the layout -------------------------------------------------------------------------------------------

def dataset_dir(output_dir: str, metadata: Metadata) -> str:
    """The folder holding the shards of the build that `metadata` (read from `output_dir`) describes: the build
    folder named by a top-level metadata.json, or `output_dir` itself for a build's own copy (and for datasets
    written before builds had folders). Raises ValueError for a name that would leave `output_dir`."""
    if not metadata.is_published:
        return output_dir.rstrip("/")
    relative = metadata.build_dir
    parts = str(relative).split("/")
    if len(parts) != 2 or parts[0] != BUILDS_DIR or not BUILD_ID.fullmatch(parts[1]):
        raise ValueError(f"metadata.json names build folder {relative!r}; expected {BUILDS_DIR}/<build id>")
    return join(output_dir, relative)


def published_dir(output_dir: str | os.PathLike) -> str:
    """The folder of the build that `output_dir`'s metadata.json publishes now (to read labels.txt and
    errors.jsonl; TFDS reads a version from `shardsmith.tfds_dirs`). Raises FileNotFoundError without one."""
    output_dir = os.fspath(output_dir).rstrip("/")
    try:
        metadata = read_metadata(output_dir)
    except MetadataMissing as e:
        raise FileNotFoundError(str(e)) from None
    return dataset_dir(output_dir, metadata)


def shard_file_path(folder: str, shard: ShardEntry) -> str:
    """Where a shard listed in metadata.json is: in `folder` (the version's build folder, `dataset_dir`), or, for a
    shard an --incremental version carried over from an earlier generation (`shard.build`), in that build's
    folder beside it (builds/<build>/). Raises ValueError for a name or build id that would leave the dataset."""
    name = confined_file_name(shard.file)
    if shard.build is None:
        return join(folder, name)
    if not BUILD_ID.fullmatch(str(shard.build)):
        raise ValueError(f"metadata.json lists shard {name!r} in build {shard.build!r}, which is not a build id")
    return join(storage.parent(folder.rstrip("/")), shard.build, name)


def builds_referenced(metadata: Metadata) -> set[str]:
    """The earlier builds whose folders hold shards of the version `metadata` describes (--incremental)."""
    return {shard.build for _, shard in metadata.all_shards() if shard.build is not None}


def confined_file_name(name: str) -> str:
    """A shard file name from metadata.json, checked to name a file inside the dataset folder."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith(TEMP_PREFIX):
        raise ValueError(f"metadata.json lists shard file {name!r}, which is not a file name in the dataset folder")
    return name


def checked_version_id(output_dir: str, metadata: Metadata) -> str:
    """The build id of the version `metadata` (output_dir's top-level metadata.json) publishes, once every id and
    file name it gives is checked as the readers check them (`dataset_dir`, `shard_file_path`,
    `confined_file_name`): its build_id and build_dir name one build, its name is no path, and each shard's
    file, index and build name a file of the dataset folder. What adds to a version or rewrites it
    (--incremental, compact) calls this before it reads anything the version lists. Raises ValueError, one line
    naming the entry that is wrong."""
    where = f"{output_dir.rstrip('/')}/{METADATA_FILE}"
    if not metadata.is_published:
        raise ValueError(f"{where}: build_dir: {metadata.build_dir!r} is not {BUILDS_DIR}/<build id>")
    _named(f"{where}: build_dir", dataset_dir, output_dir, metadata)
    folder = dataset_dir(output_dir, metadata)
    name = metadata.name
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"{where}: name: {name!r} is not a dataset name (its shards' file names start with it)")
    build_id = folder.rstrip("/").rsplit("/", 1)[-1]
    if metadata.build_id is not None and metadata.build_id != build_id:
        raise ValueError(f"{where}: build_id: {metadata.build_id!r} is not the build its build_dir names "
                         f"({metadata.build_dir!r})")
    for split, info in metadata.splits.items():
        for number, shard in enumerate(info.shards):
            entry = f"{where}: splits.{split}.shards[{number}]"
            _named(f"{entry}.file", confined_file_name, shard.file)
            _named(f"{entry}.build", shard_file_path, folder, shard)
            if shard.index is not None:
                _named(f"{entry}.index", confined_file_name, shard.index)
    return build_id


def _named(entry: str, check: Callable, *args) -> None:
    """`check(*args)`, its ValueError reworded to start with the entry it is about."""
    try:
        check(*args)
    except ValueError as e:
        raise ValueError(f"{entry}: {e}") from None


@dataclass
class FolderState:
    """What an output folder holds, as far as builds are concerned."""

    foreign: list[str]  # top-level entries (or entries of builds/) that no shardsmith build wrote
    published: Metadata | None  # the top-level metadata.json, parsed
    builds: dict[str, list[str]]  # build id -> its files, relative to its folder (the record included)
    # build id -> files a person left in a removed build's folder (no record there any more): not a build,
    # never touched, no reason to refuse the folder
    left_behind: dict[str, list[str]] = field(default_factory=dict)
    # top-level temporaries of metadata.json, tags.json or retired.json a killed command left (TOP_LEVEL_TEMPORARY)
    temporaries: list[str] = field(default_factory=list)


# What shardsmith writes at the top level: (name, is a folder).
_OURS_AT_TOP = ((METADATA_FILE, False), (LOCK_FILE, False), (BUILDS_DIR, True), (TAGS_FILE, False),
                (RETIRED_FILE, False))


def scan(output_dir: str) -> FolderState:
    """Lists the output folder and tells its entries apart. Reads only names and the top-level metadata.json."""
    top = storage.list_entries(output_dir)
    in_builds = {entry: storage.list_files(join(output_dir, BUILDS_DIR, entry)) if is_dir else None
                 for entry, is_dir in storage.list_entries(join(output_dir, BUILDS_DIR)).items()}
    temporaries = [name for name, is_dir in sorted(top.items())
                   if not is_dir and TOP_LEVEL_TEMPORARY.fullmatch(name)]
    foreign = [name + ("/" if is_dir else "") for name, is_dir in sorted(top.items())
               if (name, is_dir) not in _OURS_AT_TOP and name not in temporaries]
    published = None
    if (METADATA_FILE, False) in top.items():
        published = _published_metadata(output_dir)
        if published is None:
            foreign.insert(0, METADATA_FILE)
    builds, left_behind = {}, {}
    for build_id, files in sorted(in_builds.items()):
        if files is None or not BUILD_ID.fullmatch(build_id):
            foreign.append(f"{BUILDS_DIR}/{build_id}")
        elif _is_build_folder(files):
            builds[build_id] = sorted(files)
        else:  # a folder shardsmith made (its name is a build id) whose build was removed around a user's files
            left_behind[build_id] = sorted(files)
    return FolderState(foreign, published, builds, left_behind, temporaries)


def remove_temporaries(output_dir: str, state: FolderState | None = None) -> list[str]:
    """Removes the top-level temporaries a killed command left (FolderState.temporaries); returns their names.
    Call only while holding the folder's lock: no live command is then writing one."""
    names = (state or scan(output_dir)).temporaries
    if names:
        storage.delete([join(output_dir, name) for name in names])
        _LOG.info("removed %d temporary file(s) a killed command left in %s: %s", len(names), output_dir,
                  ", ".join(names))
    return names


def left_behind_line(state: FolderState) -> str | None:
    """One line naming the removed builds' folders that still hold files a person put there, or None."""
    if not state.left_behind:
        return None
    shown = [f"{BUILDS_DIR}/{build_id} ({len(files)} file(s), e.g. {files[0]})"
             for build_id, files in sorted(state.left_behind.items())]
    return ("files no shardsmith build wrote, left in place in the folders of removed builds (not builds, "
            "delete them when done): " + ", ".join(shown))


def _is_build_folder(files: list[str]) -> bool:
    """A build's folder holds its record; one killed while writing the record holds only that temporary file."""
    return BUILD_RECORD in files or all(f.startswith(f"{TEMP_PREFIX}{BUILD_RECORD}.") for f in files)


def _published_metadata(output_dir: str) -> Metadata | None:
    """The top-level metadata.json if shardsmith wrote it in this layout, else None."""
    try:
        metadata = read_metadata(output_dir)
        dataset_dir(output_dir, metadata)
    except ValueError:  # MetadataError among them
        return None
    if metadata.format not in RECORD_FILES or metadata.build_dir is None:
        return None
    return metadata


def newest_version(output_dir: str, state: FolderState) -> tuple[str, Metadata] | None:
    """(build id, metadata) of the published version, or, when the top-level metadata.json is missing or
    unreadable, of the newest finished build whose own copy reads (what a rebuild must keep label ids of); None
    in a folder without a version."""
    published = published_build_id(state)
    if state.published is not None and published is not None:
        return published, state.published
    for build_id in sorted(state.builds, reverse=True):
        if finished(state, build_id):
            try:
                return build_id, read_metadata(build_dir(output_dir, build_id))
            except ValueError:  # MetadataError, MetadataMissing: not one to go by
                continue
    return None


def finished(state: FolderState, build_id: str) -> bool:
    """Whether the build was published (now or before a later one): its own metadata.json is written and the
    top-level one staged for it was renamed into place."""
    files = state.builds.get(build_id, ())
    return METADATA_FILE in files and STAGED_METADATA not in files


def published_build_id(state: FolderState) -> str | None:
    return state.published.build_dir.split("/", 1)[1] if state.published else None


# Writing and removing ------------------------------------------------------------------------------------------

def start_build(output_dir: str, record: BuildRecord) -> str:
    """Creates the build's folder with its record in it; returns the folder."""
    folder = build_dir(output_dir, record.build_id)
    storage.make_folders(folder)
    write_atomically(join(folder, BUILD_RECORD), record.to_json())
    storage.make_folder(join(folder, WRITTEN_DIR))
    return folder


def read_build_record(folder: str) -> BuildRecord | None:
    """The build record in `folder`, or None when there is none or it cannot be read."""
    data = storage.read_bytes(join(folder, BUILD_RECORD))
    try:
        return BuildRecord.from_json(data) if data is not None else None
    except (ValueError, KeyError, TypeError):
        return None


def own_copy(published: Metadata) -> Metadata:
    """The build folder's own metadata.json for a top-level one: the same, less the build id, with build_dir "."
    (and the top-level one for a build's own copy). Verify compares the two with it."""
    return replace(published, build_id=None, build_dir=".")


def remove_build(output_dir: str, build_id: str, files: list[str], only: str | None = None) -> list[str]:
    """Removes the files of one build that its record lists as written, then its written list, then the record,
    then (locally) the folders left empty. Files the record does not list stay, and so does the folder holding
    them. With `only`, removes that one file if the record lists it, and nothing else. Returns what was removed,
    relative to the build's folder."""
    folder = build_dir(output_dir, build_id)
    data = storage.read_bytes(join(folder, BUILD_RECORD))
    if data is None and only is not None:
        return []  # no record: nothing it lists
    if data is None:  # killed while writing its record: only that temporary file can be there
        owned = [f for f in files if f.startswith(f"{TEMP_PREFIX}{BUILD_RECORD}.")]
    else:
        record = BuildRecord.from_json(data)
        if record.build_id != build_id:
            raise NotOurFolder(f"{folder}/{BUILD_RECORD} names build {record.build_id!r}, not {build_id!r}")
        if only is not None:
            owned = [f for f in record.covered(files) if f == only]
            storage.delete([join(folder, f) for f in owned])
            return owned
        # metadata.json first (a folder without it never looks finished), the written list after the files it
        # lists (a kill part-way leaves a record that still covers what is left), the record last.
        owned = sorted(record.covered(files), key=lambda f: (f != METADATA_FILE, f.startswith(f"{WRITTEN_DIR}/")))
        owned.append(BUILD_RECORD)
    storage.delete([join(folder, f) for f in owned])
    storage.remove_empty_folders(folder)
    return owned


def build_id_time(build_id: str) -> str:
    """The UTC second a build started, from its id (`20261129T031308Z-...` -> `2026-11-29T03:13:08Z`)."""
    stamp = build_id.split("-", 1)[0]
    return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:{stamp[13:15]}Z"


# tf.transform's output and a build's temporary files ---------------------------------------------------------

def transform_scratch(files_dir: str) -> str:
    """A fresh folder inside the build's folder for tf.transform to write transform_fn/, transformed_metadata/
    and its transform_tmp/ into, claimed whole in the written list before it exists."""
    scratch = join(files_dir, f"{TEMP_PREFIX}transform-{uuid.uuid4().hex}")
    claim(scratch, folder=True)
    return scratch


def carry_over_scratch(files_dir: str) -> str:
    """The folder inside the build's folder for --incremental's spill files (one name per build, so every worker
    of the build finds the same), claimed whole in the written list and made; removed before the build publishes
    (remove_temporary_files), with the build's folder when it does not."""
    scratch = join(files_dir, f"{TEMP_PREFIX}carry-over")
    claim(scratch, folder=True)
    storage.make_folders(scratch, exist_ok=True)
    return scratch


def move_transform_output(scratch: str, files_dir: str) -> None:
    """Moves transform_fn/ and transformed_metadata/ from `scratch` into the build's folder, each file listed
    in the written list before it arrives, then removes `scratch` (the build's own, claimed whole)."""
    moved = [f for f in storage.list_files(scratch) if f.split("/", 1)[0] in TRANSFORM_DIRS]
    targets = [join(files_dir, relative) for relative in moved]
    for target in targets:
        claim(target)
    for folder in sorted({storage.parent(target) for target in targets}):
        storage.make_folders(folder, exist_ok=True)
    storage.rename([join(scratch, relative) for relative in moved], targets)
    storage.remove_tree(scratch)


def remove_temporary_files(files_dir: str) -> None:
    """Removes the temporary files and folders that the build in `files_dir` lists as written (left by killed
    or retried attempts; every shard is final by now), with their entries in its written list."""
    data = storage.read_bytes(join(files_dir, BUILD_RECORD))
    if data is None:
        return
    files = storage.list_files(files_dir)
    temporary = sorted(f for f in BuildRecord.from_json(data).covered(files) if f.startswith(TEMP_PREFIX))
    storage.delete([join(files_dir, f) for f in temporary])
    for folder in {f.split("/", 1)[0] for f in temporary if "/" in f}:
        storage.remove_empty_folders(join(files_dir, folder))
    storage.delete([join(files_dir, entry_file(e)) for e in written_entries(files) if e.startswith(TEMP_PREFIX)])
