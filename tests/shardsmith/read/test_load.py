"""`shardsmith.load`: a real build read back through tf.data, compared with the source image files."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from shardsmith import load
from shardsmith.output_folder.layout import published_dir


def _decode_file(path: Path, channels: int = 3) -> np.ndarray:
    import tensorflow as tf

    return tf.io.decode_image(path.read_bytes(), channels=channels, expand_animations=False).numpy()


def test_one_epoch_yields_every_record_once_with_the_source_pixels(built, label_sorted_set, metadata_of):
    metadata = metadata_of(built)
    expected = {uri: label for split, uri, label in label_sorted_set.rows if split == "train"}
    dataset = load(str(built), "train", batch_size=None, shuffle_buffer=64, features=True, seed=7)
    seen = []
    for example in dataset:
        uri = example["image/filename"].numpy().decode()
        seen.append(uri)
        label_id = int(example["image/class/label"])
        assert metadata["labels"][label_id] == expected[uri]
        source = label_sorted_set.path_of(uri)
        assert example["image/encoded"].numpy() == source.read_bytes()
        np.testing.assert_array_equal(example["image"].numpy(), _decode_file(source))
    assert sorted(seen) == sorted(expected), "every training record exactly once"
    assert len(seen) == len(set(seen)) == 225


def test_default_pipeline_shuffles_and_a_seed_repeats_the_order(built, read_records):
    file_order = [r["image/filename"] for shard in read_records(built, "train") for r in shard]

    def order(**kwargs):
        dataset = load(str(built), "train", batch_size=None, features=True, **kwargs)
        return [e["image/filename"].numpy().decode() for e in dataset]

    shuffled = order(seed=3)
    assert sorted(shuffled) == sorted(file_order)
    assert shuffled != file_order
    assert order(seed=3) == shuffled, "same seed, same order"
    assert order(seed=4) != shuffled
    unshuffled = order(shuffle_buffer=0, shuffle_files=False, cycle_length=1)
    assert unshuffled == file_order, "no shuffle and one file at a time: shard order"


def test_two_epochs_after_repeat_see_each_record_twice(built):
    dataset = load(str(built), "validation", batch_size=None, features=True).repeat(2)
    names = [e["image/filename"].numpy().decode() for e in dataset]
    assert len(names) == 2 * 31 and all(names.count(n) == 2 for n in set(names))


def test_batches_resized_to_a_fixed_size(built):
    batches = list(load(str(built), "train", batch_size=32, image_size=(40, 56), dtype="float32"))
    assert [int(b[0].shape[0]) for b in batches] == [32] * 7 + [1]
    for images, labels in batches:
        assert images.shape[1:] == (40, 56, 3) and images.dtype.name == "float32"
        assert float(images.numpy().min()) >= 0.0 and float(images.numpy().max()) <= 1.0
        assert labels.dtype.name == "int64" and set(labels.numpy()) <= {0, 1, 2}
    dropped = list(load(str(built), "train", batch_size=32, image_size=24, drop_remainder=True))
    assert len(dropped) == 7 and dropped[0][0].shape == (32, 24, 24, 3) and dropped[0][0].dtype.name == "uint8"


def test_batches_of_different_sizes_are_ragged_with_the_recorded_shapes(built):
    import tensorflow as tf

    batch = next(iter(load(str(built), "test", batch_size=8, features=True, channels=1)))
    images = batch["image"]
    assert isinstance(images, tf.RaggedTensor) and images.shape[0] == 8
    for i in range(8):
        assert images[i].to_tensor().shape == (int(batch["image/height"][i]), int(batch["image/width"][i]), 1)


def test_gzip_dataset_reads_the_same_records(built, tmp_path, gzip_copy):
    packed = gzip_copy(built, tmp_path / "gz")
    assert all(p.suffix == ".gz" for p in Path(published_dir(packed)).glob("pets-*.tfrecord-*"))
    plain = sorted(e["image/key/sha256"].numpy() for e in load(str(built), "train", None, features=True))
    unpacked = sorted(e["image/key/sha256"].numpy() for e in load(str(packed), "train", None, features=True))
    assert unpacked == plain and len(plain) == 225


def test_shards_come_from_metadata_not_from_a_glob(built, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    folder = Path(published_dir(copy))
    shutil.copy(folder / "pets-train.tfrecord-00000-of-00004", folder / "pets-train.tfrecord-00009-of-00010")
    count = sum(1 for _ in load(str(copy), "train", batch_size=None))
    assert count == 225, "a stray file matching the shard pattern is never read"


def test_unknown_split_and_missing_dataset_are_clear_errors(built, tmp_path):
    with pytest.raises(ValueError, match="split 'dev' is not in this dataset; it has train, validation, test"):
        load(str(built), "dev")
    with pytest.raises(FileNotFoundError, match="no finished shardsmith dataset"):
        load(str(tmp_path))


def test_importing_shardsmith_imports_neither_tensorflow_nor_beam(assert_imports_without):
    assert_imports_without("import shardsmith\nassert callable(shardsmith.load) and callable(shardsmith.published_dir)",
                           "tensorflow", "apache_beam")


def test_split_spellings_build_accepts_read_the_same_split(built):
    def uris(split):
        return sorted(bytes(e["image/filename"].numpy()) for e in load(str(built), split, batch_size=None,
                                                                        shuffle_buffer=0, features=True))

    validation = uris("validation")
    assert validation and uris("val") == uris("EVAL") == validation
    assert uris("training") == uris("train")
    with pytest.raises(ValueError, match="split 'unassigned' is not in this dataset; it has train, validation, test"):
        load(str(built), "unassigned")
