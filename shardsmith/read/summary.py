"""The one report of a dataset a person reads, rendered from metadata.json's schema (Metadata): the build's
console summary (`shardsmith build`, pipeline/cli.py prints it) and `shardsmith inspect`'s report
(shardsmith/read/inspect.py prints it, with its PNGs). Both take counts, labels, duplicates and near duplicates
from the same Metadata, and errors from the build's errors.jsonl (its name from shardsmith/format/naming.py).

The build's summary: counts per split and label, errors by reason (most common first, an example each, a hint),
duplicates, near duplicates, speed, where the dataset is. `inspect`'s report, from metadata.json and errors.jsonl
alone (no record is read): per split the examples, bytes, shard count and smallest/largest shard; the label
histogram; how close each shard's label mix is to its split's (the largest absolute difference of a label's
share, in percentage points, and in records against the exact proportional count); errors by reason with an
example of each; duplicates; near duplicates.
"""

from __future__ import annotations

import io
import json
from collections import Counter
from dataclasses import dataclass

from shardsmith.format.build_folder import build_dir, dataset_dir
from shardsmith.format.metadata_schema import Metadata, SplitEntry
from shardsmith.format.naming import ERRORS_FILE, join

MAX_LABELS_SHOWN = 10  # per split in the build's summary; a dataset may have thousands


def _total_bytes(metadata: Metadata) -> int:
    return sum(info.num_bytes for info in metadata.splits.values())


# The build's summary ----------------------------------------------------------------------------------------


def build_summary(metadata: Metadata, output_dir: str, build_id: str, elapsed_s: float) -> str:
    """The final report of a build: counts per split and label, errors by reason, duplicates, speed, where it
    is."""
    files_dir = build_dir(output_dir, build_id)
    lines = [f"shardsmith: built {metadata.name!r} in {elapsed_s:.1f} s"]
    for split, info in metadata.splits.items():
        counts = label_counts_text(info.label_counts)
        lines.append(f"  {split:<10} {info.num_examples:>8} examples in {info.num_shards} shard(s), "
                     f"{info.num_bytes / 1e6:.1f} MB  ({counts})")
    if metadata.error_count:
        lines.append(f"  errors     {metadata.error_count:>8} rows, listed in {join(files_dir, ERRORS_FILE)}:")
        lines += _error_reasons(metadata, files_dir)
    else:
        lines.append("  errors            0")
    duplicates = metadata.duplicates
    if duplicates is not None and duplicates.num_groups:
        across = duplicates.num_groups_across_splits
        pairs = ", ".join(f"{k} {n}" for k, n in duplicates.split_pairs.items())
        lines.append(f"  duplicates {duplicates.num_groups:>8} images occur more than once "
                     f"({duplicates.num_extra_copies} extra copies)"
                     + (f"; WARNING: {across} across splits ({pairs}), which leaks test data into training"
                        if across else "") + "; see metadata.json")
    lines += near_duplicates_summary(metadata, files_dir)
    rate = metadata.num_examples / elapsed_s if elapsed_s else 0.0
    total_bytes = _total_bytes(metadata)
    lines.append(f"  speed      {rate:.0f} images/s, {total_bytes / 1e6 / elapsed_s if elapsed_s else 0:.1f} MB/s "
                 "(whole run, start-up included)")
    lines.append(f"  output     {output_dir}  (metadata.json; this build's files, labels.txt among them, in "
                 f"builds/{build_id}; {len(metadata.labels)} labels)")
    return "\n".join(lines)


def label_counts_text(label_counts: dict[str, int]) -> str:
    """`cat 12, dog 9`: the first MAX_LABELS_SHOWN labels and how many more, so that the line stays short."""
    shown = ", ".join(f"{label if len(label) <= 40 else label[:39] + '…'} {n}"
                      for label, n in list(label_counts.items())[:MAX_LABELS_SHOWN])
    more = len(label_counts) - MAX_LABELS_SHOWN
    return shown + (f", ... and {more:,} more" if more > 0 else "")


def _error_reasons(metadata: Metadata, files_dir: str) -> list[str]:
    """The reasons rows failed, most common first, with one example each (from the build's errors.jsonl); only
    the counts if that file cannot be read."""
    from shardsmith.core.failures import error_rows, reason_table
    from shardsmith.storage import read_bytes

    try:
        return reason_table(error_rows(read_bytes(join(files_dir, ERRORS_FILE)) or b""))
    except (OSError, ValueError):
        return [f"    {n:>6}  {reason}" for reason, n in (metadata.errors_by_reason or {}).items()]


def near_duplicates_summary(metadata: Metadata, files_dir: str) -> list[str]:
    """The build summary's near-duplicate line (--near_duplicates report|drop), naming cross-split leaks first."""
    near = metadata.near_duplicates
    if near is None:
        return []
    pairs = near.split_pairs_text()
    line = (f"  near dups  {near.num_pairs:>8} pairs within distance {near.max_distance}"
            + (f" ({pairs})" if pairs else ""))
    if near.num_low_detail_pairs:
        line += f"; {near.num_low_detail_pairs} between low-detail images (review those first)"
    if near.num_label_mismatches:
        line += f"; {near.num_label_mismatches} with different labels (likely label errors)"
    if near.num_dropped:
        line += f"; {near.num_dropped} validation/test copies dropped"
    if near.num_identical_groups == 1:
        line += f"; 1 group of {near.num_identical_images} identical-looking images (compared once)"
    elif near.num_identical_groups:
        line += (f"; {near.num_identical_groups} groups of identical-looking images, {near.num_identical_images} "
                 f"in all, the largest {near.identical_groups[0]['size']} (each compared once)")
    if near.num_capped_buckets:
        line += (f"; {near.num_capped_buckets} hash buckets over {near.max_bucket_members} images or "
                 f"{near.max_bucket_candidates} candidate pairs not compared (e.g. near-blank images)")
    return [line + f"; see {files_dir}/{near.file}"]


