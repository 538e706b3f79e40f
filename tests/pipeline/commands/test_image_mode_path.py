"""--image_mode path: records hold each image's URI, size and shape instead of its bytes; placement is the
same as with bytes; load() reads the images by path; verify and inspect follow the URIs."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import google_crc32c
import numpy as np
import pytest

from shardsmith import load
from shardsmith.output_folder.layout import published_dir

NUM_SHARDS = "train=4,validation=2,test=2"


@pytest.fixture(scope="module")
def path_built(label_sorted_set, tmp_path_factory) -> Path:
    from pipeline import cli

    out = tmp_path_factory.mktemp("path_mode") / "out"
    code = cli.main(["build", "--manifest", str(label_sorted_set.manifest), "--output_dir", str(out),
                     "--name", "pets", "--num_shards", NUM_SHARDS, "--image_mode", "path"])
    assert code == 0
    return out


def test_records_hold_the_uri_size_and_shape_but_no_bytes(path_built, built, label_sorted_set, read_records,
                                                          metadata_of):
    metadata = metadata_of(path_built)
    assert metadata["image_mode"] == "path" and metadata["options"]["image_mode"] == "path"
    assert "image/encoded" not in metadata["features"]
    assert metadata["features"]["image/uri"] == "bytes" and metadata["features"]["image/num_bytes"] == "int64"
    source_bytes = 0
    for split in metadata["splits"]:
        for shard in read_records(path_built, split):
            for record in shard:
                source = label_sorted_set.path_of(record["image/filename"])
                data = source.read_bytes()
                source_bytes += len(data)
                assert Path(record["image/uri"]) == source.resolve()
                assert record["image/num_bytes"] == len(data)
                assert record["image/key/sha256"] == hashlib.sha256(data).hexdigest()
    def shard_bytes(out):
        return sum(s["num_bytes"] for info in metadata_of(out)["splits"].values() for s in info["shards"])

    assert shard_bytes(path_built) < shard_bytes(built) - 0.9 * source_bytes, "the image bytes are not stored"


def test_placement_is_the_same_as_with_bytes(path_built, built, read_records, metadata_of):
    assert metadata_of(path_built)["splits"].keys() == metadata_of(built)["splits"].keys()
    for split in metadata_of(built)["splits"]:
        with_bytes = [[r["image/filename"] for r in shard] for shard in read_records(built, split)]
        with_paths = [[r["image/filename"] for r in shard] for shard in read_records(path_built, split)]
        assert with_paths == with_bytes, split


def test_load_reads_each_image_by_its_path(path_built, label_sorted_set):
    import tensorflow as tf

    dataset = load(str(path_built), "train", batch_size=None, shuffle_buffer=0, shuffle_files=False,
                   features=True, channels=0)
    seen = 0
    for example in dataset:
        source = label_sorted_set.path_of(example["image/filename"].numpy().decode())
        expected = tf.io.decode_image(source.read_bytes(), expand_animations=False).numpy()
        assert np.array_equal(example["image"].numpy(), expected)
        assert example["image"].shape == (example["image/height"], example["image/width"],
                                          example["image/channels"])
        seen += 1
    assert seen == 225
    images, labels = next(iter(load(str(path_built), "train", batch_size=8, image_size=32)))
    assert images.shape == (8, 32, 32, 3) and labels.shape == (8,)


def test_verify_follows_the_uris_and_notices_a_changed_file(path_built, label_sorted_set, shardsmith, tmp_path,
                                                            metadata_writer):
    assert shardsmith("verify", path_built).code == 0
    # A copy of the dataset and its images, with one image replaced after the build.
    images = tmp_path / "images"
    shutil.copytree(label_sorted_set.root, images)
    copy = tmp_path / "copy"
    shutil.copytree(path_built, copy)
    victim = next(images.rglob("*.jpg"))
    original = label_sorted_set.root / victim.relative_to(images)
    _retarget(copy, str(label_sorted_set.root.resolve()), str(images.resolve()), metadata_writer)
    assert shardsmith("verify", copy).code == 0
    victim.write_bytes(victim.read_bytes() + b"\0")
    result = shardsmith("verify", copy)
    assert result.code == 1
    assert "the file at image/uri changed since the build" in result.out + result.err
    assert original.exists()


def _retarget(dataset: Path, old_root: str, new_root: str, write_metadata) -> None:
    """Rewrites every record's image/uri from old_root to new_root (the dataset's images moved)."""
    import json

    import tensorflow as tf

    from shardsmith.format.example import example_class
    from shardsmith.format.naming import index_file_name
    from shardsmith.format.record_index import RecordIndex
    from shardsmith.format.tfrecord import frame

    metadata = json.loads((dataset / "metadata.json").read_text())
    for info in metadata["splits"].values():
        for shard in info["shards"]:
            path = Path(published_dir(dataset)) / shard["file"]
            out, index = bytearray(), RecordIndex()
            for serialized in tf.data.TFRecordDataset(str(path)):
                example = example_class().FromString(serialized.numpy())
                uri = example.features.feature["image/uri"].bytes_list.value
                uri[0] = uri[0].decode().replace(old_root, new_root, 1).encode()
                record = example.SerializeToString(deterministic=True)
                head, tail = frame(record)
                out += head + record + tail
                index.add(len(record))
            path.write_bytes(bytes(out))
            path.with_name(index_file_name(path.name)).write_bytes(index.to_bytes())  # the records' new offsets
            shard["num_bytes"], shard["crc32c"] = len(out), f"{google_crc32c.value(bytes(out)):08x}"
        info["num_bytes"] = sum(s["num_bytes"] for s in info["shards"])
    write_metadata(dataset, metadata)
