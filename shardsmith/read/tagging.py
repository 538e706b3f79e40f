"""`shardsmith tag OUT ID NAME` and `shardsmith untag OUT NAME`: names that keep a version from retention.

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

import os
from contextlib import contextmanager

from shardsmith.core.fault_injection import BEFORE_TAGS_RENAME, reached
from shardsmith.errors import UsageError
from shardsmith.format.tags import Tag, TagsUnreadable, now_utc, read_tags, tag_name_problem, write_tags
from shardsmith.read.version_files import open_version


@contextmanager
def folder_lock(output_dir: str, command: str = "tag"):
    """The output folder's lock for the time of one command's change (a tags.json write, a card written into a
    version's folder); UsageError while a build holds it, saying to run `command` again."""
    from shardsmith.core.build_lock import LockHeld, acquire_lock
    from shardsmith.format.build_folder import new_build_id

    try:
        lock = acquire_lock(output_dir, new_build_id())
    except LockHeld as e:
        raise UsageError(f"{e} (then run {command} again)") from None
    except OSError as e:
        raise UsageError(f"output folder {output_dir} is not writable: {str(e).splitlines()[0]}") from None
    try:
        from shardsmith.format.build_folder import remove_temporaries

        remove_temporaries(output_dir)  # a tags.json write killed before its rename, say
        yield
    finally:
        lock.release()


def _tags(output_dir: str) -> dict[str, Tag]:
    try:
        return read_tags(output_dir)
    except TagsUnreadable as e:
        raise UsageError(f"{e}; it is left as it is (its tags would be lost): fix or remove it, then tag again") \
            from None


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
        tags = _tags(output_dir)
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


def untag(output_dir: str, name: str) -> Tag:
    """Removes the tag `name`; returns what it was. Its version is then kept only while --keep_builds keeps it."""
    output_dir = os.fspath(output_dir).rstrip("/")
    with folder_lock(output_dir):
        tags = _tags(output_dir)
        removed = tags.pop(name, None)
        if removed is None:
            raise UsageError(f"no tag {name[:80]!r} in {output_dir}; `shardsmith versions {output_dir}` lists the tags")
        write_tags(output_dir, tags, before_rename=lambda: reached(BEFORE_TAGS_RENAME))
    print(f"shardsmith: removed tag {name} (version {removed.version}); the next build or compaction removes that "
          "version if --keep_builds no longer keeps it and no other tag pins it", flush=True)
    return removed


def add_tag_arguments(parser) -> None:
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    parser.add_argument("version", metavar="ID", help="a kept version: its build id (`shardsmith versions` lists "
                                                      "them) or a tag's name")
    parser.add_argument("name", metavar="NAME", help="the tag's name: a letter, then letters, digits, '.', '_' or "
                                                     "'-' (like release-1)")
    parser.add_argument("--force", action="store_true", help="move NAME if it already pins another version")


def add_untag_arguments(parser) -> None:
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    parser.add_argument("name", metavar="NAME", help="the tag to remove")


def run_tag(args) -> Tag:
    return tag(args.output_dir, args.version, args.name, args.force)


def run_untag(args) -> Tag:
    return untag(args.output_dir, args.name)