# inspect's report -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MixDeviation:
    split: str
    max_share_pp: float  # largest |label share in shard - label share in split|, percentage points
    max_records: float  # largest |count in shard - shard size * split share|, records
    shard: int
    label: str
    mean_share_pp: float


def mix_deviation(split: str, info: SplitEntry) -> MixDeviation | None:
    total = info.num_examples
    if not total or not info.shards:
        return None
    split_counts = info.label_counts
    worst = (-1.0, 0.0, 0, "")
    deviations = []
    for index, shard in enumerate(info.shards):
        size = shard.num_examples
        for label, count in split_counts.items():
            share = count / total
            got = shard.label_counts.get(label, 0)
            pp = abs((got / size if size else 0.0) - share) * 100
            deviations.append(pp)
            if pp > worst[0]:
                worst = (pp, abs(got - size * share), index, label)
    return MixDeviation(split, worst[0], worst[1], worst[2], worst[3], sum(deviations) / len(deviations))


def error_summary(files_dir: str) -> tuple[Counter, dict[str, str]] | None:
    """(count by "stage: reason", an example URI or source:line per reason) from a build's errors.jsonl,
    streamed; None without one."""
    from shardsmith import storage

    path = join(files_dir, ERRORS_FILE)
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


def inspect_report(output_dir: str, metadata: Metadata) -> str:
    """`shardsmith inspect`'s report of the dataset in `output_dir`, whose metadata.json is `metadata`."""
    splits = metadata.splits
    labels = metadata.labels
    total_shards = sum(len(info.shards) for info in splits.values())
    lines = [f"shardsmith inspect {output_dir}",
             f"dataset {metadata.name!r}: {metadata.num_examples} examples, {len(labels)} labels, "
             f"{total_shards} shards, {_total_bytes(metadata) / 1e6:.1f} MB, compression {metadata.compression}, "
             f"seed {metadata.seed}", ""]
    lines.append(f"{'split':<12}{'examples':>10}{'MB':>10}{'shards':>8}{'records/shard':>16}{'MB/shard':>16}")
    for split, info in splits.items():
        sizes = [s.num_examples for s in info.shards] or [0]
        mbs = [s.num_bytes / 1e6 for s in info.shards] or [0.0]
        lines.append(f"{split:<12}{info.num_examples:>10}{info.num_bytes / 1e6:>10.2f}{len(info.shards):>8}"
                     f"{f'{min(sizes)}-{max(sizes)}':>16}{f'{min(mbs):.2f}-{max(mbs):.2f}':>16}")
    lines += ["", "labels (examples per split)"]
    lines.append(f"  {'id':>4}  {'label':<20}" + "".join(f"{split:>12}" for split in splits) + f"{'total':>9}  share")
    totals = {label: sum(info.label_counts.get(label, 0) for info in splits.values()) for label in labels}
    grand = sum(totals.values()) or 1
    for index, label in enumerate(labels):
        counts = "".join(f"{info.label_counts.get(label, 0):>12}" for info in splits.values())
        share = totals[label] / grand
        lines.append(f"  {index:>4}  {label[:20]:<20}{counts}{totals[label]:>9}  {share:6.1%} {_bar(share)}")
    lines += ["", "shard label mix vs its split (largest |label share in shard - share in split|)"]
    for split, info in splits.items():
        dev = mix_deviation(split, info)
        if dev is None:
            lines.append(f"  {split:<12}(empty)")
            continue
        lines.append(f"  {split:<12}max {dev.max_share_pp:5.2f} pp (shard {dev.shard}, {dev.label}), "
                     f"mean {dev.mean_share_pp:.2f} pp; at most {dev.max_records:.2f} records from the exact "
                     "proportional count")
    lines.append("")
    lines += _inspect_errors(metadata, dataset_dir(output_dir, metadata))
    duplicates = metadata.duplicates
    if duplicates is not None and duplicates.num_groups:
        lines.append(f"duplicates: {duplicates.num_groups} images occur more than once "
                     f"({duplicates.num_extra_copies} extra copies, "
                     f"{duplicates.num_groups_across_splits} groups across splits)")
    else:
        lines.append("duplicates: none")
    near = metadata.near_duplicates
    if near is not None:
        lines.append(f"near duplicates: {near.num_pairs} pairs within distance {near.max_distance} "
                     f"({near.split_pairs_text() or 'none'}); {near.num_low_detail_pairs} between low-detail images, "
                     f"{near.num_label_mismatches} with different labels, {near.num_dropped} dropped")
    return "\n".join(lines)


def _inspect_errors(metadata: Metadata, files_dir: str) -> list[str]:
    errors = error_summary(files_dir)
    if errors is None:
        return [f"errors: no {ERRORS_FILE}"]
    counts, examples = errors
    total = sum(counts.values())
    num_input = metadata.num_input_rows or 0
    share = f" ({total / num_input:.1%} of {num_input} input rows)" if num_input else ""
    lines = [f"errors: {total} rows{share}" + (f", by reason ({ERRORS_FILE}):" if total else "")]
    for reason, n in counts.most_common():
        lines.append(f"  {n:>6}  {reason}  e.g. {examples.get(reason, '')}")
    return lines
