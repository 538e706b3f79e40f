"""`shardsmith tag OUT ID NAME`: a name that keeps a version from retention (`shardsmith untag`, untag.py, removes
it).

A tag pins a kept version: retention (`--keep_builds`, after each build and compaction) never removes it, nor a
build folder it lists shards in, for as long as the tag stays; `untag` is the only way a tag goes, and the next
retention then treats the version like any other. Readers take a tag's name wherever they take a version id
(`load(..., version=NAME)`, `records(...)`, `--version NAME`).

Guarantees:
- `tag` pins only a version that is kept now (an id or another tag's name; a retired or unknown one is refused
  with the readers' own line), under a name that is a tag name and no build id; a name that already pins
  another version is refused unless --force moves it. Tagging the version a name already pins changes nothing.
- Both hold the output folder's lock while they read and write tags.json (a build or compaction running there
  refuses them in one line: wait for it), so a tag is never lost to, or missed by, a running build's retention,
  and a version cannot be retired between the check that it is kept and the write.
- tags.json is written whole (a rename locally, one upload on Cloud Storage); one that cannot be read is never
  written over (fix or remove it first): its pins would be lost.
"""

from __future__ import annotations

import argparse
import os

from pipeline.commands.shared import folder_lock, readable_tags
from shardsmith.errors import UsageError
from shardsmith.fault_injection import BEFORE_TAGS_RENAME, reached
from shardsmith.output_folder import Tag, now_utc, open_version, tag_name_problem, write_tags


def _kept_version(output_dir: str, version: str) -> str:
    """The build id of the kept version `version` names (an id or a tag); UsageError as the readers say it."""
    try:
        opened = open_version(output_dir, version)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    return opened.build_id


def tag(output_dir: str, version: str, name: str, force: bool = False) -> Tag:
    """Pins the kept version `version` (a build id or a tag's name) under `name`; returns the tag."""
    output_dir = os.fspath(output_dir).rstrip("/")
    problem = tag_name_problem(name)
    if problem:
        raise UsageError(f"{problem}; choose another name")
    _kept_version(output_dir, version)  # a quick refusal before the lock
    with folder_lock(output_dir):
        tags = readable_tags(output_dir)
        build_id = _kept_version(output_dir, version)  # still kept: no retention runs while the lock is held
        held = tags.get(name)
        if held is not None and held.version == build_id:
            print(f"shardsmith: tag {name} already pins version {build_id}: nothing changed", flush=True)
            return held
        if held is not None and not force:
            raise UsageError(f"tag {name} already pins version {held.version} of {output_dir}; pass --force to move "
                             f"it to {build_id}, or choose another name")
        tags[name] = Tag(name, build_id, now_utc())
        write_tags(output_dir, tags, before_rename=lambda: reached(BEFORE_TAGS_RENAME))
    moved = f" (moved from version {held.version}, which retention may now remove)" if held is not None else ""
    print(f"shardsmith: tag {name} pins version {build_id} of {output_dir}{moved}; retention keeps it until "
          f"`shardsmith untag {output_dir} {name}`", flush=True)
    return tags[name]


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith tag` and its arguments."""
    parser = parsers.add_parser(
        "tag", help="pin a kept version under a name: retention never removes it until `untag`",
        description="Names the kept version ID (a build id, or another tag's name) NAME: --keep_builds never "
                    "retires it, and readers take NAME wherever they take a version id. Holds the folder's lock "
                    "while it writes tags.json.")
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    parser.add_argument("version", metavar="ID", help="a kept version: its build id (`shardsmith versions` lists "
                                                      "them) or a tag's name")
    parser.add_argument("name", metavar="NAME", help="the tag's name: a letter, then letters, digits, '.', '_' or "
                                                     "'-' (like release-1)")
    parser.add_argument("--force", action="store_true", help="move NAME if it already pins another version")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> Tag:
    """`shardsmith tag`: pins the version and says so in one line."""
    return tag(args.output_dir, args.version, args.name, args.force)
