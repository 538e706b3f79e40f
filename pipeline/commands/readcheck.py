"""`shardsmith readcheck OUT [--split train] [--limit N] [--files]`: how fast this machine reads a version, and
why (the readers and the verdict: shardsmith/card/read_check.py). The figures are saved as readcheck.json in the
version's build folder (under the folder's lock, listed in its record) and the version's card is made again with
them, unless --no_save.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from pipeline.commands.shared import add_version_argument, folder_lock, kept_build_id
from shardsmith.card.read_check import FILE_READERS, measure_in_process, report, verdict
from shardsmith.card.readers import Settings
from shardsmith.errors import UsageError


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith readcheck` and its arguments."""
    parser = parsers.add_parser(
        "readcheck", help="measure how fast this machine reads a version (tf.data, PyTorch, the decode limit, "
                          "--files) and say why",
        description="Reads one pass of a split with each reader, each in its own process, and prints images/s, "
                    "CPU per image and a verdict; the figures are saved beside the version and shown on its card.")
    parser.add_argument("output_dir", help="a dataset folder (local or gs://)")
    add_version_argument(parser)
    parser.add_argument("--split", default="train", help="the split read (default train)")
    parser.add_argument("--limit", type=int, metavar="N", help="read at most N records per reader (default: a pass)")
    parser.add_argument("--files", action="store_true",
                        help="also read the same images as files, as a user's own loader would")
    parser.add_argument("--image_size", type=int, default=224, help="decode and resize to this (default 224)")
    parser.add_argument("--batch_size", type=int, default=32, help="batch size (default 32)")
    parser.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1),
                        help="DataLoader workers for the torch readers (default: cores, at most 4)")
    parser.add_argument("--no_save", action="store_true",
                        help="print the figures only: write neither readcheck.json nor the card")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> dict:
    """`shardsmith readcheck`: each reader's pass, the figures and the verdict; saved unless --no_save."""
    output_dir = os.fspath(args.output_dir).rstrip("/")
    if args.limit is not None and args.limit < 1 or args.image_size < 8 or args.batch_size < 1 or args.workers < 0:
        raise UsageError("--limit and --batch_size must be 1 or more, --image_size 8 or more, --workers 0 or more")
    build_id = kept_build_id(output_dir, args.version)
    settings = Settings(output_dir, build_id, args.split, args.limit, args.image_size, args.batch_size, args.workers)
    _check_split(settings)
    names = ["load", "torch", "decode_limit"] + (list(FILE_READERS) if args.files else [])
    results = []
    for name in names:
        print(f"shardsmith: reading {settings.split} with {name} ...", flush=True)
        results.append(measure_in_process(name, settings))
    figures = {"version": build_id, "split": settings.split, "image_size": settings.image_size,
               "batch_size": settings.batch_size, "cpus": os.cpu_count(),
               "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "readers": results,
               "verdict": verdict(results)}
    print(report(figures), flush=True)
    if not args.no_save:
        _save(output_dir, build_id, figures)
    return figures


def _check_split(settings: Settings) -> None:
    from shardsmith.output_folder import open_version

    metadata = open_version(settings.output_dir, settings.build_id).metadata
    if settings.split not in metadata.splits:
        raise UsageError(f"split {settings.split!r} is not in this dataset ({', '.join(metadata.splits)})")
    if not metadata.splits[settings.split].num_examples:
        raise UsageError(f"split {settings.split!r} holds no records: nothing to read")


def _save(output_dir: str, build_id: str, figures: dict) -> None:
    from shardsmith.card import CARD_FILE, card_bytes
    from shardsmith.format.build_record import write_atomically
    from shardsmith.format.naming import READ_CHECK_FILE, join
    from shardsmith.output_folder import build_dir

    folder = build_dir(output_dir, build_id)
    with folder_lock(output_dir, "readcheck"):
        kept_build_id(output_dir, build_id)  # still kept: retention waits for the lock
        write_atomically(join(folder, READ_CHECK_FILE), (json.dumps(figures, indent=2) + "\n").encode())
        write_atomically(join(folder, CARD_FILE), card_bytes(output_dir, build_id))
    print(f"shardsmith: saved in {join(folder, READ_CHECK_FILE)} and shown on {join(folder, CARD_FILE)}", flush=True)
