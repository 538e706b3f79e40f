"""shardsmith/format/example.py: the tf.train.Example written per image, read back with TensorFlow's own parser."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
from pathlib import Path

from PIL import Image

from shardsmith.format.example import EXAMPLE_KEYS, example_class
from shardsmith.images.load_images import ImageInfo
from shardsmith.rows import ManifestRow
from shardsmith.shard_writer.encode import encode_image_example


def _jpeg(size=(20, 10), colour=(200, 30, 90)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "JPEG")
    return out.getvalue()


def _row(uri="img/cat/ä 1.jpg", label="chat noir ✓", label_id=2) -> ManifestRow:
    return ManifestRow("/data/m.csv", 0, 7, uri, "/data/" + uri, "train", label, 1234, label_id)


def _spec(tf):
    dtypes = {"bytes": tf.string, "int64": tf.int64}
    return {key: tf.io.FixedLenFeature([], dtypes[kind]) for key, kind in EXAMPLE_KEYS.items()}


def test_example_parses_with_the_declared_keys_and_round_trips(tf):
    data = _jpeg()
    row = _row()
    serialized = encode_image_example(row, data, ImageInfo("jpeg", 10, 20, 3))
    parsed = {k: v.numpy() for k, v in tf.io.parse_single_example(serialized, _spec(tf)).items()}
    assert parsed == {
        "image/encoded": data,
        "image/format": b"jpeg",
        "image/height": 10,
        "image/width": 20,
        "image/channels": 3,
        "image/class/label": 2,
        "image/class/text": row.label.encode(),
        "image/filename": row.uri.encode(),
        "image/key/sha256": hashlib.sha256(data).hexdigest().encode(),
    }
    # The bytes stored are the original file, which decodes to the recorded shape.
    decoded = tf.io.decode_image(parsed["image/encoded"], expand_animations=False)
    assert tuple(decoded.shape) == (10, 20, 3)


def test_example_has_exactly_the_declared_features_with_their_types(tf):
    serialized = encode_image_example(_row(), _jpeg(), ImageInfo("jpeg", 10, 20, 3))
    example = tf.train.Example.FromString(serialized)
    features = example.features.feature
    assert set(features) == set(EXAMPLE_KEYS)
    for key, kind in EXAMPLE_KEYS.items():
        assert features[key].WhichOneof("kind") == f"{kind}_list"
        assert len(getattr(features[key], f"{kind}_list").value) == 1


def test_bytes_equal_tensorflows_own_deterministic_serialization(tf):
    data = _jpeg()
    row = _row()
    info = ImageInfo("jpeg", 10, 20, 3)
    ours = encode_image_example(row, data, info)
    values = {
        "image/encoded": data, "image/format": b"jpeg", "image/height": 10, "image/width": 20,
        "image/channels": 3, "image/class/label": 2, "image/class/text": row.label.encode(),
        "image/filename": row.uri.encode(), "image/key/sha256": hashlib.sha256(data).hexdigest().encode(),
    }
    example = tf.train.Example()
    for key in sorted(values):
        value = values[key]
        if isinstance(value, bytes):
            example.features.feature[key].bytes_list.value.append(value)
        else:
            example.features.feature[key].int64_list.value.append(value)
    assert ours == example.SerializeToString(deterministic=True)


def test_given_sha256_is_used_instead_of_hashing(tf):
    data = _jpeg()
    serialized = encode_image_example(_row(), data, ImageInfo("jpeg", 10, 20, 3), sha256_hex="ab" * 32)
    parsed = tf.io.parse_single_example(serialized, _spec(tf))
    assert parsed["image/key/sha256"].numpy() == b"ab" * 32


def test_negative_and_large_int64_values_round_trip(tf):
    serialized = encode_image_example(_row(label_id=-1), b"\x00\xff", ImageInfo("png", 70_000, 2**33, 4))
    parsed = tf.io.parse_single_example(serialized, _spec(tf))
    assert parsed["image/class/label"].numpy() == -1
    assert parsed["image/height"].numpy() == 70_000
    assert parsed["image/width"].numpy() == 2**33
    assert parsed["image/encoded"].numpy() == b"\x00\xff"


def test_serialization_is_deterministic_and_depends_on_every_input():
    data = _jpeg()
    info = ImageInfo("jpeg", 10, 20, 3)
    first = encode_image_example(_row(), data, info)
    assert encode_image_example(_row(), bytes(data), info) == first
    example_class.cache_clear()  # a freshly built message class writes the same bytes
    assert encode_image_example(_row(), data, info) == first
    different = [
        encode_image_example(_row(label_id=3), data, info),
        encode_image_example(_row(label="dog"), data, info),
        encode_image_example(_row(uri="img/x.jpg"), data, info),
        encode_image_example(_row(), data, ImageInfo("jpeg", 10, 20, 1)),
        encode_image_example(_row(), _jpeg(colour=(0, 0, 0)), info),
    ]
    assert all(d != first for d in different)
    assert len(set(different)) == len(different)


def test_serialization_is_the_same_in_another_process():
    """Map order differs between processes unless serialization sorts it: compare with a fresh interpreter
    (with another hash seed)."""
    code = (
        "import sys, hashlib\n"
        "from shardsmith.shard_writer.encode import encode_image_example\n"
        "from shardsmith.images.load_images import ImageInfo\n"
        "from shardsmith.rows import ManifestRow\n"
        "row = ManifestRow('/data/m.csv', 0, 7, 'a.jpg', '/data/a.jpg', 'train', 'cat', 1, 2)\n"
        "out = encode_image_example(row, b'\\xff\\xd8 bytes', ImageInfo('jpeg', 10, 20, 3))\n"
        "sys.stdout.write(hashlib.sha256(out).hexdigest())\n"
    )
    root = Path(__file__).resolve().parents[3]
    result = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                            env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"}, check=True)
    row = ManifestRow("/data/m.csv", 0, 7, "a.jpg", "/data/a.jpg", "train", "cat", 1, 2)
    here = encode_image_example(row, b"\xff\xd8 bytes", ImageInfo("jpeg", 10, 20, 3))
    assert result.stdout == hashlib.sha256(here).hexdigest()
