"""The one report of a dataset a person reads, rendered from metadata.json's schema (Metadata): the build's
console summary (`shardsmith build`, pipeline/cli.py prints it) and `shardsmith inspect`'s report
(pipeline/commands/inspect.py prints it, with its PNGs).

Both show the same sections, rendered once here (`shared_sections`), line for line alike for one build: errors
(how many rows failed, their share of the input rows, every reason most common first with its first row as an
example and a hint when one reason dominates, streamed from the build's errors.jsonl), duplicates, near
duplicates. Around them each report adds what only it knows: the build its counts per split and label, speed
and where the dataset is; `inspect`, from metadata.json and errors.jsonl alone (no record is read), per split the
examples, bytes, shard count and smallest/largest shard, the label histogram, and how close each shard's label
mix is to its split's (the largest absolute difference of a label's share, in percentage points, and in records
against the exact proportional count). File names come from shardsmith/format/naming.py.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardsmith import storage
from shardsmith.format.metadata_schema import Metadata, SplitEntry
from shardsmith.format.naming import BUILDS_DIR, CARD_FILE, ERRORS_FILE, LABELS_FILE, METADATA_FILE, RETIRED_FILE, join
from shardsmith.output_folder import build_dir, dataset_dir, retention_text, retired_by
from shardsmith.read.load import DEFAULT_SHUFFLE_BUFFER

if TYPE_CHECKING:
    from shardsmith.rows.failures import ReasonTally

MAX_LABELS_SHOWN = 10  # per split in the build's summary; a dataset may have thousands


def _total_bytes(metadata: Metadata) -> int:
    return sum(info.num_bytes for info in metadata.splits.values())


def _row(key: str, text: str) -> str:
    """A line of the two reports' keyed rows: `  errors     TEXT`."""
    return f"  {key:<10} {text}"


# The sections both reports show -----------------------------------------------------------------------------


def shared_sections(metadata: Metadata, files_dir: str) -> list[str]:
    """The lines the build's summary and `inspect` both show, the same in each: errors by reason, duplicates, near
    duplicates of the build whose files are in `files_dir`."""
    return (look_alike_section(metadata) + errors_section(metadata, files_dir) + duplicates_section(metadata)
            + near_duplicates_section(metadata, files_dir))


def look_alike_section(metadata: Metadata) -> list[str]:
    """A warning per group of labels that look alike but are different classes (shardsmith/manifest/
    look_alike_labels.py), each label written as Python's ascii() writes it so the difference shows."""
    lines = []
    for group in metadata.look_alike_labels or ():
        labels = " and ".join(f"{ascii(label)} ({n})" for label, n in zip(group.labels, group.records, strict=True))
        if group.kind == "unicode":
            why = "print alike but differ in Unicode form: --normalize_labels nfc makes them one label"
        else:
            why = "differ only in case, where the other labels are all one case: one label written two ways?"
        lines.append(_row("warning", f"labels {labels} {why}"))
    return lines


def errors_section(metadata: Metadata, files_dir: str) -> list[str]:
    """How many rows failed (and their share of the input rows), then every reason, most common first, with its
    first row as an example (shardsmith/rows/failures.py's reason_table), streamed from the build's errors.jsonl;
    metadata.json's counts by reason, and why, when that file is missing or cannot be read."""
    from shardsmith.rows.failures import reason_table

    path = join(files_dir, ERRORS_FILE)
    try:
        tally = _errors_file_tally(path)
        problem = "is missing" if tally is None and metadata.error_count else ""
    except (OSError, ValueError) as e:  # undecodable bytes, a line that is not JSON or not an error row
        tally, problem = None, f"cannot be read ({str(e)[:100]})"
    total = metadata.error_count if tally is None else tally.total
    num_input = metadata.num_input_rows or 0
    share = f" ({total / num_input:.1%} of {num_input} input rows)" if num_input else ""
    header = _row("errors", f"{total:>8} rows{share}")
    if problem:
        return [f"{header}; {path} {problem}, by reason from {METADATA_FILE}:"] + [
            f"    {n:>6}  {reason}" for reason, n in (metadata.errors_by_reason or {}).items()]
    if tally is None or not total:
        return [header]
    return [f"{header}, listed in {path}:", *reason_table(tally)]


