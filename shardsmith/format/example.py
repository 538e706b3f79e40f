"""The record: its keys per task and image mode, and the `tf.train.Example` that holds them, encoded and
parsed byte-for-byte deterministically.

Every key a record carries is named here once (IMAGE, LABEL, ...); the writer, `load()`, `verify`, `inspect` and
the TFDS files import them. `ImageRecord` holds one record's values; `encode_example` turns it into bytes and
`parse_example` turns bytes back into values without TensorFlow.

TensorFlow is not imported: importing anything under `tensorflow`, even its example_pb2, costs seconds and
about 0.7 GB per process. The Example messages are declared here, for parsing, with the field numbers of
TensorFlow's example.proto and feature.proto that example_wire.py holds (as TFDS keeps its own copy), in a private
descriptor pool so they never clash with TensorFlow's if both are loaded. Records are written by example_wire.py:
the bytes protobuf's deterministic serialization (feature map in key order) gives.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from shardsmith.format import example_wire as wire
from shardsmith.format.example_wire import (
    Feature,
    bytes_feature,
    example_chunks,
    float_feature,
    int64_feature,
    repeated_int64_feature,
    repeated_text_feature,
)

IMAGE_MODES = ("bytes", "path")
TASKS = ("classification", "multi_label", "detection", "segmentation")

KEY_PREFIX = "image/"  # every key shardsmith writes starts with it; --feature names may not
IMAGE = "image/encoded"
FORMAT = "image/format"
HEIGHT = "image/height"
WIDTH = "image/width"
CHANNELS = "image/channels"
LABEL = "image/class/label"
LABEL_TEXT = "image/class/text"
FILENAME = "image/filename"
SHA256 = "image/key/sha256"
URI = "image/uri"  # --image_mode path: where the bytes are, instead of IMAGE
NUM_BYTES = "image/num_bytes"  # --image_mode path: how many there were
BOX_KEYS = ("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax", "image/object/bbox/ymax")
BOX_LABEL = "image/object/class/label"
BOX_LABEL_TEXT = "image/object/class/text"
MASK = "image/segmentation/class/encoded"
MASK_FORMAT = "image/segmentation/class/format"

# The keys a classification record carries with --image_mode bytes (the read side builds its parse spec from
# metadata.json's "features", written from `example_keys`). Kinds: bytes, int64, float, and lists of each.
EXAMPLE_KEYS = {
    IMAGE: "bytes",
    FORMAT: "bytes",
    HEIGHT: "int64",
    WIDTH: "int64",
    CHANNELS: "int64",
    LABEL: "int64",
    LABEL_TEXT: "bytes",
    FILENAME: "bytes",
    SHA256: "bytes",
}
PATH_MODE_KEYS = {**{key: kind for key, kind in EXAMPLE_KEYS.items() if key != IMAGE}, URI: "bytes",
                  NUM_BYTES: "int64"}
MULTI_LABEL_KEYS = {LABEL: "int64_list", LABEL_TEXT: "bytes_list"}
# The TF Object Detection API's keys; boxes are normalized to [0, 1], one entry per object in manifest order.
DETECTION_KEYS = {**{key: "float_list" for key in BOX_KEYS}, BOX_LABEL: "int64_list", BOX_LABEL_TEXT: "bytes_list"}
SEGMENTATION_KEYS = {MASK: "bytes", MASK_FORMAT: "bytes"}
FEATURE_KINDS = {"int": "int64", "float": "float", "string": "bytes"}


def example_keys(image_mode: str, task: str = "classification",
                 features: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """Every key a record of this build carries, with its kind. `features`: (name, --feature type) pairs."""
    keys = dict(PATH_MODE_KEYS if image_mode == "path" else EXAMPLE_KEYS)
    if task == "multi_label":
        keys.update(MULTI_LABEL_KEYS)
    elif task == "detection":
        del keys[LABEL], keys[LABEL_TEXT]
        keys.update(DETECTION_KEYS)
    elif task == "segmentation":
        keys.update(SEGMENTATION_KEYS)
    for name, kind in features:
        scalar = kind.removesuffix("_list")
        keys[name] = FEATURE_KINDS[scalar] + ("_list" if kind != scalar else "")
    return keys


def _list_message(file, name: str, field_type: int) -> None:
    from google.protobuf.descriptor_pb2 import FieldDescriptorProto as F

    message = file.message_type.add(name=name)
    field = message.field.add(name="value", number=wire.LIST_VALUE, label=F.LABEL_REPEATED, type=field_type)
    if field_type != F.TYPE_BYTES:
        field.options.packed = True


@functools.cache
def example_class():
    """The tensorflow.Example message class, wire-compatible with TensorFlow's. Protobuf is imported here, on
    first use, not with this module."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    F = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="shardsmith/tf_example.proto", package="tensorflow", syntax="proto3"
    )
    _list_message(file, "BytesList", F.TYPE_BYTES)
    _list_message(file, "FloatList", F.TYPE_FLOAT)
    _list_message(file, "Int64List", F.TYPE_INT64)
    feature = file.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, name, type_name in ((wire.BYTES_LIST, "bytes_list", "BytesList"),
                                     (wire.FLOAT_LIST, "float_list", "FloatList"),
                                     (wire.INT64_LIST, "int64_list", "Int64List")):
        feature.field.add(name=name, number=number, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                          type_name=f".tensorflow.{type_name}", oneof_index=0)
    features = file.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=wire.MAP_KEY, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
    entry.field.add(name="value", number=wire.MAP_VALUE, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                    type_name=".tensorflow.Feature")
    features.field.add(name="feature", number=wire.FEATURES_MAP, label=F.LABEL_REPEATED, type=F.TYPE_MESSAGE,
                       type_name=".tensorflow.Features.FeatureEntry")
    example = file.message_type.add(name="Example")
    example.field.add(name="features", number=wire.EXAMPLE_FEATURES, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                      type_name=".tensorflow.Features")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


