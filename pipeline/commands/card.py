"""`shardsmith card OUT [--version ID|TAG] [--output PATH]`: the dataset card of a version, made now.

Without --output the card is written into the version's build folder (card.html, replacing the one its build
wrote) under the output folder's lock, and listed in the build's record, so retention removes it with the
version; with --output it is written to PATH (local or gs://) and the dataset is not touched.
"""

from __future__ import annotations

import argparse
import os

from pipeline.commands.shared import add_version_argument, folder_lock, kept_build_id
from shardsmith import storage
from shardsmith.card.facts import DEFAULT_PER_LABEL, MAX_PER_LABEL
from shardsmith.errors import UsageError


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith card` and its arguments."""
    parser = parsers.add_parser(
        "card", help="write a version's dataset card: one HTML page of its data, changes and mixing",
        description="Writes card.html into the version's build folder (under the folder's lock), or to --output. "
                    "Builds and compactions write one unless --no_card.")
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    add_version_argument(parser)
    parser.add_argument("--output", metavar="PATH",
                        help="write the card here instead of into the version's build folder (card.html)")
    parser.add_argument("--split", help="the split the example images come from (default: train)")
    parser.add_argument("--per_label", type=int, default=DEFAULT_PER_LABEL, metavar="N",
                        help=f"example images per label, 1 to {MAX_PER_LABEL} (default {DEFAULT_PER_LABEL})")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> str:
    """`shardsmith card`: writes the card and prints where it is."""
    from shardsmith.card import CARD_FILE, card_bytes
    from shardsmith.format.build_record import write_atomically
    from shardsmith.output_folder import build_dir

    output_dir = os.fspath(args.output_dir).rstrip("/")
    if not 1 <= args.per_label <= MAX_PER_LABEL:
        raise UsageError(f"--per_label must be from 1 to {MAX_PER_LABEL}")
    build_id = kept_build_id(output_dir, args.version, args.split)
    if args.output:
        path = args.output if storage.is_remote(args.output) else os.path.abspath(args.output)
        if not storage.is_remote(path) and not os.path.isdir(os.path.dirname(path)):
            raise UsageError(f"cannot write {args.output}: its folder does not exist")
        storage.write_atomically(path, card_bytes(output_dir, build_id, args.split, args.per_label))
    else:
        with folder_lock(output_dir, "card"):
            build_id = kept_build_id(output_dir, build_id)  # still kept: retention waits for the lock
            path = storage.join(build_dir(output_dir, build_id), CARD_FILE)
            write_atomically(path, card_bytes(output_dir, build_id, args.split, args.per_label))
    shown_path = path if storage.is_remote(path) else "file://" + os.path.abspath(path)
    print(f"shardsmith: the card of version {build_id} is {shown_path} (open it in a browser)", flush=True)
    return path
