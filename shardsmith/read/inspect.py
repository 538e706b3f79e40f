"""`shardsmith inspect D`: a report a person reads, and optional PNG plots.

The report comes from metadata.json and errors.jsonl alone (no record is read): per split the examples,
bytes, shard count and smallest/largest shard; the label histogram; how close each shard's label mix is to its
split's (the largest absolute difference of a label's share, in percentage points, and in records against the
exact proportional count); duplicates; errors by reason with an example of each.

The plots read records (streamed, a shard at a time, parsed without TensorFlow):
- `--contact_sheet PATH`: the first N images of each label in shard order, titled with the label.
- `--heatmap PATH`: records per (shard, label), every split.
- `--shuffle_plot PATH`: label id against read position for a reader with `--buffer` records of shuffle buffer
  (the interleave and shuffle of `pipeline.load`, run by tf.data), for this dataset's shards, beside the same
  reader over the same records in manifest order cut into as many files: what a converter that writes records
  in manifest order produces. The manifest order comes from re-reading the manifests named in metadata.json;
  when they cannot be read, label-sorted order stands in and the panel's title says so.
Plots use matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from shardsmith.core.rows import placing_label_id
from shardsmith.errors import UsageError
from shardsmith.format.build_folder import confined_file_name, dataset_dir
from shardsmith.format.example import BOX_KEYS, MASK

MAX_SHEET_LABELS = 40
MAX_PLOT_POINTS = 50_000


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
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    path = f"{output_dir}/errors.jsonl"
    if not FileSystems.exists(path):
        return None
    counts: Counter = Counter()
    examples: dict[str, str] = {}
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as raw:
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
    return "\n".join(lines)


# Reading records (no TensorFlow) ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Record:
    shard: int
    label: int  # the label the record was placed by (with several labels, the rarest; see transforms/labels.py)
    filename: str
    encoded: bytes = b""
    boxes: tuple[tuple[float, float, float, float, str], ...] = ()  # detection: (xmin, ymin, xmax, ymax, label)
    mask: bytes = b""  # segmentation: the class-id PNG


def placed_label(feature, metadata: dict) -> int:
    """The label id a record was placed by: its only label, or the rarest of several (lowest id on ties)."""
    key = "image/object/class/label" if "image/object/class/label" in feature else "image/class/label"
    return placing_label_id(feature[key].int64_list.value, metadata.get("label_image_counts"))


def split_records(output_dir: str, metadata: dict, split: str, with_images: bool = False) -> Iterator[Record]:
    """Every record of a split in shard order, parsed with shardsmith's own Example class."""
    from shardsmith.format.example import example_class
    from shardsmith.read.verify import shard_records

    example_type = example_class()
    compression = metadata.get("compression", "none")
    for index, shard in enumerate(metadata["splits"][split]["shards"]):
        for data in shard_records(f"{dataset_dir(output_dir, metadata)}/{confined_file_name(shard['file'])}",
                                  compression):
            feature = example_type.FromString(data).features.feature
            filename = feature["image/filename"].bytes_list.value[0].decode("utf-8", "replace")
            if not with_images:
                yield Record(index, placed_label(feature, metadata), filename)
                continue
            yield Record(index, placed_label(feature, metadata), filename, _image_bytes(feature), _boxes(feature),
                         feature[MASK].bytes_list.value[0] if MASK in feature else b"")


def _boxes(feature) -> tuple:
    if "image/object/class/text" not in feature:
        return ()
    texts = [t.decode("utf-8", "replace") for t in feature["image/object/class/text"].bytes_list.value]
    corners = [feature[key].float_list.value for key in BOX_KEYS]
    return tuple(zip(*corners, texts, strict=True))


def _image_bytes(feature) -> bytes:
    """The record's image: its bytes, or (--image_mode path) the file at image/uri; b"" if that is gone."""
    if "image/encoded" in feature:
        return feature["image/encoded"].bytes_list.value[0]
    from shardsmith.core.load_images import read_bytes

    try:
        return read_bytes(feature["image/uri"].bytes_list.value[0].decode(), 1 << 62)
    except OSError:
        return b""


