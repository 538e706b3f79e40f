"""`shardsmith card OUT [--version ID|TAG] [--output PATH]`: the dataset card of a version, made now.

Without --output the card is written into the version's build folder (card.html, replacing the one its build
wrote) under the output folder's lock, and listed in the build's record, so retention removes it with the
version; with --output it is written to PATH (local or gs://) and the dataset is not touched.
"""

from __future__ import annotations

import os

from shardsmith import storage
from shardsmith.card.facts import DEFAULT_PER_LABEL, MAX_PER_LABEL
from shardsmith.errors import UsageError
from shardsmith.format.naming import BUILD_ID
from shardsmith.read.version_files import open_version
from shardsmith.read.versions import add_version_argument


def add_arguments(parser) -> None:
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    add_version_argument(parser)
    parser.add_argument("--output", metavar="PATH",
                        help="write the card here instead of into the version's build folder (card.html)")
    parser.add_argument("--split", help="the split the example images come from (default: train)")
    parser.add_argument("--per_label", type=int, default=DEFAULT_PER_LABEL, metavar="N",
                        help=f"example images per label, 1 to {MAX_PER_LABEL} (default {DEFAULT_PER_LABEL})")


def kept_build_id(output_dir: str, version: str | None, split: str | None = None) -> str:
    """The build id of the kept version `version` names (None: the published one); UsageError as readers say it,
    or when it holds no split `split`."""
    try:
        opened = open_version(output_dir, version)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    if split is not None and split not in opened.metadata.splits:
        raise UsageError(f"split {split!r} is not in this dataset ({', '.join(opened.metadata.splits)})")
    build_id = opened.build_id or opened.metadata.build_id
    if build_id is None or not BUILD_ID.fullmatch(build_id):
        raise UsageError(f"{output_dir} was built before builds had folders: build it again to get a dataset card")
    return build_id


def run(args) -> str:
    from shardsmith.card import CARD_FILE, card_bytes
    from shardsmith.format.build_folder import build_dir, write_atomically
    from shardsmith.read.tagging import folder_lock

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
