"""A row and its loaded image as one record: which values go in (shardsmith.format.example defines the keys and
the encoding). Byte-for-byte deterministic: the same row and bytes give the same record in any process."""

from __future__ import annotations

import hashlib

from shardsmith.format.example import ImageRecord, encode_example, encode_example_chunks
from shardsmith.images.load_images import ImageInfo
from shardsmith.rows import ManifestRow


def image_record(row: ManifestRow, data: bytes, info: ImageInfo, sha256_hex: str | None = None,
                 image_mode: str = "bytes", mask_png: bytes | None = None) -> ImageRecord:
    """The record of one image: its bytes unchanged (or, with image_mode "path", where they are and how many),
    its shape, label(s) and provenance; with an annotation, its boxes, class mask (`mask_png`) and extra
    features. `sha256_hex`, when the caller has it, saves hashing the bytes twice."""
    annotation = row.annotation
    labels: dict = {"label_ids": (row.label_id,), "label_texts": (row.label,)}
    if annotation is not None and annotation.boxes:
        labels = {"boxes": annotation.boxes, "box_label_ids": annotation.label_ids,
                  "box_label_texts": annotation.labels}
    elif annotation is not None and annotation.labels:
        labels = {"label_ids": annotation.label_ids, "label_texts": annotation.labels}
    where = {"uri": row.resolved_uri, "num_bytes": len(data)} if image_mode == "path" else {"encoded": data}
    return ImageRecord(
        filename=row.uri, format=info.format, height=info.height, width=info.width, channels=info.channels,
        sha256=sha256_hex or hashlib.sha256(data).hexdigest(), mask_png=mask_png,
        features=annotation.features if annotation is not None else (), **where, **labels,
    )


def encode_image_example(row: ManifestRow, data: bytes, info: ImageInfo, sha256_hex: str | None = None,
                         image_mode: str = "bytes", mask_png: bytes | None = None) -> bytes:
    """The serialized Example of one image (see `image_record`)."""
    return encode_example(image_record(row, data, info, sha256_hex, image_mode, mask_png))


def image_example_chunks(row: ManifestRow, data: bytes, info: ImageInfo, sha256_hex: str | None = None,
                         image_mode: str = "bytes", mask_png: bytes | None = None) -> list[bytes]:
    """`encode_image_example` as chunks whose concatenation is its bytes, the image bytes a chunk of their own
    (shardsmith.format.example.encode_example_chunks)."""
    return encode_example_chunks(image_record(row, data, info, sha256_hex, image_mode, mask_png))