BOX_COLOURS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4")


# Plots ----------------------------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def contact_sheet(output_dir: str, metadata: dict, path: str, split: str, per_label: int) -> str:
    """The first `per_label` images of each label (in shard order) in a grid, one row per label."""
    from PIL import Image

    labels = metadata["labels"][:MAX_SHEET_LABELS]
    picked: dict[int, list[Record]] = {i: [] for i in range(len(labels))}
    remaining = {i for i in picked if metadata["splits"][split]["label_counts"].get(labels[i], 0)}
    for record in split_records(output_dir, metadata, split, with_images=True):
        if record.label in remaining:
            picked[record.label].append(record)
            if len(picked[record.label]) >= per_label:
                remaining.discard(record.label)
        if not remaining:
            break
    plt = _pyplot()
    rows, cols = len(labels), per_label
    figure, axes = plt.subplots(rows, cols, figsize=(1.6 * cols, 1.75 * rows), squeeze=False)
    for row, label in enumerate(labels):
        for col in range(cols):
            ax = axes[row][col]
            ax.set_xticks([])
            ax.set_yticks([])
            if col < len(picked[row]):
                record = picked[row][col]
                if record.encoded:
                    with Image.open(io.BytesIO(record.encoded)) as image:
                        ax.imshow(image.convert("RGB"))
                        _draw_annotations(ax, record, image.size)
                else:  # --image_mode path, and the file has gone
                    ax.text(0.5, 0.5, "file missing", ha="center", va="center", fontsize=8)
                ax.set_title(f"{label} ({row})", fontsize=8)
            else:
                ax.axis("off")
    more = f", first {MAX_SHEET_LABELS} of {len(metadata['labels'])} labels" if len(metadata["labels"]) > rows else ""
    figure.suptitle(f"{metadata['name']} {split}: first {per_label} images per label{more}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _draw_annotations(ax, record: Record, size: tuple[int, int]) -> None:
    """Boxes (detection) as outlines with their labels; a class mask (segmentation) as a translucent overlay,
    class 0 left clear."""
    from PIL import Image

    width, height = size
    for index, (xmin, ymin, xmax, ymax, text) in enumerate(record.boxes):
        colour = BOX_COLOURS[index % len(BOX_COLOURS)]
        ax.add_patch(_pyplot().Rectangle((xmin * width, ymin * height), (xmax - xmin) * width,
                                         (ymax - ymin) * height, fill=False, edgecolor=colour, linewidth=1.2))
        ax.text(xmin * width, ymin * height, text, color="white", fontsize=5, va="bottom",
                bbox={"facecolor": colour, "alpha": 0.8, "pad": 0.5, "linewidth": 0})
    if record.mask:
        import numpy as np

        with Image.open(io.BytesIO(record.mask)) as mask:
            ids = np.ma.masked_equal(np.asarray(mask), 0)
        ax.imshow(ids, cmap="tab20", alpha=0.55, interpolation="nearest", vmin=0, vmax=19)


def heatmap(metadata: dict, path: str) -> str:
    """Records per (shard, label) for every shard of every split, from metadata.json."""
    import numpy as np

    labels = metadata["labels"]
    rows, names = [], []
    for split, info in metadata["splits"].items():
        for index, shard in enumerate(info["shards"]):
            rows.append([shard["label_counts"].get(label, 0) for label in labels])
            names.append(f"{split} {index}")
    counts = np.array(rows or [[0] * len(labels)], dtype=float)
    plt = _pyplot()
    width = min(4 + 0.55 * len(labels), 40)
    height = min(2 + 0.28 * len(names), 60)
    figure, ax = plt.subplots(figsize=(width, height))
    shown = ax.imshow(counts, aspect="auto", cmap="viridis")
    figure.colorbar(shown, ax=ax, label="records")
    if len(labels) <= 60:
        ax.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
    if len(names) <= 120:
        ax.set_yticks(range(len(names)), names, fontsize=7)
    if counts.size <= 600:
        middle = counts.max() / 2
        for (r, c), value in np.ndenumerate(counts):
            ax.text(c, r, f"{value:.0f}", ha="center", va="center", fontsize=7,
                    color="black" if value > middle else "white")
    ax.set_xlabel("label")
    ax.set_ylabel("shard (split, index)")
    ax.set_title(f"{metadata['name']}: records per shard and label")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def manifest_order(metadata: dict) -> dict[str, list[tuple[int, int]]] | None:
    """URI as written -> [(source index, line)] from re-reading the manifests named in metadata.json, or None
    when they cannot be read."""
    from shardsmith.core.manifest import ManifestFormat, ManifestParser, resolve_sources
    from shardsmith.core.rows import ManifestRow

    try:
        recorded = metadata.get("options") or {}
        sources = resolve_sources(tuple(recorded["manifests"]))
        # Only the order of the lines matters here: each line read as a plain row, whatever the task.
        plain = dataclasses.replace(ManifestFormat.from_recorded(recorded), task="classification", features=(),
                                    allowed_prefixes=())
        parser = ManifestParser(plain)
        positions: dict[str, list[tuple[int, int]]] = {}
        for source in sources:
            for row in parser.parse(source):
                if isinstance(row, ManifestRow):
                    positions.setdefault(row.uri, []).append((row.source_index, row.line))
    except Exception:
        return None
    return positions or None


def _naive_shards(records: list[Record], num_shards: int, metadata: dict) -> tuple[list[list[int]], str]:
    """The records in manifest order (or label-sorted), cut into num_shards contiguous files."""
    positions = manifest_order(metadata)
    found = 0
    if positions is not None:
        keyed = []
        for record in records:
            taken = positions.get(record.filename)
            if taken:
                keyed.append((taken.pop(0), record.label))
                found += 1
            else:
                keyed.append(((math.inf, 0), record.label))
    if positions is None or found < len(records) / 2:
        ordered = sorted(record.label for record in records)
        how = "label-sorted order (manifest not available)"
    else:
        ordered = [label for _, label in sorted(keyed, key=lambda k: k[0])]
        how = "manifest order"
    size = math.ceil(len(ordered) / num_shards) if ordered else 1
    return [ordered[i:i + size] for i in range(0, len(ordered), size)], how


def read_order(shards: list[list[int]], buffer: int, cycle_length: int, seed: int = 0) -> list[int]:
    """Labels in the order a typical reader sees them: files in name order, `cycle_length` read at once and
    interleaved a record at a time, then a shuffle buffer (`pipeline.load`'s own code, run by tf.data, fixed
    seed, file shuffling off)."""
    import tensorflow as tf

    from shardsmith.read.load import interleave_and_shuffle

    shards = [s for s in shards if s]
    if not shards:
        return []
    dataset = interleave_and_shuffle(
        tf.data.Dataset.from_tensor_slices(tf.ragged.constant(shards, dtype=tf.int64)),
        tf.data.Dataset.from_tensor_slices, len(shards), shuffle_buffer=buffer, cycle_length=cycle_length,
        shuffle_files=False, seed=seed,
    )
    return [int(x) for x in dataset.as_numpy_iterator()]


def distinct_per_batch(order: list[int], batch: int) -> float:
    batches = [order[i:i + batch] for i in range(0, len(order) - batch + 1, batch)]
    return sum(len(set(b)) for b in batches) / len(batches) if batches else float(len(set(order)))


def ideal_distinct_per_batch(counts: list[int], batch: int) -> float:
    """Expected distinct labels in a uniformly random batch (without replacement)."""
    total = sum(counts)
    batch = min(batch, total)
    expected = 0.0
    for count in counts:
        missing = 1.0
        for i in range(batch):
            missing *= max(0.0, (total - count - i) / (total - i))
        expected += 1.0 - missing
    return expected


def shuffle_plot(output_dir: str, metadata: dict, path: str, split: str, buffer: int, cycle_length: int = 4,
                 batch: int = 32) -> dict:
    """Two panels, same reader: this dataset's shards, and the same records in manifest order. Returns the
    distinct-labels-per-batch figures it prints in the titles ("ours", "naive", "ideal") and "naive_order",
    which order stood in for the manifest's."""
    records = list(split_records(output_dir, metadata, split))
    num_shards = len(metadata["splits"][split]["shards"])
    ours: list[list[int]] = [[] for _ in range(num_shards)]
    for record in records:
        ours[record.shard].append(record.label)
    naive, how = _naive_shards(records, num_shards, metadata)
    orders = {"ours": read_order(ours, buffer, cycle_length), "naive": read_order(naive, buffer, cycle_length)}
    counts = list(Counter(r.label for r in records).values())
    figures = {name: distinct_per_batch(order, batch) for name, order in orders.items()}
    figures["ideal"] = ideal_distinct_per_batch(counts, batch) if counts else 0.0
    figures["naive_order"] = how
    plt = _pyplot()
    figure, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    titles = {
        "ours": f"shardsmith shards ({num_shards} files)",
        "naive": f"{how}, cut into {len(naive)} files",
    }
    for ax, name in zip(axes, ("ours", "naive"), strict=True):
        order = orders[name][:MAX_PLOT_POINTS]
        ax.scatter(range(len(order)), order, s=3, alpha=0.6, rasterized=True)
        ax.set_title(f"{titles[name]}\n{figures[name]:.2f} distinct labels per batch of {batch} "
                     f"(ideal {figures['ideal']:.2f})", fontsize=9)
        ax.set_xlabel("read position" + (f" (first {MAX_PLOT_POINTS})" if len(orders[name]) > MAX_PLOT_POINTS else ""))
    axes[0].set_ylabel("label id")
    labels = metadata["labels"]
    if len(labels) <= 30:
        axes[0].set_yticks(range(len(labels)), [f"{i} {label[:16]}" for i, label in enumerate(labels)], fontsize=8)
    figure.suptitle(f"{metadata['name']} {split}: label against read order; files in name order, "
                    f"interleave(cycle_length={cycle_length}), shuffle({buffer})", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return figures


# CLI --------------------------------------------------------------------------------------------------------------


def add_arguments(parser) -> None:
    parser.add_argument("output_dir", help="a finished dataset folder (local or gs://)")
    parser.add_argument("--split", default="train", help="split for the contact sheet and shuffle plot")
    parser.add_argument("--contact_sheet", metavar="PATH", help="write a PNG of sample images per label")
    parser.add_argument("--per_label", type=int, default=6, metavar="N", help="images per label (default 6)")
    parser.add_argument("--heatmap", metavar="PATH", help="write a PNG of records per shard and label")
    parser.add_argument("--shuffle_plot", metavar="PATH",
                        help="write a PNG of label against read order, this dataset next to manifest order")
    parser.add_argument("--buffer", type=int, default=1024, help="shuffle buffer for --shuffle_plot (default 1024)")
    parser.add_argument("--cycle_length", type=int, default=4,
                        help="files the --shuffle_plot reader interleaves at once (default 4)")


def run(args) -> str:
    from shardsmith.read.verify import load_metadata

    output_dir = args.output_dir.rstrip("/")
    metadata = load_metadata(output_dir)
    if (args.contact_sheet or args.shuffle_plot) and args.split not in metadata["splits"]:
        raise UsageError(f"split {args.split!r} is not in this dataset ({', '.join(metadata['splits'])})")
    if args.per_label < 1 or args.buffer < 0 or args.cycle_length < 1:
        raise UsageError("--per_label and --cycle_length must be 1 or more, --buffer 0 or more")
    for target in (args.contact_sheet, args.heatmap, args.shuffle_plot):
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
    if args.shuffle_plot:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        figures = shuffle_plot(output_dir, metadata, args.shuffle_plot, args.split, args.buffer, args.cycle_length)
        written.append(f"shuffle plot   {args.shuffle_plot}  (distinct labels per batch of 32: this dataset "
                       f"{figures['ours']:.2f}, {figures['naive_order']} {figures['naive']:.2f}, "
                       f"ideal {figures['ideal']:.2f})")
    if written:
        print("\nwrote:\n" + "\n".join(f"  {w}" for w in written), flush=True)
    return text
