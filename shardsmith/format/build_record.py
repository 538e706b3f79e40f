"""A build's record: which build a folder holds, and exactly which files and folders the build wrote there.

    builds/<id>/build.json                  written first: the build's id, the dataset's name, the start time
    builds/<id>/.shardsmith-written/<p>     one empty file per path p the build writes in its folder, made
                                            BEFORE p is written ("~" in p escaped as ~t, "/" as ~s; a
                                            trailing "/" claims a folder the build made, with all it holds)

Guarantees:
- A kill at any moment leaves a record covering every file the build had started: the entry exists before the
  file does. An entry X also covers X's temporary names, `.shardsmith-tmp-<name of X>.<hex>` beside X, the
  only names shardsmith writes X through.
- Cleanup deletes exactly the files the record covers, never a file because its name looks like one of ours: a
  user's `x.tfrecord-00000-of-00004.bak` or `transform_fn/mine/notes.ipynb` in a build's folder stays.
- What is written into a build's folder is written through `write_atomically` (or `write_atomically_from`),
  which claims it first; no file of a build is written any other way.
- Entries are separate files, so any number of processes (local writer processes, Dataflow workers) add them at
  once, on a local disk or Cloud Storage alike, with no read-modify-write.

Records written before the list existed (version 1: name patterns in build.json) are still read, each `*`
confined to one path segment and shard names checked exactly.
"""

from __future__ import annotations

import fnmatch
import json
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.format.naming import (
    BUILD_ID,
    BUILD_RECORD,
    BUILDS_DIR,
    SHARD_MARKS,
    TEMP_PREFIX,
    WRITTEN_DIR,
)
from shardsmith.storage import join, make_folder, touch

RECORD_VERSION = 2
_IN_A_BUILD = re.compile(rf"(.*/{BUILDS_DIR}/{BUILD_ID.pattern})/(.+)")  # greedy: the innermost build folder
_TEMPORARY = re.compile(rf"(?:(.*)/)?{re.escape(TEMP_PREFIX)}(.+)\.[0-9a-f]{{16,32}}")
_LEGACY_SHARD = re.compile(rf"[^/]+-(train|validation|test){SHARD_MARKS}\d{{5}}-of-\d{{5}}(\.gz)?")
# tf.transform's files below the first level, which version-1 patterns ("transform_fn/*") meant to cover.
_LEGACY_TRANSFORM_PATTERNS = ("transform_fn/variables/*", "transform_fn/assets/*")


