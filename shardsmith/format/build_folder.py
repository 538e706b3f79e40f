"""The output folder's layout, and the only code that deletes or replaces anything in it.

    OUTPUT_DIR/
      metadata.json              the published build: its metadata plus "build_dir"; written last, atomically
      .shardsmith-lock           held by the one build running here (shardsmith/core/build_lock.py)
      builds/<build id>/         one folder per build, immutable once published
        build.json               the build record, written before anything else of the build
        <name>-<split>.tfrecord-SSSSS-of-NNNNN, labels.txt, errors.jsonl, metadata.json, TFDS files,
        transform_fn/, transformed_metadata/

Guarantees:
- Ownership: a file is removed only if it lies in `builds/<id>/` beside that build's record and its name matches
  a pattern the record lists. Nothing at the top level but metadata.json and the lock is ever written or removed,
  and a folder that holds anything else is refused before anything is written (`foreign_entries`).
- Readers: a published build's files are never rewritten. A new build is published by replacing the top-level
  metadata.json in one atomic step (os.replace locally, a single-object write on Cloud Storage), so a reader that
  read metadata.json keeps reading one build's files until retention removes them, then fails on a missing file.
- Names: build ids sort by start time; shard names and build folders read from metadata.json are confined to
  the dataset folder (`dataset_dir`, `confined_file_name`).

Beam-free: local paths use os; gs:// goes through Beam's FileSystems, imported only then.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from shardsmith.format.metadata import MetadataMissing, metadata_bytes, read_metadata
from shardsmith.format.naming import (
    BUILD_ID,
    BUILD_RECORD,
    BUILDS_DIR,
    ERRORS_FILE,
    LABELS_FILE,
    LOCK_FILE,
    METADATA_FILE,
    TEMP_PREFIX,
    TRANSFORM_DIRS,
    is_remote,
    join,
    shard_file_pattern,
)
from shardsmith.format.tfds import TFDS_FILE_NAMES

# Published builds kept by default: the new one and the one before it, so a reader that opened the previous
# build finishes its epoch. Older ones are removed when a build is published.
DEFAULT_KEEP_BUILDS = 2


class NotOurFolder(Exception):
    """The output folder holds something shardsmith did not write; the message names it."""


def new_build_id(now: float | None = None) -> str:
    """A fresh id that sorts by start time (UTC, to the second) and differs between builds started together."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{stamp}-{secrets.token_hex(4)}"


def build_dir(output_dir: str, build_id: str) -> str:
    return join(output_dir, BUILDS_DIR, build_id)


