"""Opening a version of an output folder, in one place: the published version (the top-level metadata.json) or
the kept one a build id or a tag's name gives. Every reader (`load()`, `records()`, `verify`, `inspect`,
`shardsmith.tfds_dirs`), every command (`tag`, `index`, `card`, `readcheck`, `compact`) and the --incremental
launcher check open a version through `open_version`.

Guarantees: every caller says the same one line for the same version. A kept version opens; a tag opens the
version it pins; a version retention removed says that it is no longer kept, by which --keep_builds and when
(retired.json); an id that was never a version of the folder says so and names `shardsmith versions`. A version
is a folder `builds/<build id>/` and nothing else: a tag's version is a build id (tags.py), so no name given
here, or read from tags.json, leads outside the output folder. What adds to a version or rewrites it checks
every id and file name its metadata.json gives before it reads anything the version lists
(`OpenedVersion.checked_id`). Opening reads only: no lock, no write.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from shardsmith import storage
from shardsmith.format.metadata import read_metadata
from shardsmith.format.metadata_schema import Metadata, MetadataMissing
from shardsmith.format.naming import BUILD_ID, BUILD_RECORD, STAGED_METADATA, join
from shardsmith.output_folder.layout import build_dir, checked_version_id
from shardsmith.output_folder.retired import read_retired, retention_text
from shardsmith.output_folder.tags import Tag, TagsUnreadable, read_tags, tag_name_problem

ReadBytes = Callable[[str], bytes | None]
# What to do about a published version that cannot be added to or rewritten as it is.
REBUILD = "rebuild it in full once with --incremental --overwrite"


class VersionNotFound(FileNotFoundError):
    """The version asked for is not one a reader can open (never was, or no longer kept); one line."""


@dataclass(frozen=True)
class OpenedVersion:
    """A version of an output folder, opened: its metadata.json, read and checked."""

    metadata: Metadata
    folder: str  # the folder whose metadata.json it is: the output folder for the published version
    build_id: str | None  # the version asked for (a tag's, resolved); None when none was
    output_dir: str  # the output folder it is a version of

    def checked_id(self) -> str:
        """The version's build id, once every id and file name its metadata.json gives is checked as the readers
        check them (layout.checked_version_id); ValueError naming the entry that would lead out of the
        dataset folder, and what to do. --incremental and `compact` call it before they read what it lists."""
        try:
            return checked_version_id(self.output_dir, self.metadata)
        except ValueError as e:
            raise ValueError(f"{e}; nothing was read or written: restore metadata.json as shardsmith wrote it (each "
                             f"build's folder keeps its own copy), or {REBUILD}") from None


def open_version(output_dir: str | os.PathLike, version: str | None = None,
                 read_bytes: ReadBytes | None = None, *, readable: bool = True) -> OpenedVersion:
    """The published version of `output_dir` (`version` None) or the kept one `version` names (a build id or a
    tag's name), with its metadata.json read and checked to hold what readers take. `read_bytes(path)` reads a
    file or returns None (default: shardsmith.storage; `load()` passes TensorFlow's). `readable` False checks
    metadata.json's form only, not that it holds every entry the read side takes (what --incremental and
    `compact` read of it). Raises FileNotFoundError (VersionNotFound for a version) or ValueError (MetadataError
    among them), one line each."""
    output_dir = os.fspath(output_dir).rstrip("/")
    read = read_bytes or storage.read_bytes
    if version is None:
        try:
            return OpenedVersion(read_metadata(output_dir, read, readable=readable), output_dir, None, output_dir)
        except MetadataMissing as e:
            raise FileNotFoundError(str(e)) from None
    version = str(version)
    tag = None if BUILD_ID.fullmatch(version) else _tag(output_dir, version, read_bytes)
    build_id = tag.version if tag else version
    folder = build_dir(output_dir, build_id)
    try:
        metadata = read_metadata(folder, read, readable=readable)
    except MetadataMissing:
        raise VersionNotFound(_missing(output_dir, build_id, tag, read_bytes)) from None
    if read(join(folder, STAGED_METADATA)) is not None:
        raise VersionNotFound(f"no version {build_id} in {output_dir}: its build never published (it did not "
                              f"finish); {_listing(output_dir)}")
    return OpenedVersion(metadata, folder, build_id, output_dir)


def _listing(output_dir: str) -> str:
    return f"`shardsmith versions {output_dir}` lists them"


def _tag(output_dir: str, name: str, read_bytes: ReadBytes | None) -> Tag:
    if tag_name_problem(name):
        raise ValueError(f"version {name[:80]!r} is neither a build id (like 20261124T211052Z-44b3a31b) nor a tag "
                         f"name; {_listing(output_dir)}")
    try:
        tags = read_tags(output_dir, read_bytes)
    except TagsUnreadable as e:
        raise ValueError(f"{e}: tag {name} cannot be looked up; fix or remove the file") from None
    if name not in tags:
        raise VersionNotFound(f"no version or tag {name!r} in {output_dir}; {_listing(output_dir)}")
    return tags[name]


def _missing(output_dir: str, build_id: str, tag: Tag | None, read_bytes: ReadBytes | None) -> str:
    """Why `build_id` has no metadata.json: retired (when, by which --keep_builds), unfinished, or never a build."""
    what = f"tag {tag.name} names version {build_id}, which" if tag else f"version {build_id}"
    retired = read_retired(output_dir, read_bytes).get(build_id)
    if retired is not None:
        return (f"{what} is no longer kept in {output_dir}: retention ({retention_text(retired)}) retired it at "
                f"{retired.retired}; "
                f"{_listing(output_dir)} (`shardsmith tag` keeps a version from retention)")
    if (read_bytes or storage.read_bytes)(join(build_dir(output_dir, build_id), BUILD_RECORD)) is not None:
        return f"no version {build_id} in {output_dir}: its build did not finish; {_listing(output_dir)}"
    if tag:
        return f"{what} is not in {output_dir} any more; {_listing(output_dir)}"
    return f"no version {build_id} in {output_dir}; {_listing(output_dir)}"
