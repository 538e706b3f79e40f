"""`shardsmith inspect D`: a report a person reads, and optional PNG plots.

The report comes from metadata.json and errors.jsonl alone (no record is read): per split the examples,
bytes, shard count and smallest/largest shard; the label histogram; how close each shard's label mix is to its
split's (the largest absolute difference of a label's share, in percentage points, and in records against the
exact proportional count); duplicates; errors by reason with an example of each.

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

import io
import json
import os
from collections import Counter
from dataclasses import dataclass

from shardsmith.errors import UsageError
from shardsmith.format.build_folder import dataset_dir
from shardsmith.format.metadata import NearDuplicatesEntry

# Report ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MixDeviation:
    split: str
    max_share_pp: float  # largest |label share in shard - label share in split|, percentage points
    max_records: float  # largest |count in shard - shard size * split share|, records
    shard: int
    label: str
    mean_share_pp: float


def mix_deviation(split: str, info: dict) -> MixDeviation | None:
    total = info["num_examples"]
    if not total or not info["shards"]:
        return None
    split_counts = info["label_counts"]
    worst = (-1.0, 0.0, 0, "")
    deviations = []
    for index, shard in enumerate(info["shards"]):
        size = shard["num_examples"]
        for label, count in split_counts.items():
            share = count / total
            got = shard["label_counts"].get(label, 0)
            pp = abs((got / size if size else 0.0) - share) * 100
            deviations.append(pp)
            if pp > worst[0]:
                worst = (pp, abs(got - size * share), index, label)
    return MixDeviation(split, worst[0], worst[1], worst[2], worst[3], sum(deviations) / len(deviations))


def error_summary(output_dir: str) -> tuple[Counter, dict[str, str]] | None:
    """(count by "stage: reason", an example URI or source:line per reason) from errors.jsonl, streamed."""
    from shardsmith import storage

    path = f"{output_dir}/errors.jsonl"
    if not storage.exists(path):
        return None
    counts: Counter = Counter()
    examples: dict[str, str] = {}
    with storage.open_read(path, buffered=True) as raw:
        for line in io.TextIOWrapper(raw, encoding="utf-8", errors="replace"):
            if not line.strip():
                continue
            try:
                error = json.loads(line)
            except json.JSONDecodeError:
                counts["(unreadable errors.jsonl line)"] += 1
                continue
            reason = f"{error.get('stage', '?')}: {error.get('reason', '?')}"
            counts[reason] += 1
            examples.setdefault(reason, error.get("uri") or f"{error.get('source', '?')}:{error.get('line', '?')}")
    return counts, examples


def _bar(fraction: float, width: int = 20) -> str:
    return "#" * max(1 if fraction > 0 else 0, round(fraction * width))


def report(output_dir: str, metadata: dict) -> str:
    lines = []
    splits = metadata["splits"]
    labels = metadata["labels"]
    total_bytes = sum(info["num_bytes"] for info in splits.values())
    total_shards = sum(len(info["shards"]) for info in splits.values())
    lines.append(f"shardsmith inspect {output_dir}")
    lines.append(f"dataset {metadata['name']!r}: {metadata['num_examples']} examples, {len(labels)} labels, "
                 f"{total_shards} shards, {total_bytes / 1e6:.1f} MB, compression {metadata.get('compression')}, "
                 f"seed {metadata.get('seed')}")
    lines.append("")
    lines.append(f"{'split':<12}{'examples':>10}{'MB':>10}{'shards':>8}{'records/shard':>16}{'MB/shard':>16}")
    for split, info in splits.items():
        sizes = [s["num_examples"] for s in info["shards"]] or [0]
        mbs = [s["num_bytes"] / 1e6 for s in info["shards"]] or [0.0]
        lines.append(f"{split:<12}{info['num_examples']:>10}{info['num_bytes'] / 1e6:>10.2f}{len(info['shards']):>8}"
                     f"{f'{min(sizes)}-{max(sizes)}':>16}{f'{min(mbs):.2f}-{max(mbs):.2f}':>16}")
    lines.append("")
    lines.append("labels (examples per split)")
    header = f"  {'id':>4}  {'label':<20}" + "".join(f"{split:>12}" for split in splits) + f"{'total':>9}  share"
    lines.append(header)
    totals = {label: sum(info["label_counts"].get(label, 0) for info in splits.values()) for label in labels}
    grand = sum(totals.values()) or 1
    for index, label in enumerate(labels):
        counts = "".join(f"{info['label_counts'].get(label, 0):>12}" for info in splits.values())
        share = totals[label] / grand
        lines.append(f"  {index:>4}  {label[:20]:<20}{counts}{totals[label]:>9}  {share:6.1%} {_bar(share)}")
    lines.append("")
    lines.append("shard label mix vs its split (largest |label share in shard - share in split|)")
    for split, info in splits.items():
        dev = mix_deviation(split, info)
        if dev is None:
            lines.append(f"  {split:<12}(empty)")
            continue
        lines.append(f"  {split:<12}max {dev.max_share_pp:5.2f} pp (shard {dev.shard}, {dev.label}), "
                     f"mean {dev.mean_share_pp:.2f} pp; at most {dev.max_records:.2f} records from the exact "
                     "proportional count")
    lines.append("")
    errors = error_summary(dataset_dir(output_dir, metadata))
    num_input = metadata.get("num_input_rows", 0)
    if errors is None:
        lines.append("errors: no errors.jsonl")
    else:
        counts, examples = errors
        total = sum(counts.values())
        share = f" ({total / num_input:.1%} of {num_input} input rows)" if num_input else ""
        lines.append(f"errors: {total} rows{share}" + (", by reason (errors.jsonl):" if total else ""))
        for reason, n in counts.most_common():
            lines.append(f"  {n:>6}  {reason}  e.g. {examples.get(reason, '')}")
    duplicates = metadata.get("duplicates") or {}
    if duplicates.get("num_groups"):
        lines.append(f"duplicates: {duplicates['num_groups']} images occur more than once "
                     f"({duplicates.get('num_extra_copies')} extra copies, "
                     f"{duplicates.get('num_groups_across_splits', 0)} groups across splits)")
    else:
        lines.append("duplicates: none")
    near = NearDuplicatesEntry.of(metadata)
    if near is not None:
        lines.append(f"near duplicates: {near.num_pairs} pairs within distance {near.max_distance} "
                     f"({near.split_pairs_text() or 'none'}); {near.num_low_detail_pairs} between low-detail images, "
                     f"{near.num_label_mismatches} with different labels, {near.num_dropped} dropped")
    return "\n".join(lines)


# Reading records (no TensorFlow) ----------------------------------------------------------------------------


def add_arguments(parser) -> None:
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


def run(args) -> str:
    from shardsmith.read.plots import contact_sheet, heatmap, near_duplicate_pairs, shuffle_plot
    from shardsmith.read.verify import load_metadata

    output_dir = args.output_dir.rstrip("/")
    metadata = load_metadata(output_dir)
    if (args.contact_sheet or args.shuffle_plot) and args.split not in metadata["splits"]:
        raise UsageError(f"split {args.split!r} is not in this dataset ({', '.join(metadata['splits'])})")
    if args.per_label < 1 or args.buffer < 0 or args.cycle_length < 1:
        raise UsageError("--per_label and --cycle_length must be 1 or more, --buffer 0 or more")
    if args.near_duplicates and NearDuplicatesEntry.of(metadata) is None:
        raise UsageError("this dataset was built without --near_duplicates report or drop: no pairs to draw")
    for target in (args.contact_sheet, args.heatmap, args.shuffle_plot, args.near_duplicates):
        if target and not os.path.isdir(os.path.dirname(os.path.abspath(target))):
            raise UsageError(f"cannot write {target}: its folder does not exist")
    text = report(output_dir, metadata)
    print(text, flush=True)
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