@dataclass(frozen=True)
class BuildRecord:
    """Written first into a build's folder: which build it is and which files it may make there. Cleanup of an
    unfinished or retired build removes only files matching `files` (fnmatch patterns relative to the folder)."""

    build_id: str
    name: str
    started: str
    files: tuple[str, ...]

    @classmethod
    def for_build(cls, build_id: str, name: str) -> BuildRecord:
        files = (
            METADATA_FILE, ERRORS_FILE, LABELS_FILE, *TFDS_FILE_NAMES,
            shard_file_pattern(name), f"{TEMP_PREFIX}*",
            *(f"{d}/*" for d in TRANSFORM_DIRS),
        )
        return cls(build_id, name, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), files)

    def to_json(self) -> bytes:
        return (json.dumps({**asdict(self), "files": list(self.files)}, indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> BuildRecord:
        fields = json.loads(data.decode("utf-8"))
        return cls(fields["build_id"], fields["name"], fields["started"], tuple(fields["files"]))

    def owns(self, relative: str) -> bool:
        return relative != BUILD_RECORD and any(fnmatch.fnmatchcase(relative, p) for p in self.files)


# Reading the layout -------------------------------------------------------------------------------------------

def dataset_dir(output_dir: str, metadata: dict) -> str:
    """The folder holding the shards of the build that `metadata` (read from `output_dir`) describes: the build
    folder named by a top-level metadata.json, or `output_dir` itself for a build's own copy (and for datasets
    written before builds had folders). Raises ValueError for a name that would leave `output_dir`."""
    if not is_published(metadata):
        return output_dir.rstrip("/")
    relative = metadata["build_dir"]
    parts = str(relative).split("/")
    if len(parts) != 2 or parts[0] != BUILDS_DIR or not BUILD_ID.fullmatch(parts[1]):
        raise ValueError(f"metadata.json names build folder {relative!r}; expected {BUILDS_DIR}/<build id>")
    return join(output_dir, relative)


def published_dir(output_dir: str | os.PathLike) -> str:
    """The folder of the build that `output_dir`'s metadata.json publishes now (for TFDS's
    `builder_from_directory`, or to read labels.txt and errors.jsonl). Raises FileNotFoundError without one."""
    output_dir = os.fspath(output_dir).rstrip("/")
    try:
        metadata = read_metadata(output_dir, read_bytes)
    except MetadataMissing as e:
        raise FileNotFoundError(str(e)) from None
    return dataset_dir(output_dir, metadata)


def confined_file_name(name: str) -> str:
    """A shard file name from metadata.json, checked to name a file inside the dataset folder."""
    if not name or "/" in name or "\\" in name or name in (".", "..") or name.startswith(TEMP_PREFIX):
        raise ValueError(f"metadata.json lists shard file {name!r}, which is not a file name in the dataset folder")
    return name


def _list_local(folder: str) -> dict[str, bool]:
    """{entry name: is a folder} of one local folder; empty if it does not exist."""
    try:
        with os.scandir(folder) as entries:
            return {e.name: e.is_dir(follow_symlinks=False) for e in entries}
    except (FileNotFoundError, NotADirectoryError):
        return {}


def _relative_remote_files(folder: str) -> list[str]:
    from apache_beam.io.filesystems import FileSystems

    prefix = folder.rstrip("/") + "/"
    try:
        matched = FileSystems.match([prefix + "**"])[0].metadata_list
    except Exception:
        return []
    return sorted(m.path[len(prefix):] for m in matched if len(m.path) > len(prefix))


@dataclass
class FolderState:
    """What an output folder holds, as far as builds are concerned."""

    foreign: list[str]  # top-level entries (or entries of builds/) that no shardsmith build wrote
    published: dict | None  # the top-level metadata.json, parsed
    builds: dict[str, list[str]]  # build id -> its files, relative to its folder (the record included)


def read_bytes(path: str) -> bytes | None:
    """A whole file, or None if it does not exist."""
    if not is_remote(path):
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.exists(path):
        return None
    with FileSystems.open(path) as f:
        return f.read()


def scan(output_dir: str) -> FolderState:
    """Lists the output folder and tells its entries apart. Reads only names and the top-level metadata.json."""
    if is_remote(output_dir):
        files = _relative_remote_files(output_dir)
        top = {f.split("/", 1)[0]: "/" in f for f in files}
        in_builds: dict[str, list[str] | None] = {}
        for f in files:
            parts = f.split("/", 2)
            if parts[0] == BUILDS_DIR and len(parts) == 3 and in_builds.get(parts[1], []) is not None:
                in_builds.setdefault(parts[1], []).append(parts[2])
            elif parts[0] == BUILDS_DIR and len(parts) == 2:
                in_builds[parts[1]] = None  # a file directly under builds/: not a build's folder
    else:
        top = _list_local(output_dir)
        in_builds = {}
        for entry, is_dir in _list_local(join(output_dir, BUILDS_DIR)).items():
            in_builds[entry] = _walk_local(join(output_dir, BUILDS_DIR, entry)) if is_dir else None
    foreign = [name + ("/" if is_dir else "") for name, is_dir in sorted(top.items())
               if (name, is_dir) not in ((METADATA_FILE, False), (LOCK_FILE, False), (BUILDS_DIR, True))]
    published = None
    if (METADATA_FILE, False) in top.items():
        published = _published_metadata(output_dir)
        if published is None:
            foreign.insert(0, METADATA_FILE)
    builds = {}
    for build_id, files in sorted(in_builds.items()):
        if files is None or not BUILD_ID.fullmatch(build_id) or not _is_build_folder(files):
            foreign.append(f"{BUILDS_DIR}/{build_id}")
        else:
            builds[build_id] = sorted(files)
    return FolderState(foreign, published, builds)


def _walk_local(folder: str) -> list[str]:
    found = []
    for dirpath, _, names in os.walk(folder):
        rel = os.path.relpath(dirpath, folder)
        found.extend(name if rel == "." else f"{rel}/{name}" for name in names)
    return found


def _is_build_folder(files: list[str]) -> bool:
    """A build's folder holds its record; one killed while writing the record holds only that temporary file."""
    return BUILD_RECORD in files or all(f.startswith(f"{TEMP_PREFIX}{BUILD_RECORD}.") for f in files)


def _published_metadata(output_dir: str) -> dict | None:
    """The top-level metadata.json if shardsmith wrote it in this layout, else None."""
    try:
        metadata = read_metadata(output_dir, read_bytes)
        dataset_dir(output_dir, metadata)
    except ValueError:  # MetadataError among them
        return None
    if metadata.get("format") != "tfrecord" or "build_dir" not in metadata:
        return None
    return metadata


def finished(state: FolderState, build_id: str) -> bool:
    return METADATA_FILE in state.builds.get(build_id, ())


def published_build_id(state: FolderState) -> str | None:
    return state.published["build_dir"].split("/", 1)[1] if state.published else None


# Writing and removing ------------------------------------------------------------------------------------------

def write_atomically(path: str, data: bytes) -> None:
    """Writes `path` so that it holds either its old content or all of `data`, never a part: through a
    temporary name beside it and a rename (locally), or as one object upload (Cloud Storage creates an object
    only when its upload completes)."""
    if is_remote(path):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(path) as out:
            out.write(data)
        return
    folder, base = path.rsplit("/", 1)
    temp = f"{folder}/{TEMP_PREFIX}{base}.{secrets.token_hex(8)}"
    with open(temp, "wb") as out:
        out.write(data)
    os.replace(temp, path)


COPY_CHUNK_BYTES = 1 << 20  # write_atomically_from holds about one chunk at a time


def write_atomically_from(path: str, chunks: Iterable[bytes]) -> None:
    """Writes `path` as the concatenation of `chunks`, consumed one at a time (never all in memory); like
    write_atomically, `path` holds either its old content or all of it."""
    if is_remote(path):
        from apache_beam.io.filesystems import FileSystems

        with FileSystems.create(path) as out:
            for chunk in chunks:
                out.write(chunk)
        return
    folder, base = path.rsplit("/", 1)
    temp = f"{folder}/{TEMP_PREFIX}{base}.{secrets.token_hex(8)}"
    with open(temp, "wb") as out:
        for chunk in chunks:
            out.write(chunk)
    os.replace(temp, path)


def start_build(output_dir: str, record: BuildRecord) -> str:
    """Creates the build's folder with its record in it; returns the folder."""
    folder = build_dir(output_dir, record.build_id)
    if not is_remote(folder):
        os.makedirs(folder, exist_ok=False)
    write_atomically(join(folder, BUILD_RECORD), record.to_json())
    return folder


def publish(output_dir: str, build_id: str, metadata: dict) -> None:
    """Makes `build_id` the build readers of `output_dir` get: its own metadata.json first (build_dir "."), then
    the top-level one (build_dir builds/<id>), replaced in one step. Locally the top-level file is staged inside
    the build's folder, so nothing but metadata.json itself ever appears at the top level."""
    folder = build_dir(output_dir, build_id)
    write_atomically(join(folder, METADATA_FILE), metadata_bytes(own_copy(metadata)))
    top = metadata_bytes({**metadata, "build_id": build_id, "build_dir": f"{BUILDS_DIR}/{build_id}"})
    if is_remote(output_dir):
        write_atomically(join(output_dir, METADATA_FILE), top)
        return
    staged = join(folder, f"{TEMP_PREFIX}published-{METADATA_FILE}")
    with open(staged, "wb") as out:
        out.write(top)
    os.replace(staged, join(output_dir, METADATA_FILE))


def own_copy(published: dict) -> dict:
    """The build folder's own metadata.json for a top-level one: the same, less the build id, with build_dir "."
    (and the top-level one for a build's own copy). Verify compares the two with it."""
    return {**{k: v for k, v in published.items() if k != "build_id"}, "build_dir": "."}


def is_published(metadata: dict) -> bool:
    """Whether `metadata` is a top-level metadata.json that names a build folder (not a build's own copy)."""
    return metadata.get("build_dir", ".") != "."


def remove_build(output_dir: str, build_id: str, files: list[str]) -> list[str]:
    """Removes the files of one build that its record says the build made, then the record, then (locally)
    the folders left empty. Files the record does not claim stay, and so does the folder holding them.
    Returns what was removed, relative to the build's folder."""
    folder = build_dir(output_dir, build_id)
    data = read_bytes(join(folder, BUILD_RECORD))
    if data is None:  # killed while writing its record: only that temporary file can be there
        owned = [f for f in files if f.startswith(f"{TEMP_PREFIX}{BUILD_RECORD}.")]
    else:
        record = BuildRecord.from_json(data)
        if record.build_id != build_id:
            raise NotOurFolder(f"{folder}/{BUILD_RECORD} names build {record.build_id!r}, not {build_id!r}")
        owned = [f for f in files if record.owns(f)]
        # metadata.json first (a folder without it never looks finished), the record last.
        owned.sort(key=lambda f: f != METADATA_FILE)
        owned.append(BUILD_RECORD)
    _delete([join(folder, f) for f in owned])
    if not is_remote(folder):
        _remove_empty_folders(folder)
    return owned


def _delete(paths: list[str]) -> None:
    if not paths:
        return
    if not is_remote(paths[0]):
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        return
    from apache_beam.io.filesystems import FileSystems

    FileSystems.delete(paths)


def _remove_empty_folders(root: str) -> None:
    for dirpath, _, _ in sorted(os.walk(root), key=lambda t: -len(t[0])):
        with contextlib.suppress(OSError):  # not empty: something the build did not make is still there
            os.rmdir(dirpath)


def retire_builds(output_dir: str, current: str | None = None, keep: int | None = None) -> list[str]:
    """Removes unfinished builds other than `current`, and with `keep`, published builds beyond the newest
    `keep` (`current` counts and is never removed). Call only while holding the folder's lock: an unfinished
    build is then one whose run is over. Returns the ids removed."""
    state = scan(output_dir)
    kept = 1
    removed = []
    for build_id in sorted(state.builds, reverse=True):
        if build_id == current:
            continue
        if finished(state, build_id) and (keep is None or kept < keep):
            kept += 1
            continue
        remove_build(output_dir, build_id, state.builds[build_id])
        removed.append(build_id)
    return removed
