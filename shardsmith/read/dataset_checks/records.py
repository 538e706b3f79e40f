"""The checks of one record: it parses as a `tf.train.Example` holding exactly the keys of metadata.json's
"features", one value each; label ids name the label texts they carry (and boxes are normalized);
`image/key/sha256` is the SHA-256 of the image bytes (with --image_mode path: the file at `image/uri`, unchanged
since the build); `image/format` matches the bytes' signature; and the image (when chosen to be decoded), and a
segmentation mask, decode with TensorFlow to the recorded shape."""

from __future__ import annotations

import hashlib

from shardsmith.format.example import (
    BOX_KEYS,
    BOX_LABEL,
    BOX_LABEL_TEXT,
    CHANNELS,
    FORMAT,
    HEIGHT,
    IMAGE,
    LABEL,
    LABEL_TEXT,
    MASK,
    NUM_BYTES,
    SHA256,
    URI,
    WIDTH,
)
from shardsmith.format.metadata_schema import Metadata
from shardsmith.images.load_images import JPEG_START
from shardsmith.read.dataset_checks.report import ShardCheck
from shardsmith.rows import placing_label_id

_SIGNATURES = {"jpeg": (JPEG_START,), "png": (b"\x89PNG\r\n\x1a\n",), "gif": (b"GIF87a", b"GIF89a"),
               "bmp": (b"BM",), "webp": (b"RIFF",)}
_LIST_FIELDS = {"bytes": "bytes_list", "int64": "int64_list", "float": "float_list"}


def check_example(check: ShardCheck, index: int, data: bytes, metadata: Metadata, decode: bool) -> str | None:
    """Checks one serialized record; returns its label text (None when it cannot be told)."""
    import tensorflow as tf

    try:
        example = tf.train.Example.FromString(data)
    except Exception as e:
        check.add("record is not a tf.train.Example", f"{type(e).__name__}", index)
        return None
    feature = example.features.feature
    expected = metadata.features
    present, required = set(feature.keys()), {k for k, kind in expected.items() if not kind.endswith("_list")}
    if not required <= present <= set(expected):  # an empty list feature is left out of a record
        missing, extra = sorted(required - present), sorted(present - set(expected))
        check.add("Example keys differ from metadata.json", f"missing {missing}, unexpected {extra}", index)
        return None
    values = {}
    for key, kind in expected.items():
        scalar = kind.removesuffix("_list")
        listed = list(getattr(feature[key], _LIST_FIELDS[scalar]).value) if key in present else []
        if scalar == kind and len(listed) != 1:
            check.add(f"feature {key} does not hold exactly one {kind} value", f"{len(listed)} values", index)
            return None
        values[key] = listed if scalar != kind else listed[0]
    text = _check_labels(check, index, values, metadata)
    encoded = values[IMAGE] if IMAGE in values else _image_at(values, check, index)
    if encoded is None:
        return text
    if hashlib.sha256(encoded).hexdigest().encode() != values[SHA256]:
        check.add(f"{SHA256} does not match the image bytes", "", index)
    fmt = values[FORMAT].decode("utf-8", "replace")
    signatures = _SIGNATURES.get(fmt)
    if signatures is None or not encoded.startswith(signatures) or (fmt == "webp" and encoded[8:12] != b"WEBP"):
        check.add(f"{FORMAT} does not match the image bytes", f"format {fmt!r}, bytes start {encoded[:4]!r}",
                  index)
    shape = (values[HEIGHT], values[WIDTH], values[CHANNELS])
    if decode:
        try:
            decoded = tf.io.decode_image(encoded, expand_animations=False)
            got = tuple(int(d) for d in decoded.shape)
        except Exception as e:
            check.add("image does not decode", f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", index)
        else:
            check.num_decoded += 1
            if got != shape:
                check.add("decoded shape differs from height/width/channels", f"decoded {got}, recorded {shape}",
                          index)
        if MASK in values:
            try:
                mask_shape = tuple(int(d) for d in tf.io.decode_png(values[MASK], channels=0).shape)
            except Exception as e:
                check.add("segmentation mask does not decode", f"{type(e).__name__}", index)
            else:
                if mask_shape != shape[:2] + (1,):
                    check.add("segmentation mask shape differs from the image", f"mask {mask_shape}, image {shape}",
                              index)
    return text


def _check_labels(check: ShardCheck, index: int, values: dict, metadata: Metadata) -> str | None:
    """Checks that label ids name the label texts they travel with (and that boxes are normalized); returns
    the label the record was placed by: its only label, or the rarest of several (as the build chose)."""
    labels = metadata.labels
    boxes = BOX_LABEL in values
    ids, texts = (values[BOX_LABEL], values[BOX_LABEL_TEXT]) if boxes else (values[LABEL], values[LABEL_TEXT])
    ids, texts = (ids, texts) if isinstance(ids, list) else ([ids], [texts])
    texts = [t.decode("utf-8", "replace") for t in texts]
    if len(ids) != len(texts) or not ids:
        check.add("label ids and label texts differ in number", f"{len(ids)} ids, {len(texts)} texts", index)
        return None
    for label, text in zip(ids, texts, strict=True):
        if not 0 <= label < len(labels) or labels[label] != text:
            check.add("label id and label text disagree", f"id {label}, text {text!r}", index)
            return None
    if boxes:
        corners = [values[key] for key in BOX_KEYS]  # xmin, ymin, xmax, ymax lists
        if any(len(coordinates) != len(ids) for coordinates in corners):
            check.add("box coordinates and box labels differ in number", f"{len(ids)} labels", index)
        elif any(not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1) for x0, y0, x1, y1 in zip(*corners, strict=True)):
            check.add("box outside [0, 1] or with min >= max", "", index)
    return labels[placing_label_id(ids, metadata.label_image_counts)]


def _image_at(values: dict, check: ShardCheck, index: int) -> bytes | None:
    """--image_mode path: the bytes at the record's image/uri, which must still be the ones it was built from."""
    from shardsmith.images.load_images import read_input_file

    uri = values[URI].decode("utf-8", "replace")
    try:
        data = read_input_file(uri, 1 << 62)
    except Exception as e:
        check.add(f"{URI} cannot be read", f"{uri}: {type(e).__name__}", index)
        return None
    if len(data) != values[NUM_BYTES]:
        check.add(f"the file at {URI} changed since the build", f"{uri}: {len(data)} bytes, recorded "
                  f"{values[NUM_BYTES]}", index)
    return data