@dataclass(frozen=True)
class BuildRecord:
    """build.json: which build a folder holds. `patterns` is only set for a version-1 record."""

    build_id: str
    name: str
    started: str
    version: int = RECORD_VERSION
    patterns: tuple[str, ...] = ()
    # When the build was published (UTC), written into the record just before its publish switch; None: not
    # published, or before the entry. Retention counts --keep_days from the next version's; metadata.json holds
    # no time, so that the same inputs give the same bytes.
    published: str | None = None

    @classmethod
    def for_build(cls, build_id: str, name: str) -> BuildRecord:
        return cls(build_id, name, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def to_json(self) -> bytes:
        fields = {"build_id": self.build_id, "name": self.name, "started": self.started, "version": self.version,
                  "written": f"{WRITTEN_DIR}/"}
        if self.patterns:
            fields["files"] = list(self.patterns)
        if self.published is not None:
            fields["published"] = self.published
        return (json.dumps(fields, indent=2) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> BuildRecord:
        fields = json.loads(data.decode("utf-8"))
        version = int(fields.get("version", 1))
        patterns = tuple(fields.get("files", ())) if version == 1 else ()
        published = fields.get("published")
        return cls(fields["build_id"], fields["name"], fields["started"], version, patterns,
                   published if isinstance(published, str) and len(published) <= 40 else None)

    def covered(self, files: list[str]) -> list[str]:
        """Which of `files` (relative to the build's folder, as listed) this build wrote, its written list
        included; the record itself is not among them."""
        if self.version == 1:
            return [f for f in files if _legacy_owns(self.patterns, f)]
        entries = written_entries(files)
        folders = tuple(e for e in entries if e.endswith("/"))
        return [f for f in files if f.startswith(f"{WRITTEN_DIR}/") or f in entries or f.startswith(folders)
                or _temporary_of(f) in entries]


def _temporary_of(relative: str) -> str | None:
    found = _TEMPORARY.fullmatch(relative)
    if not found:
        return None
    folder, name = found.groups()
    return f"{folder}/{name}" if folder else name


def _legacy_owns(patterns: tuple[str, ...], relative: str) -> bool:
    parts = relative.split("/")
    for pattern in (*patterns, *_LEGACY_TRANSFORM_PATTERNS):
        pattern_parts = pattern.split("/")
        if len(pattern_parts) == len(parts) and all(map(fnmatch.fnmatchcase, parts, pattern_parts)):
            if re.search(SHARD_MARKS, pattern) and not pattern.startswith(TEMP_PREFIX):
                return bool(_LEGACY_SHARD.fullmatch(relative))
            return True
    return False


# "/" as "~s" and "~" as "~t": an entry is one file name, and "~" needs no quoting in a Cloud Storage URL.
_UNESCAPED = {"s": "/", "t": "~"}


def _escape(relative: str) -> str:
    return relative.replace("~", "~t").replace("/", "~s")


def _unescape(name: str) -> str:
    return re.sub("~([st])", lambda m: _UNESCAPED[m.group(1)], name)


def written_entries(files: list[str]) -> set[str]:
    """The paths a build's written list names, from the listing of its folder."""
    prefix = f"{WRITTEN_DIR}/"
    return {_unescape(f[len(prefix):]) for f in files if f.startswith(prefix) and "/" not in f[len(prefix):]}


def in_a_build(path: str) -> tuple[str, str] | None:
    """(the build's folder, `path` relative to it) for a path inside `builds/<id>/`; else None."""
    inside = _IN_A_BUILD.fullmatch(path)
    return None if inside is None else (inside[1], inside[2])


def claim(path: str, folder: bool = False) -> None:
    """Adds `path` (a file, or with `folder` a folder and all it will hold) to the written list of the build
    whose folder holds it, before anything is written there; a path outside `builds/<id>/` needs no entry.
    Locally the build's folder must exist: a writer whose build was removed fails here instead of making it
    again."""
    inside = in_a_build(path)
    if inside is None:
        return
    build, relative = inside
    if relative == BUILD_RECORD or relative.startswith((f"{TEMP_PREFIX}{BUILD_RECORD}.", f"{WRITTEN_DIR}/")):
        return
    entry = join(build, WRITTEN_DIR, _escape(relative.rstrip("/") + ("/" if folder else "")))
    make_folder(join(build, WRITTEN_DIR), exist_ok=True)
    touch(entry)


def entry_file(relative: str) -> str:
    """The written list's file (relative to the build's folder) for `relative`."""
    return f"{WRITTEN_DIR}/{_escape(relative)}"


def write_atomically(path: str, data: bytes) -> None:
    """Writes `path` so that it holds either its old content or all of `data`, never a part
    (shardsmith.storage.write_atomically), after adding it to its build's written list when it lies in a build's
    folder (and making the folders below the build's folder that it lies in)."""
    claim(path)
    _make_folders_in_build(path)
    storage.write_atomically(path, data)


def _make_folders_in_build(path: str) -> None:
    """Locally, the missing folders between a build's folder and `path` (tfds/00000/ for the TFDS files), one
    level at a time: a writer whose build folder was removed fails instead of making it again."""
    inside = in_a_build(path)
    if inside is None:
        return
    folder, relative = inside
    for part in relative.split("/")[:-1]:
        folder = join(folder, part)
        storage.make_folder(folder, exist_ok=True)


COPY_CHUNK_BYTES = 1 << 20  # write_atomically_from holds about one chunk at a time


def write_atomically_from(path: str, chunks: Iterable[bytes]) -> None:
    """Writes `path` as the concatenation of `chunks`, consumed one at a time (never all in memory); like
    write_atomically, `path` holds either its old content or all of it (and is first added to its build's
    written list, its folders below the build's folder made)."""
    claim(path)
    _make_folders_in_build(path)
    storage.write_atomically_from(path, chunks)
