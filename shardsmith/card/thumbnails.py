"""The card's pictures: small JPEG thumbnails of records, embedded as data: URIs, with a detection record's boxes
and a segmentation record's mask drawn on them, and the one pass over a split's records that picks them.

Bounds: a thumbnail is at most THUMBNAIL_SIDE pixels a side (about 3-5 KB), and one pass reads at most
MAX_SCANNED_RECORDS records and MAX_SCANNED_BYTES of images (a record at a time, never a shard:
shardsmith.read.record_stream; MAX_SCANNED_PATH_RECORDS for --image_mode path, where each record opens its
file), so the card's size and the time it takes do not grow with the dataset.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable
from dataclasses import dataclass, field

from shardsmith.format.metadata_schema import Metadata
from shardsmith.read.plots import BOX_COLOURS
from shardsmith.read.record_stream import Record, split_records

THUMBNAIL_SIDE = 112
THUMBNAIL_QUALITY = 72
MAX_SCANNED_RECORDS = 50_000  # per pass; a label not met by then shows "none in the first N records"
MAX_SCANNED_BYTES = 256 << 20  # image bytes per pass: 50,000 photos of 100 KB would be 5 GB
MAX_SCANNED_PATH_RECORDS = 2_000  # --image_mode path: each record read opens its image file
ORDER_SAMPLE = 4_096  # labels kept in read order from the split's first shard, for the mixing figures
MASK_COLOURS = ((230, 25, 75), (60, 180, 75), (67, 99, 216), (245, 130, 49), (145, 30, 180), (66, 212, 244),
                (240, 50, 230), (188, 246, 12))


@dataclass(frozen=True)
class Thumbnail:
    uri: str
    label: str
    data_uri: str  # "" when the image could not be drawn (its file gone, in --image_mode path)
    note: str = ""


@dataclass
class Scan:
    """What one pass over a split found: thumbnails per label id (in shard order), thumbnails of the URIs asked
    for, the label ids of the first shard's first ORDER_SAMPLE records in read order, and how many records were
    read (`complete`: the whole split, or everything asked for was found first)."""

    examples: dict[int, list[Thumbnail]] = field(default_factory=dict)
    wanted: dict[str, Thumbnail] = field(default_factory=dict)
    first_shard_labels: list[int] = field(default_factory=list)
    records_read: int = 0
    complete: bool = True


def scan_split(folder: str, metadata: Metadata, split: str, labels: Iterable[int], per_label: int,
               wanted: set[str], max_records: int = MAX_SCANNED_RECORDS) -> Scan:
    """Reads `split` in shard order until every label id in `labels` has `per_label` thumbnails, every URI in
    `wanted` has one, and ORDER_SAMPLE labels of the first shard are kept; or until `max_records` records or
    MAX_SCANNED_BYTES of images were read."""
    scan = Scan(examples={label: [] for label in labels})
    if metadata.image_mode == "path":
        max_records = min(max_records, MAX_SCANNED_PATH_RECORDS)
    bytes_read = 0
    missing_labels = {label for label in scan.examples if per_label}
    missing_uris = set(wanted)
    names = metadata.labels
    for record in split_records(folder, metadata, split, with_images=True):
        scan.records_read += 1
        bytes_read += len(record.encoded)
        if record.shard == 0 and len(scan.first_shard_labels) < ORDER_SAMPLE:
            scan.first_shard_labels.append(record.label)
        name = names[record.label] if 0 <= record.label < len(names) else str(record.label)
        if record.label in missing_labels:
            scan.examples[record.label].append(thumbnail(record, name))
            if len(scan.examples[record.label]) >= per_label:
                missing_labels.discard(record.label)
        if record.filename in missing_uris:
            scan.wanted[record.filename] = thumbnail(record, name)
            missing_uris.discard(record.filename)
        order_done = record.shard > 0 or len(scan.first_shard_labels) >= ORDER_SAMPLE
        if not missing_labels and not missing_uris and order_done:
            return scan
        if scan.records_read >= max_records or bytes_read >= MAX_SCANNED_BYTES:
            scan.complete = False
            return scan
    return scan


def thumbnail(record: Record, label: str) -> Thumbnail:
    """The record's image at most THUMBNAIL_SIDE a side, boxes and mask drawn, as a JPEG data: URI."""
    from PIL import Image, ImageDraw

    if not record.encoded:
        return Thumbnail(record.filename, label, "", "file missing")
    try:
        with Image.open(io.BytesIO(record.encoded)) as opened:
            opened.draft("RGB", (THUMBNAIL_SIDE, THUMBNAIL_SIDE))
            image = opened.convert("RGB")
    except (OSError, ValueError) as e:
        return Thumbnail(record.filename, label, "", f"cannot draw: {str(e)[:80]}")
    if record.mask:
        image = _with_mask(image, record.mask)
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE))
    if record.boxes:
        draw = ImageDraw.Draw(image)
        width, height = image.size
        for index, (xmin, ymin, xmax, ymax, _) in enumerate(record.boxes):
            draw.rectangle((xmin * width, ymin * height, xmax * width, ymax * height),
                           outline=BOX_COLOURS[index % len(BOX_COLOURS)], width=2)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=THUMBNAIL_QUALITY)
    return Thumbnail(record.filename, label, "data:image/jpeg;base64," + base64.b64encode(out.getvalue()).decode())


def _with_mask(image, mask_png: bytes):
    """The image with its class mask laid over it, each class a colour at half strength, class 0 left clear."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(mask_png)) as opened:
            mask = opened.convert("L").resize(image.size, Image.Resampling.NEAREST)
    except (OSError, ValueError):
        return image
    palette = [0, 0, 0] + [c for i in range(1, 256) for c in MASK_COLOURS[i % len(MASK_COLOURS)]]
    colours = mask.copy()
    colours.putpalette(palette)
    alpha = mask.point(lambda v: 128 if v else 0)
    return Image.composite(colours.convert("RGB"), image, alpha)