def _errors_file_tally(path: str) -> ReasonTally | None:
    """errors.jsonl's rows counted per reason, read a line at a time; None when there is no such file. Raises
    OSError or ValueError when it cannot be read or holds a line that is not an error row."""
    from shardsmith import storage
    from shardsmith.rows.failures import ReasonTally, error_row

    if not storage.exists(path):
        return None
    tally = ReasonTally()
    with storage.open_read(path, buffered=True) as raw:
        for line in io.TextIOWrapper(raw, encoding="utf-8", newline="\n"):
            if line.strip():
                tally.add(error_row(json.loads(line)))
    return tally


def duplicates_section(metadata: Metadata) -> list[str]:
    """How many images occur more than once, warning of groups across splits (none before builds counted them)."""
    duplicates = metadata.duplicates
    if duplicates is None:
        return []
    text = f"{duplicates.num_groups:>8} images occur more than once"
    if not duplicates.num_groups:
        return [_row("duplicates", text)]
    across = duplicates.num_groups_across_splits
    pairs = ", ".join(f"{k} {n}" for k, n in duplicates.split_pairs.items())
    return [_row("duplicates", f"{text} ({duplicates.num_extra_copies} extra copies)"
                 + (f"; WARNING: {across} across splits ({pairs}), which leaks test data into training"
                    if across else "") + f"; see {METADATA_FILE}")]


def near_duplicates_section(metadata: Metadata, files_dir: str) -> list[str]:
    """The near-duplicate pairs found (--near_duplicates report|drop), naming cross-split leaks first."""
    near = metadata.near_duplicates
    if near is None:
        return []
    pairs = near.split_pairs_text()
    line = _row("near dups", f"{near.num_pairs:>8} pairs within distance {near.max_distance}"
                + (f" ({pairs})" if pairs else ""))
    if near.num_low_detail_pairs:
        line += f"; {near.num_low_detail_pairs} between low-detail images (review those first)"
    if near.num_label_mismatches:
        line += f"; {near.num_label_mismatches} with different labels (likely label errors)"
    night = near.published_version is not None
    if night:
        line += (f"; new images compared with {near.num_published_compared} records of version "
                 f"{near.published_version}, {near.num_published_pairs} pairs with them")
        if near.num_published_not_compared:
            line += (f"; {near.num_published_not_compared} of its records not compared (row lists without "
                     f"signatures: build with --near_duplicates to sign them)")
    if near.num_dropped:
        line += f"; {near.num_dropped} {'new' if night else 'validation/test'} copies dropped"
    if near.num_identical_groups == 1:
        line += f"; 1 group of {near.num_identical_images} identical-looking images (compared once)"
    elif near.num_identical_groups:
        line += (f"; {near.num_identical_groups} groups of identical-looking images, {near.num_identical_images} "
                 f"in all, the largest {near.identical_groups[0]['size']} (each compared once)")
    if near.num_capped_buckets:
        over = f"{near.max_bucket_members} images"
        if night:
            over = f"{near.max_bucket_members} new images, {near.max_bucket_comparisons} comparisons"
        line += (f"; {near.num_capped_buckets} hash buckets over {over} or "
                 f"{near.max_bucket_candidates} candidate pairs not compared (e.g. near-blank images)")
    return [line + f"; see {join(files_dir, near.file)}"]


# The build's summary ----------------------------------------------------------------------------------------


def build_summary(metadata: Metadata, output_dir: str, build_id: str, elapsed_s: float) -> str:
    """The final report of a build: counts per split and label, the shared sections (errors by reason,
    duplicates, near duplicates), speed, where it is."""
    lines = [f"shardsmith: built {metadata.name!r} in {elapsed_s:.1f} s"]
    for split, info in metadata.splits.items():
        lines.append(_row(split, f"{info.num_examples:>8} examples in {info.num_shards} shard(s), "
                                 f"{info.num_bytes / 1e6:.1f} MB  ({label_counts_text(info.label_counts)})"))
    hint = one_shard_hint(metadata)
    if hint:
        lines.append(_row("hint", hint))
    change = version_line(metadata, build_id)
    if change:
        lines.append(_row("version", change))
    lines += shared_sections(metadata, build_dir(output_dir, build_id))
    rate = metadata.num_examples / elapsed_s if elapsed_s else 0.0
    total_bytes = _total_bytes(metadata)
    lines.append(_row("speed", f"{rate:.0f} images/s, {total_bytes / 1e6 / elapsed_s if elapsed_s else 0:.1f} MB/s "
                               "(whole run, start-up included)"))
    retired = retired_text(output_dir, build_id)
    if retired:
        lines.append(_row("retired", retired))
    lines.append(_row("output", f"{output_dir}  ({METADATA_FILE}; this build's files, {LABELS_FILE} among them, in "
                                f"{BUILDS_DIR}/{build_id}; {len(metadata.labels)} labels"
                                f"{labels_without_records_text(metadata)})"))
    card = card_line(output_dir, build_id)
    if card:
        lines.append(_row("card", card))
    return "\n".join(lines)


