"""`shardsmith inspect D`: a report a person reads, and optional PNG plots.

The report comes from metadata.json and errors.jsonl alone (no record is read), rendered by
shardsmith/read/summary.py, which also renders the build's console summary.

The plots read records (streamed, a shard at a time, parsed without TensorFlow):
- `--contact_sheet PATH`: the first N images of each label in shard order, titled with the label.
- `--heatmap PATH`: records per (shard, label), every split.
- `--shuffle_plot PATH`: label id against read position for a reader with `--buffer` records of shuffle buffer
  (the interleave and shuffle of `shardsmith.load`, run by tf.data), for this dataset's shards, beside the same
  reader over the same records in manifest order cut into as many files: what a converter that writes records
  in manifest order produces. The manifest order comes from re-reading the manifests named in metadata.json;
  when they cannot be read, label-sorted order stands in and the panel's title says so.
Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import argparse
import os

from pipeline.commands.shared import add_verbose_argument, add_version_argument
from shardsmith.errors import UsageError
from shardsmith.printable import shown
from shardsmith.read.summary import inspect_report
from shardsmith.read.version_files import version_folder


def register_subparser(parsers: argparse._SubParsersAction) -> None:
    """Adds `shardsmith inspect` and its arguments."""
    parser = parsers.add_parser(
        "inspect", help="report on a dataset: splits, labels, shard balance, errors; optional PNG plots",
        description="A readable report of a finished dataset; --contact_sheet, --heatmap and --shuffle_plot "
                    "also write PNG images.")
    parser.add_argument("output_dir", help="a finished dataset folder (local or gs://)")
    parser.add_argument("--split", default="train", help="split for the contact sheet and shuffle plot")
    parser.add_argument("--contact_sheet", metavar="PATH", help="write a PNG of sample images per label")
    parser.add_argument("--per_label", type=int, default=6, metavar="N", help="images per label (default 6)")
    parser.add_argument("--heatmap", metavar="PATH", help="write a PNG of records per shard and label")
    parser.add_argument("--shuffle_plot", metavar="PATH",
                        help="write a PNG of label against read order, this dataset next to manifest order")
    parser.add_argument("--near_duplicates", metavar="PATH",
                        help="write a PNG of the closest near-duplicate pairs side by side with their distance "
                             "(a build made with --near_duplicates report or drop)")
    parser.add_argument("--buffer", type=int, default=1024, help="shuffle buffer for --shuffle_plot (default 1024)")
    parser.add_argument("--cycle_length", type=int, default=4,
                        help="files the --shuffle_plot reader interleaves at once (default 4)")
    add_version_argument(parser)
    add_verbose_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> str:
    """`shardsmith inspect`: prints the report and writes the PNGs asked for."""
    from shardsmith.read.dataset_checks import load_metadata
    from shardsmith.read.plots import contact_sheet, heatmap, near_duplicate_pairs, shuffle_plot

    output_dir = version_folder(args.output_dir, args.version)
    metadata = load_metadata(output_dir)
    if (args.contact_sheet or args.shuffle_plot) and args.split not in metadata.splits:
        raise UsageError(f"split {args.split!r} is not in this dataset ({', '.join(metadata.splits)})")
    if args.per_label < 1 or args.buffer < 0 or args.cycle_length < 1:
        raise UsageError("--per_label and --cycle_length must be 1 or more, --buffer 0 or more")
    if args.near_duplicates and metadata.near_duplicates is None:
        raise UsageError("this dataset was built without --near_duplicates report or drop: no pairs to draw")
    for target in (args.contact_sheet, args.heatmap, args.shuffle_plot, args.near_duplicates):
        if target and not os.path.isdir(os.path.dirname(os.path.abspath(target))):
            raise UsageError(f"cannot write {target}: its folder does not exist")
    text = inspect_report(output_dir, metadata)
    print(shown(text, keep_newlines=True), flush=True)
    written = []
    if args.heatmap:
        written.append(f"heatmap        {heatmap(metadata, args.heatmap)}")
    if args.contact_sheet:
        written.append(f"contact sheet  "
                       f"{contact_sheet(output_dir, metadata, args.contact_sheet, args.split, args.per_label)}")
    if args.near_duplicates:
        drawn = near_duplicate_pairs(output_dir, metadata, args.near_duplicates)
        written.append(f"near duplicates {args.near_duplicates}  ({drawn} closest pairs)")
    if args.shuffle_plot:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        figures = shuffle_plot(output_dir, metadata, args.shuffle_plot, args.split, args.buffer, args.cycle_length)
        written.append(f"shuffle plot   {args.shuffle_plot}  (distinct labels per batch of 32: this dataset "
                       f"{figures['ours']:.2f}, {figures['naive_order']} {figures['naive']:.2f}, "
                       f"ideal {figures['ideal']:.2f})")
    if written:
        print("\nwrote:\n" + "\n".join(f"  {w}" for w in written), flush=True)
    return text
