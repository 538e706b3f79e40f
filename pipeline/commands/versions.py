"""`shardsmith versions OUT [--json]`: one line per version of the dataset, newest first, with its tags (or a JSON
list), then the versions retention removed last. Lists names, build records, metadata.json files and tags.json
only (shardsmith/read/versions.py); writes nothing and takes no lock.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from shardsmith.output_folder import TagsUnreadable, read_tags
from shardsmith.printable import shown
from shardsmith.read.versions import Version, list_versions, retired_lines


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith versions` and its arguments."""
    parser = parsers.add_parser(
        "versions", help="list the dataset's versions: the published build and the kept ones (--keep_builds)",
        description="One line per version, newest first: its id (a build id, for --version), when its build "
                    "started (UTC), records per split, and which one is current. --json prints a JSON list.")
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    parser.add_argument("--json", action="store_true", help="print the versions as a JSON list")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> list[Version]:
    """`shardsmith versions`: one line per version, newest first, with its tags (or a JSON list with --json)."""
    output_dir = os.fspath(args.output_dir).rstrip("/")
    try:
        tags = read_tags(output_dir)
    except TagsUnreadable as e:
        tags = {}
        print(f"shardsmith: warning: {e}: no tag is shown, and retention removes no build until the file is fixed "
              "or removed", file=sys.stderr, flush=True)
    versions = list_versions(output_dir, tags)
    listed = {version.id for version in versions}
    for name, tag in sorted(tags.items()):
        if tag.version not in listed:
            print(f"shardsmith: warning: tag {name} names version {tag.version}, which is not in {output_dir}",
                  file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([version.as_json() for version in versions], indent=2), flush=True)
    else:
        print("\n".join(shown(line) for line in [version.line() for version in versions]
                                                + retired_lines(output_dir)), flush=True)
    return versions
