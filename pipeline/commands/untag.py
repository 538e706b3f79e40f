"""`shardsmith untag OUT NAME`: removes a tag (the only way a tag goes); its version is then kept only while
--keep_builds keeps it. Holds the output folder's lock while it reads and writes tags.json, as `tag` does (tag.py
has the guarantees)."""

from __future__ import annotations

import argparse
import os

from pipeline.commands.shared import folder_lock, readable_tags
from shardsmith.errors import UsageError
from shardsmith.fault_injection import BEFORE_TAGS_RENAME, reached
from shardsmith.output_folder import Tag, write_tags


def untag(output_dir: str, name: str) -> Tag:
    """Removes the tag `name`; returns what it was. Its version is then kept only while --keep_builds keeps it."""
    output_dir = os.fspath(output_dir).rstrip("/")
    with folder_lock(output_dir):
        tags = readable_tags(output_dir)
        removed = tags.pop(name, None)
        if removed is None:
            raise UsageError(f"no tag {name[:80]!r} in {output_dir}; `shardsmith versions {output_dir}` lists the tags")
        write_tags(output_dir, tags, before_rename=lambda: reached(BEFORE_TAGS_RENAME))
    print(f"shardsmith: removed tag {name} (version {removed.version}); the next build or compaction removes that "
          "version if --keep_builds no longer keeps it and no other tag pins it", flush=True)
    return removed


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith untag` and its arguments."""
    parser = parsers.add_parser(
        "untag", help="remove a tag: its version is then kept only while --keep_builds keeps it",
        description="Removes the tag NAME (the only way a tag goes); the next build or compaction retires its "
                    "version if --keep_builds no longer keeps it and no other tag pins it.")
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    parser.add_argument("name", metavar="NAME", help="the tag to remove")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> Tag:
    """`shardsmith untag`: removes the tag and says so in one line."""
    return untag(args.output_dir, args.name)
