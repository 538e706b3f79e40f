"""TFDS compatibility: the build writes dataset_info.json, features.json and the label names, and
`tfds.builder_from_directory` reads the shards as they are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tensorflow_datasets as tfds

from shardsmith.format.build_folder import published_dir
from shardsmith.format.metadata_schema import Metadata
from shardsmith.format.tfds import TFDS_FILE_NAMES, tfds_metadata_files


def test_the_build_wrote_exactly_what_the_generator_gives(built, metadata_of):
    files = tfds_metadata_files(Metadata.from_json(metadata_of(built)))
    assert sorted(files) == sorted(TFDS_FILE_NAMES)
    folder = Path(published_dir(built))
    for name, content in files.items():
        assert (folder / name).read_bytes() == content
    assert (folder / "image.class.label.labels.txt").read_text() == (folder / "labels.txt").read_text()


def test_builder_from_directory_reads_every_split_with_decoded_images(built, label_sorted_set, metadata_of):
    metadata = metadata_of(built)
    builder = tfds.builder_from_directory(published_dir(built))  # the published build's folder
    assert builder.info.name == "pets"
    assert {name: split.num_examples for name, split in builder.info.splits.items()} == {
        name: info["num_examples"] for name, info in metadata["splits"].items()}
    labels = (Path(published_dir(built)) / "labels.txt").read_text().split()
    assert builder.info.features["image/class/label"].names == labels
    sources = {uri: label for split, uri, label in label_sorted_set.rows if split == "train"}
    seen = []
    for example in tfds.as_numpy(builder.as_dataset(split="train")):
        uri = example["image/filename"].decode()
        seen.append(uri)
        assert metadata["labels"][example["image/class/label"]] == sources[uri]
        image = example["image/encoded"]
        assert image.dtype == np.uint8 and image.shape[2] == 3
        assert image.shape[:2] == (example["image/height"], example["image/width"])
        if len(seen) <= 40:  # compare pixels on a subset: the decode is TensorFlow's either way
            import tensorflow as tf

            expected = tf.io.decode_image(label_sorted_set.path_of(uri).read_bytes(), channels=3,
                                          expand_animations=False).numpy()
            np.testing.assert_array_equal(image, expected)
    assert sorted(seen) == sorted(sources)


def test_as_supervised_gives_image_and_label(built):
    builder = tfds.builder_from_directory(published_dir(built))  # the published build's folder
    image, label = next(iter(tfds.as_numpy(builder.as_dataset(split="test", as_supervised=True))))
    assert image.ndim == 3 and image.shape[2] == 3 and 0 <= label < 3


def test_gzip_datasets_get_no_tfds_files(built, metadata_of):
    metadata = metadata_of(built)
    metadata["compression"] = "gzip"
    assert tfds_metadata_files(Metadata.from_json(metadata)) == {}


def test_the_generator_imports_neither_tensorflow_nor_tfds(assert_imports_without):
    assert_imports_without("from shardsmith.format.tfds import tfds_metadata_files", "tensorflow",
                           "tensorflow_datasets")