def card_line(output_dir: str, build_id: str) -> str | None:
    """Where the version's dataset card is, as a link a terminal opens (None when the build wrote none)."""
    path = join(build_dir(output_dir, build_id), CARD_FILE)
    if not storage.exists(path):
        return None
    where = path if storage.is_remote(path) else "file://" + os.path.abspath(path)
    return f"{where}  (the dataset card: open it in a browser)"


def one_shard_hint(metadata: Metadata) -> str | None:
    """A hint when the training split is one shard of more records than load()'s shuffle buffer holds: a reader
    then has no files to shuffle or interleave, and mixes only within the buffer, so an epoch comes out in nearly
    the order the shard holds (labels dealt round-robin, but the same order every epoch)."""
    train = metadata.splits.get("train")
    if train is None or train.num_shards != 1 or (train.num_examples or 0) <= DEFAULT_SHUFFLE_BUFFER:
        return None
    return (f"train is 1 shard of {train.num_examples:,} records: readers mix only within their shuffle buffer "
            f"({DEFAULT_SHUFFLE_BUFFER:,} records in load()); --num_shards train=16 or a smaller --target_shard_mb "
            "gives them shards to shuffle and interleave")


def retired_text(output_dir: str, build_id: str) -> str | None:
    """`version A, version B (--keep_builds 2, --keep_days 7; retired.json)`: the versions this build's retention
    removed, or None. A job still reading one fails on a missing file: `shardsmith tag` keeps a version."""
    retired = retired_by(output_dir, build_id)
    if not retired:
        return None
    return (", ".join(f"version {entry.version}" for entry in retired)
            + f" ({retention_text(retired[0])}; {RETIRED_FILE}; `shardsmith tag` keeps a version from retention)")


def labels_without_records_text(metadata: Metadata) -> str:
    """`, 1 without records (cicada)`: the labels that have an id but no record in any split, or "". Ids are given
    before the shard writer decodes an image, so a label whose every image fails to decode keeps its id; so does
    a --label_file or --incremental label without rows."""
    empty = [label for label in metadata.labels
             if not any(info.label_counts.get(label) for info in metadata.splits.values())]
    if not empty:
        return ""
    more = len(empty) - MAX_LABELS_SHOWN
    return (f", {len(empty)} without records ({', '.join(empty[:MAX_LABELS_SHOWN])}"
            + (f", ... and {more:,} more" if more > 0 else "") + ")")


def version_line(metadata: Metadata, build_id: str | None) -> str | None:
    """What an --incremental version changed, in one line (None for a full build or a first one)."""
    change = metadata.incremental
    if change is None or change.previous is None:
        return None
    which = build_id or metadata.build_id or "this version"
    added = ""
    if change.num_added_records is not None:
        again = f", {change.num_failed_again:,} of them failed in {change.previous} too" if change.num_failed_again \
            else ""
        added = f" ({change.num_added_records:,} new records, {metadata.error_count:,} errors{again})"
    how = "not read; the manifest only had rows appended: they alone were parsed" if change.appended else "not read"
    return (f"{which}, added to {change.previous}: rows carried over {change.num_carried_rows:,} ({how}), added "
            f"{change.num_added_rows:,}{added}, removed {change.num_removed_rows:,} "
            f"({change.num_rewritten_shards} shard(s) rewritten without them); images read "
            f"{change.num_images_read:,}; {change.generations} generation(s)")


def label_counts_text(label_counts: dict[str, int]) -> str:
    """`cat 12, dog 9`: the first MAX_LABELS_SHOWN labels and how many more, so that the line stays short."""
    shown = ", ".join(f"{label if len(label) <= 40 else label[:39] + '…'} {n}"
                      for label, n in list(label_counts.items())[:MAX_LABELS_SHOWN])
    more = len(label_counts) - MAX_LABELS_SHOWN
    return shown + (f", ... and {more:,} more" if more > 0 else "")


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
             f"seed {metadata.seed}"]
    change = version_line(metadata, None)
    if change:
        lines.append(f"version {change}")
    lines.append("")
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
    lines += ["", "errors and duplicates"]
    lines += shared_sections(metadata, dataset_dir(output_dir, metadata))
    return "\n".join(lines)
