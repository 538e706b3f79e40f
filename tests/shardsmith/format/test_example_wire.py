"""The Example's wire bytes written by hand (shardsmith/format/example_wire.py) are protobuf's own: every record
shape the writer makes, and random values with the edge cases, encode to the bytes of the message example.py
declares, serialized by protobuf with deterministic=True."""

from __future__ import annotations

import math
import random

import pytest

from shardsmith.format import example
from shardsmith.format.example import (
    ImageRecord,
    encode_example,
    encode_example_chunks,
    example_class,
    parse_example,
)
from shardsmith.format.example_wire import bytes_feature, example_bytes, float_feature, int64_feature
from shardsmith.format.tfrecord import frame, frame_chunks


def _protobuf_bytes(features: dict[str, tuple[str, list]]) -> bytes:
    """key -> (kind, values) serialized by protobuf itself, the reference."""
    message = example_class()()
    for key, (kind, values) in features.items():
        getattr(message.features.feature[key], kind).value.extend(values)
    return message.SerializeToString(deterministic=True)


def _wire_bytes(features: dict[str, tuple[str, list]]) -> bytes:
    encoders = {"bytes_list": bytes_feature, "float_list": float_feature, "int64_list": int64_feature}
    return example_bytes({key: encoders[kind](values) for key, (kind, values) in features.items()})


def _random_features(rng: random.Random) -> dict[str, tuple[str, list]]:
    ints = [0, 1, 127, 128, 300, 2**31, 2**63 - 1, -1, -(2**63), -300]
    floats = [0.0, -0.0, 1.5, -2.25, 1e-45, 3.4e38, 1e39, -1e39, math.inf, -math.inf, math.nan, 0.1]
    features = {}
    for _ in range(rng.randrange(1, 12)):
        key = rng.choice(["a", "b", "image/x", "image/encoded", "label", "Zeta", "é", "z" * 200, "ß/k"])
        kind = rng.choice(["bytes_list", "float_list", "int64_list"])
        size = rng.choice([0, 1, 1, 2, 5, 200])
        if kind == "bytes_list":
            values = [rng.randbytes(rng.choice([0, 1, 127, 128, 20_000]))
                      for _ in range(size)]
        elif kind == "float_list":
            values = [rng.choice(floats) if rng.random() < 0.5 else rng.uniform(-1e6, 1e6) for _ in range(size)]
        else:
            values = [rng.choice(ints) if rng.random() < 0.5 else rng.randrange(-(2**63), 2**63)
                      for _ in range(size)]
        features[key] = (kind, values)
    return features


def test_random_features_encode_to_protobufs_own_bytes():
    rng = random.Random(11)
    for _ in range(300):
        features = _random_features(rng)
        assert _wire_bytes(features) == _protobuf_bytes(features), features


def test_no_features_and_empty_lists_are_written_as_protobuf_writes_them():
    assert example_bytes({}) == example_class()().SerializeToString(deterministic=True) == b""
    empty = {"b": ("bytes_list", []), "f": ("float_list", []), "i": ("int64_list", [])}
    assert _wire_bytes(empty) == _protobuf_bytes(empty)


def test_an_int_outside_int64_is_refused_as_protobuf_refuses_it():
    for value in (2**63, -(2**63) - 1):
        with pytest.raises(ValueError):
            int64_feature([value])
        with pytest.raises(ValueError):
            _protobuf_bytes({"i": ("int64_list", [value])})


def _reference_example(record: ImageRecord) -> bytes:
    """The record as the writer encoded it before example_wire.py: each key set on the protobuf message."""
    features: dict[str, tuple[str, list]] = {}
    if record.uri is not None:
        features[example.URI] = ("bytes_list", [record.uri.encode()])
        features[example.NUM_BYTES] = ("int64_list", [record.num_bytes])
    else:
        features[example.IMAGE] = ("bytes_list", [record.encoded])
    features[example.FORMAT] = ("bytes_list", [record.format.encode()])
    for key, value in ((example.HEIGHT, record.height), (example.WIDTH, record.width),
                       (example.CHANNELS, record.channels)):
        features[key] = ("int64_list", [value])
    features[example.FILENAME] = ("bytes_list", [record.filename.encode()])
    features[example.SHA256] = ("bytes_list", [record.sha256.encode()])
    if record.boxes:
        for index, key in enumerate(example.BOX_KEYS):
            features[key] = ("float_list", [box[index] for box in record.boxes])
        features[example.BOX_LABEL] = ("int64_list", list(record.box_label_ids))
        features[example.BOX_LABEL_TEXT] = ("bytes_list", [t.encode() for t in record.box_label_texts])
    else:
        features[example.LABEL] = ("int64_list", list(record.label_ids))
        features[example.LABEL_TEXT] = ("bytes_list", [t.encode() for t in record.label_texts])
    if record.mask_png is not None:
        features[example.MASK] = ("bytes_list", [record.mask_png])
        features[example.MASK_FORMAT] = ("bytes_list", [b"png"])
    for name, value in record.features:
        if value == ():
            continue
        values = list(value) if isinstance(value, tuple) else [value]
        kind = {str: "bytes_list", float: "float_list"}.get(type(values[0]), "int64_list")
        features[name] = (kind, [v.encode() for v in values] if kind == "bytes_list" else values)
    return _protobuf_bytes(features)