Box = tuple[float, float, float, float]  # (xmin, ymin, xmax, ymax), normalized to [0, 1] of width and height
FeatureValue = int | float | str | tuple


@dataclass(slots=True)
class ImageRecord:
    """The values of one record. Exactly one of `encoded` (--image_mode bytes) and `uri` (path) is set. Made once
    per image and never changed (not frozen: a frozen dataclass of 16 fields takes several microseconds to make).

    Labels: classification and multi_label fill `label_ids`/`label_texts` (LABEL, LABEL_TEXT; one value each for
    classification); detection fills `boxes` with `box_label_ids`/`box_label_texts` instead. `mask_png`:
    segmentation's class mask. `features`: extra columns, (name, value) in --feature order; an empty tuple
    value leaves its key out (the read side parses it as an empty list).
    """

    filename: str
    format: str
    height: int
    width: int
    channels: int
    sha256: str
    encoded: bytes | None = None
    uri: str | None = None
    num_bytes: int = 0
    label_ids: tuple[int, ...] = ()
    label_texts: tuple[str, ...] = ()
    boxes: tuple[Box, ...] = ()
    box_label_ids: tuple[int, ...] = ()
    box_label_texts: tuple[str, ...] = ()
    mask_png: bytes | None = None
    features: tuple[tuple[str, FeatureValue], ...] = ()


def encode_example(record: ImageRecord) -> bytes:
    """The serialized Example of `record`. Deterministic: the same record gives the same bytes in any process
    (the feature map is written in key order), and they are the bytes protobuf's own deterministic
    serialization gives (shardsmith/format/example_wire.py)."""
    return b"".join(encode_example_chunks(record))


def encode_example_chunks(record: ImageRecord) -> list[bytes]:
    """`encode_example` as chunks whose concatenation is its bytes; the image and the mask are chunks of their
    own, as given (example_wire.example_chunks)."""
    feature: dict[str, Feature] = {}
    if record.uri is not None:
        feature[URI] = bytes_feature((record.uri.encode(),))
        feature[NUM_BYTES] = int64_feature((record.num_bytes,))
    else:
        feature[IMAGE] = bytes_feature((record.encoded,))
    feature[FORMAT] = repeated_text_feature((record.format,))
    feature[HEIGHT] = repeated_int64_feature((record.height,))
    feature[WIDTH] = repeated_int64_feature((record.width,))
    feature[CHANNELS] = repeated_int64_feature((record.channels,))
    feature[FILENAME] = bytes_feature((record.filename.encode(),))
    feature[SHA256] = bytes_feature((record.sha256.encode(),))
    if record.boxes:
        for index, key in enumerate(BOX_KEYS):
            feature[key] = float_feature(box[index] for box in record.boxes)
        feature[BOX_LABEL] = int64_feature(record.box_label_ids)
        feature[BOX_LABEL_TEXT] = bytes_feature(text.encode() for text in record.box_label_texts)
    else:
        feature[LABEL] = repeated_int64_feature(record.label_ids)
        feature[LABEL_TEXT] = repeated_text_feature(record.label_texts)
    if record.mask_png is not None:
        feature[MASK] = bytes_feature((record.mask_png,))
        feature[MASK_FORMAT] = bytes_feature((b"png",))
    for name, value in record.features:
        if value != ():
            feature[name] = _typed_feature(value)
    return example_chunks(feature)


def parse_example(data: bytes) -> dict[str, list]:
    """Key -> its values (a list of bytes, floats or ints) of one serialized Example, without TensorFlow.
    Raises google.protobuf.message.DecodeError for bytes that are not an Example."""
    example = example_class().FromString(data)
    return {key: list(getattr(feature, feature.WhichOneof("kind")).value) if feature.WhichOneof("kind") else []
            for key, feature in example.features.feature.items()}


def feature_map(data: bytes | memoryview):
    """The feature map of a serialized Example (key -> Feature message), no value made a Python object until it
    is asked for: protobuf's parser keeps the bytes it was given, so reading a few small values of a 57 KB photo's
    record this way costs about a third of `parse_example`. Raises DecodeError as `parse_example` does."""
    return example_class().FromString(data).features.feature


def feature_values(data: bytes | memoryview, keys: tuple[str, ...]) -> dict[str, list]:
    """Key -> its values for each of `keys` a serialized Example holds (a key it lacks: no entry), the rest left
    unread (`feature_map`)."""
    feature = feature_map(data)
    values = {}
    for key in keys:
        if key in feature:  # `feature[key]` would add an empty entry
            found = feature[key]
            kind = found.WhichOneof("kind")
            values[key] = list(getattr(found, kind).value) if kind else []
    return values


def _typed_feature(value: FeatureValue) -> Feature:
    """An extra column's typed value (int, float, str, or a tuple of one of them) as a Feature."""
    values = value if isinstance(value, tuple) else (value,)
    kind = type(values[0])
    if kind is str:
        return bytes_feature(v.encode() for v in values)
    if kind is float:
        return float_feature(values)
    return int64_feature(values)
