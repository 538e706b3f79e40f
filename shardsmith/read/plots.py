"""`shardsmith inspect`'s PNG plots: a contact sheet of images per label, a heatmap of records per shard and
label, and the shuffle plot (label against read order for this dataset beside manifest order). matplotlib's Agg
backend: no display needed. Records are streamed a shard at a time (shardsmith.read.record_stream).
"""

from __future__ import annotations

import dataclasses
import io
import math
from collections import Counter

from shardsmith.format.metadata_schema import Metadata
from shardsmith.read.record_stream import Record, split_records

MAX_SHEET_LABELS = 40
MAX_PLOT_POINTS = 50_000


BOX_COLOURS = ("#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4")


# Plots ----------------------------------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def contact_sheet(output_dir: str, metadata: Metadata, path: str, split: str, per_label: int) -> str:
    """The first `per_label` images of each label (in shard order) in a grid, one row per label."""
    from PIL import Image

    labels = metadata.labels[:MAX_SHEET_LABELS]
    picked: dict[int, list[Record]] = {i: [] for i in range(len(labels))}
    remaining = {i for i in picked if metadata.splits[split].label_counts.get(labels[i], 0)}
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
    more = f", first {MAX_SHEET_LABELS} of {len(metadata.labels)} labels" if len(metadata.labels) > rows else ""
    figure.suptitle(f"{metadata.name} {split}: first {per_label} images per label{more}", fontsize=10)
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


def heatmap(metadata: Metadata, path: str) -> str:
    """Records per (shard, label) for every shard of every split, from metadata.json."""
    import numpy as np

    labels = metadata.labels
    rows, names = [], []
    for split, info in metadata.splits.items():
        for index, shard in enumerate(info.shards):
            rows.append([shard.label_counts.get(label, 0) for label in labels])
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
    ax.set_title(f"{metadata.name}: records per shard and label")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def manifest_order(metadata: Metadata) -> dict[str, list[tuple[int, int]]] | None:
    """URI as written -> [(source index, line)] from re-reading the manifests named in metadata.json, or None
    when they cannot be read."""
    from shardsmith.manifest import ManifestFormat, ManifestParser, resolve_sources
    from shardsmith.rows import ManifestRow

    try:
        recorded = metadata.options or {}
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


def _naive_shards(records: list[Record], num_shards: int, metadata: Metadata) -> tuple[list[list[int]], str]:
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
    interleaved a record at a time, then a shuffle buffer (`shardsmith.load`'s own code, run by tf.data, fixed
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


def shuffle_plot(output_dir: str, metadata: Metadata, path: str, split: str, buffer: int, cycle_length: int = 4,
                 batch: int = 32) -> dict:
    """Two panels, same reader: this dataset's shards, and the same records in manifest order. Returns the
    distinct-labels-per-batch figures it prints in the titles ("ours", "naive", "ideal") and "naive_order",
    which order stood in for the manifest's."""
    records = list(split_records(output_dir, metadata, split))
    num_shards = len(metadata.splits[split].shards)
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
    labels = metadata.labels
    if len(labels) <= 30:
        axes[0].set_yticks(range(len(labels)), [f"{i} {label[:16]}" for i, label in enumerate(labels)], fontsize=8)
    figure.suptitle(f"{metadata.name} {split}: label against read order; files in name order, "
                    f"interleave(cycle_length={cycle_length}), shuffle({buffer})", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return figures


# CLI --------------------------------------------------------------------------------------------------------------


MAX_DRAWN_PAIRS = 12


def near_duplicate_pairs(output_dir: str, metadata: Metadata, path: str, max_pairs: int = MAX_DRAWN_PAIRS) -> int:
    """The closest near-duplicate pairs (near_duplicates.jsonl, closest first) side by side, one pair per row,
    with their distance, splits and labels; returns the number of pairs drawn. A copy that is not in the dataset
    (dropped by --near_duplicates drop) is drawn as a note saying so."""
    from PIL import Image

    from shardsmith.format.metadata import parse_near_duplicates
    from shardsmith.format.naming import NEAR_DUPLICATES_FILE, join
    from shardsmith.output_folder import dataset_dir
    from shardsmith.storage import read_bytes

    data = read_bytes(join(dataset_dir(output_dir, metadata), NEAR_DUPLICATES_FILE))
    pairs = parse_near_duplicates(data or b"")[:max_pairs]
    wanted = {(side["split"], side["uri"]) for pair in pairs for side in (pair["first"], pair["second"])}
    images: dict[tuple[str, str], bytes] = {}
    for split in sorted({split for split, _ in wanted} & set(metadata.splits)):
        for record in split_records(output_dir, metadata, split, with_images=True):
            if (split, record.filename) in wanted:
                images[(split, record.filename)] = record.encoded
    plt = _pyplot()
    rows = max(1, len(pairs))
    figure, axes = plt.subplots(rows, 2, figsize=(6, 2.8 * rows), squeeze=False)
    for row in range(rows):
        for col in range(2):
            ax = axes[row][col]
            ax.set_xticks([])
            ax.set_yticks([])
            if not pairs:
                ax.axis("off")
                continue
            pair = pairs[row]
            side = pair["first" if col == 0 else "second"]
            encoded = images.get((side["split"], side["uri"]))
            if encoded:
                with Image.open(io.BytesIO(encoded)) as image:
                    ax.imshow(image.convert("RGB"))
            else:
                ax.text(0.5, 0.5, "not in the dataset\n(dropped or path mode)", ha="center", va="center", fontsize=8)
            mark = "  LABELS DIFFER" if pair["labels_differ"] and col == 1 else ""
            published = side.get("published")
            if published:  # an --incremental night's pair with a record of an earlier generation
                mark = f"  (published, generation {published.get('generation')}){mark}"
            ax.set_title(f"{side['split']} / {side['label']}{mark}\n{side['uri'][-40:]}", fontsize=7)
        if pairs:
            axes[row][0].set_ylabel(f"distance {pairs[row]['distance']}", fontsize=9)
    near = metadata.near_duplicates
    total = near.num_pairs if near else len(pairs)
    figure.suptitle(f"{metadata.name}: {len(pairs)} closest of {total} near-duplicate pairs", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return len(pairs)
