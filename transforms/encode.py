"""Stage 6: encode an image and its row as a `tf.train.Example`, byte-for-byte deterministic.

TensorFlow is not imported: importing anything under `tensorflow`, even its example_pb2, costs seconds and
about 0.7 GB per process. The Example messages are declared here from the same field numbers as TensorFlow's
example.proto and feature.proto (as TFDS does with its own copy), in a private descriptor pool so they never
clash with TensorFlow's if both are loaded. Serialization uses deterministic=True, which sorts the feature
map: the default map order changes from one process to the next.
"""

from __future__ import annotations

import functools
import hashlib

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from transforms.load_images import ImageInfo
from transforms.records import ManifestRow

F = descriptor_pb2.FieldDescriptorProto

IMAGE_MODES = ("bytes", "path")
TASKS = ("classification", "multi_label", "detection", "segmentation")
# Exactly the keys a record carries with --image_mode bytes (the read side builds its parse spec from
# metadata.json's copy of these maps). Kinds: bytes, int64, float, and lists of each (bytes_list, ...).
EXAMPLE_KEYS = {
    "image/encoded": "bytes",
    "image/format": "bytes",
    "image/height": "int64",
    "image/width": "int64",
    "image/channels": "int64",
    "image/class/label": "int64",
    "image/class/text": "bytes",
    "image/filename": "bytes",
    "image/key/sha256": "bytes",
}
# --image_mode path: no bytes; where to read them (the resolved URI) and how many there were.
PATH_MODE_KEYS = {
    **{key: kind for key, kind in EXAMPLE_KEYS.items() if key != "image/encoded"},
    "image/uri": "bytes",
    "image/num_bytes": "int64",
}
MULTI_LABEL_KEYS = {"image/class/label": "int64_list", "image/class/text": "bytes_list"}
# The TF Object Detection API's keys; boxes are normalized to [0, 1], one entry per object in manifest order.
DETECTION_KEYS = {
    "image/object/bbox/xmin": "float_list",
    "image/object/bbox/ymin": "float_list",
    "image/object/bbox/xmax": "float_list",
    "image/object/bbox/ymax": "float_list",
    "image/object/class/label": "int64_list",
    "image/object/class/text": "bytes_list",
}
MASK_KEY = "image/segmentation/class/encoded"
SEGMENTATION_KEYS = {MASK_KEY: "bytes", "image/segmentation/class/format": "bytes"}
BOX_KEYS = ("image/object/bbox/xmin", "image/object/bbox/ymin", "image/object/bbox/xmax", "image/object/bbox/ymax")
FEATURE_KINDS = {"int": "int64", "float": "float", "string": "bytes"}


def example_keys(image_mode: str, task: str = "classification",
                 features: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """Every key a record of this build carries, with its kind. `features`: (name, --feature type) pairs."""
    keys = dict(PATH_MODE_KEYS if image_mode == "path" else EXAMPLE_KEYS)
    if task == "multi_label":
        keys.update(MULTI_LABEL_KEYS)
    elif task == "detection":
        del keys["image/class/label"], keys["image/class/text"]
        keys.update(DETECTION_KEYS)
    elif task == "segmentation":
        keys.update(SEGMENTATION_KEYS)
    for name, kind in features:
        scalar = kind.removesuffix("_list")
        keys[name] = FEATURE_KINDS[scalar] + ("_list" if kind != scalar else "")
    return keys


def _list_message(file: descriptor_pb2.FileDescriptorProto, name: str, field_type: int) -> None:
    message = file.message_type.add(name=name)
    field = message.field.add(name="value", number=1, label=F.LABEL_REPEATED, type=field_type)
    if field_type != F.TYPE_BYTES:
        field.options.packed = True


@functools.cache
def example_class():
    """The tensorflow.Example message class, wire-compatible with TensorFlow's."""
    file = descriptor_pb2.FileDescriptorProto(
        name="shardsmith/tf_example.proto", package="tensorflow", syntax="proto3"
    )
    _list_message(file, "BytesList", F.TYPE_BYTES)
    _list_message(file, "FloatList", F.TYPE_FLOAT)
    _list_message(file, "Int64List", F.TYPE_INT64)
    feature = file.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, (name, type_name) in enumerate(
        [("bytes_list", "BytesList"), ("float_list", "FloatList"), ("int64_list", "Int64List")], start=1
    ):
        feature.field.add(name=name, number=number, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                          type_name=f".tensorflow.{type_name}", oneof_index=0)
    features = file.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
    entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                    type_name=".tensorflow.Feature")
    features.field.add(name="feature", number=1, label=F.LABEL_REPEATED, type=F.TYPE_MESSAGE,
                       type_name=".tensorflow.Features.FeatureEntry")
    example = file.message_type.add(name="Example")
    example.field.add(name="features", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                      type_name=".tensorflow.Features")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


def encode_image_example(row: ManifestRow, data: bytes, info: ImageInfo, sha256_hex: str | None = None,
                         image_mode: str = "bytes", mask_png: bytes | None = None) -> bytes:
    """The serialized Example for one image: the original bytes unchanged (or, with image_mode "path", where
    they are and how many), its shape, label(s) and provenance; with an annotation, its boxes, class mask
    (`mask_png`) and extra features. `sha256_hex`, when the caller has it, saves hashing the bytes twice."""
    example = example_class()()
    feature = example.features.feature
    if image_mode == "path":
        feature["image/uri"].bytes_list.value.append(row.resolved_uri.encode())
        feature["image/num_bytes"].int64_list.value.append(len(data))
    else:
        feature["image/encoded"].bytes_list.value.append(data)
    feature["image/format"].bytes_list.value.append(info.format.encode())
    feature["image/height"].int64_list.value.append(info.height)
    feature["image/width"].int64_list.value.append(info.width)
    feature["image/channels"].int64_list.value.append(info.channels)
    feature["image/filename"].bytes_list.value.append(row.uri.encode())
    digest = sha256_hex or hashlib.sha256(data).hexdigest()
    feature["image/key/sha256"].bytes_list.value.append(digest.encode())
    annotation = row.annotation
    if annotation is None or not annotation.labels:
        feature["image/class/label"].int64_list.value.append(row.label_id)
        feature["image/class/text"].bytes_list.value.append(row.label.encode())
    elif annotation.boxes:
        for index, key in enumerate(BOX_KEYS):
            feature[key].float_list.value.extend(box[index] for box in annotation.boxes)
        feature["image/object/class/label"].int64_list.value.extend(annotation.label_ids)
        feature["image/object/class/text"].bytes_list.value.extend(label.encode() for label in annotation.labels)
    else:
        feature["image/class/label"].int64_list.value.extend(annotation.label_ids)
        feature["image/class/text"].bytes_list.value.extend(label.encode() for label in annotation.labels)
    if mask_png is not None:
        feature[MASK_KEY].bytes_list.value.append(mask_png)
        feature["image/segmentation/class/format"].bytes_list.value.append(b"png")
    if annotation is not None:
        for name, value in annotation.features:
            if value != ():  # an empty list leaves the key out; the read side parses it as an empty list
                _set_feature(feature[name], value)
    return example.SerializeToString(deterministic=True)


def _set_feature(feature, value) -> None:
    """An extra column's typed value (int, float, str, or a tuple of one of them) into its Feature."""
    values = value if isinstance(value, tuple) else (value,)
    kind = type(values[0])
    if kind is str:
        feature.bytes_list.value.extend(v.encode() for v in values)
    elif kind is float:
        feature.float_list.value.extend(values)
    else:
        feature.int64_list.value.extend(values)