RECORDS = [
    ImageRecord("cats/a.jpg", "jpeg", 480, 640, 3, "ab" * 32, encoded=b"\xff\xd8" + bytes(range(256)) * 300,
                label_ids=(2,), label_texts=("cat",)),
    ImageRecord("a.png", "png", 1, 1, 4, "00" * 32, uri="gs://bucket/a.png", num_bytes=70_000,
                label_ids=(0,), label_texts=("ünïcode",)),
    ImageRecord("m.jpg", "jpeg", 10, 20, 1, "cd" * 32, encoded=b"x", label_ids=(0, 3, 7),
                label_texts=("a", "b", "c")),
    ImageRecord("m.jpg", "jpeg", 10, 20, 1, "cd" * 32, encoded=b"x"),  # multi_label without labels
    ImageRecord("d.jpg", "jpeg", 10, 20, 3, "ef" * 32, encoded=b"y" * 130,
                boxes=((0.1, 0.2, 0.5, 0.75), (0.0, 0.0, 1.0, 1.0)), box_label_ids=(1, 0),
                box_label_texts=("dog", "cat")),
    ImageRecord("s.png", "png", 8, 8, 3, "12" * 32, encoded=b"png", label_ids=(1,), label_texts=("road",),
                mask_png=b"\x89PNG mask"),
    ImageRecord("f.jpg", "jpeg", 10, 20, 3, "34" * 32, encoded=b"z", label_ids=(1,), label_texts=("x",),
                features=(("age", 42), ("score", 0.25), ("note", "hé"), ("tags", ("a", "b")), ("empty", ()),
                          ("ids", (-5, 2**62)), ("flag", True), ("weights", (1.5, -1e39)))),
]


@pytest.mark.parametrize("record", RECORDS, ids=range(len(RECORDS)))
def test_each_record_shape_encodes_to_the_bytes_the_protobuf_message_gave(record):
    encoded = encode_example(record)
    assert encoded == _reference_example(record)
    assert parse_example(encoded)[example.FILENAME] == [record.filename.encode()]


def test_a_records_chunks_frame_and_join_to_its_bytes_and_the_image_is_never_copied():
    image = bytes(range(256)) * 64  # 16 KB, a chunk of its own
    record = ImageRecord("a.jpg", "jpeg", 480, 640, 3, "ab" * 32, encoded=image, label_ids=(2,),
                         label_texts=("cat",))
    chunks = encode_example_chunks(record)
    assert b"".join(chunks) == encode_example(record) == _reference_example(record)
    assert len(chunks) == 3 and chunks[1] is image, "head, the image as given, the rest"
    assert frame_chunks(chunks) == frame(b"".join(chunks))
    small = ImageRecord("a.jpg", "jpeg", 1, 1, 3, "ab" * 32, encoded=b"tiny", label_ids=(2,), label_texts=("c",))
    assert len(encode_example_chunks(small)) == 1


def test_records_that_share_values_encode_as_protobuf_does_while_the_values_are_kept_encoded():
    """Formats, sides, channels and labels are encoded once per process and map entries' heads are kept by
    length: records that repeat, and records that differ in one of them or in a length, still give protobuf's
    bytes."""
    rng = random.Random(5)
    for index in range(400):
        labels = tuple(rng.sample(["cat", "dog", "ünï", "x" * 130], rng.choice((1, 1, 2))))
        record = ImageRecord(
            f"{'d/' * rng.randrange(70)}{index}.jpg", rng.choice(("jpeg", "png", "gif")),
            rng.choice((1, 127, 128, 480, 16_383, 16_384, 2**21)), rng.choice((1, 640, 2**35)),
            rng.choice((1, 3, 4)), f"{index:064x}", encoded=bytes(rng.choice((1, 4095, 4096, 70_000))),
            label_ids=tuple(rng.randrange(300) for _ in labels), label_texts=labels)
        assert encode_example(record) == _reference_example(record), record.filename
