"""Every reader on an s3:// dataset, against a real local S3-protocol server (moto's server, tests/conftest.py
`s3_server`), boto3 pointed at it by the standard AWS environment: records() streamed and read at random,
load() (TensorFlow has no s3:// file system: its shards come through shardsmith.storage), PyTorch's datasets with
DataLoader worker processes, Grain's source and dataset, and `shardsmith verify`; each reads every record of the
split once, the records of a local build of the same rows."""

from __future__ import annotations

from collections import Counter

import pytest

import shardsmith

KEY = "image/key/sha256"


@pytest.fixture(scope="module")
def s3_built(s3_bucket, tmp_path_factory):
    """One build of 36 images into s3://BUCKET/out (and a gzip one into s3://BUCKET/packed); the same rows built
    into a local folder. Returns (s3 folder, gzip s3 folder, local folder)."""
    from pipeline import cli

    rows = s3_bucket.upload_images(36, seed=8)
    manifest = s3_bucket.upload_manifest("all.csv", rows)
    common = ("--manifest", manifest, "--name", "pets", "--num_shards", "train=3,validation=1,test=1")
    out, packed = f"s3://{s3_bucket.name}/out", f"s3://{s3_bucket.name}/packed"
    local = tmp_path_factory.mktemp("local") / "out"
    assert cli.main(["build", *common, "--output_dir", out]) == 0
    assert cli.main(["build", *common, "--output_dir", packed, "--compression", "gzip"]) == 0
    assert cli.main(["build", *common, "--output_dir", str(local)]) == 0
    return out, packed, str(local)


def _keys(folder: str, split: str = "train") -> Counter:
    return Counter(record[KEY] for record in shardsmith.records(folder, split))


def test_records_stream_and_read_at_random_the_local_builds_records(s3_built):
    out, packed, local = s3_built
    for split in ("train", "validation", "test"):
        assert list(shardsmith.records(out, split)) == list(shardsmith.records(local, split)), split
        assert list(shardsmith.records(packed, split)) == list(shardsmith.records(local, split)), split
    remote, here = shardsmith.records(out, "train"), shardsmith.records(local, "train")
    assert len(remote) == len(here) == 24
    for i in (23, 0, 9, 3):  # at random: a ranged request a record, through the index files
        assert remote[i] == here[i]


def test_load_reads_each_record_once_through_the_storage_layer(tf, s3_built):
    out, packed, local = s3_built
    expected = _keys(local)
    for folder in (out, packed):
        dataset = shardsmith.load(folder, "train", batch_size=4, image_size=16, features=True)
        assert dataset.cardinality().numpy() == 6  # 24 records in batches of 4: known, as from a local folder
        got = Counter(key for batch in dataset for key in batch[KEY].numpy())
        assert got == expected, folder
    images, labels = next(iter(shardsmith.load(out, "validation", batch_size=None, shuffle_buffer=0, image_size=8)))
    assert images.shape == (8, 8, 3) and labels.dtype == tf.int64


def test_pytorch_datasets_read_each_record_once_with_worker_processes(s3_built):
    pytest.importorskip("torch")
    from torch.utils.data import DataLoader

    from shardsmith.torch import ShardDataset, StreamingShardDataset

    out, _, local = s3_built
    expected = Counter({key.decode(): n for key, n in _keys(local).items()})  # text is str in shardsmith.torch
    streaming = StreamingShardDataset(out, "train", features=True, image_size=8, shuffle_buffer=8)
    got = Counter(key for batch in DataLoader(streaming, batch_size=4, num_workers=2) for key in batch[KEY])
    assert got == expected
    at_random = ShardDataset(out, "train", features=True, image_size=8)
    got = Counter(key for batch in DataLoader(at_random, batch_size=4, num_workers=2, shuffle=True)
                  for key in batch[KEY])
    assert got == expected


def test_grain_reads_each_record_once(s3_built):
    pytest.importorskip("grain")
    from shardsmith.grain import ShardSource, dataset

    out, _, local = s3_built
    source = ShardSource(out, "train", image_size=8, features=True)
    assert Counter(source[i][KEY] for i in range(len(source))) == _keys(local)
    labels = [int(label) for batch in dataset(out, "train", batch_size=5, image_size=8) for label in batch["label"]]
    assert Counter(labels) == Counter(record["image/class/label"] for record in shardsmith.records(local, "train"))


def test_verify_inspect_and_index_read_an_s3_dataset(s3_built):
    from pipeline import cli

    out, packed, _ = s3_built
    assert cli.main(["verify", out]) == 0
    assert cli.main(["verify", packed]) == 0
    assert cli.main(["inspect", out]) == 0
    assert cli.main(["index", out]) == 0


def test_a_load_iterator_on_s3_refuses_a_checkpoint_instead_of_resuming_wrong(tf, s3_built, tmp_path):
    """A shard read through the storage layer is a Python generator, whose position tf.data cannot save: saving
    the iterator (while a shard is open) or restoring it fails (FailedPreconditionError: "PyFunc is stateful"),
    where tf.data would otherwise restart the generator and give records twice."""
    out, _, _ = s3_built

    def dataset():
        return shardsmith.load(out, "train", batch_size=4, shuffle_buffer=0, image_size=16)

    iterator = iter(dataset())
    next(iterator)
    with pytest.raises(tf.errors.FailedPreconditionError, match="stateful"):
        saved = tf.train.Checkpoint(iterator=iterator).save(str(tmp_path / "step"))
        tf.train.Checkpoint(iterator=iter(dataset())).restore(saved).assert_consumed()


def test_what_tensorflow_alone_would_read_is_refused_in_one_line(s3_bucket, s3_built, shardsmith):
    """TFDS reads through TensorFlow's file systems and tf.transform (--feature) writes through them: neither has
    s3://, so each is refused in one line naming what to do instead, before a build starts."""
    from shardsmith import tfds_dirs

    out, _, _ = s3_built
    with pytest.raises(ValueError, match="no s3://; read it with shardsmith.load"):
        tfds_dirs(out)
    manifest = f"s3://{s3_bucket.name}/in/all.csv"
    result = shardsmith("build", "--manifest", manifest, "--output_dir", f"s3://{s3_bucket.name}/featured",
                        "--name", "pets", "--feature", "weight:float")
    assert result.code == 2 and "Traceback" not in result.err
    assert "tensorflow-transform writes through TensorFlow's file systems, which have no s3://" in result.err


def test_a_build_of_s3_paths_without_aws_credentials_exits_2_naming_the_fix(s3_bucket, shardsmith, monkeypatch):
    for variable in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(variable)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance role to ask on a test machine
    result = shardsmith("build", "--manifest", f"s3://{s3_bucket.name}/in/all.csv", "--output_dir",
                        f"s3://{s3_bucket.name}/nocreds", "--name", "pets")
    assert result.code == 2, result.err
    assert result.err.strip().startswith("shardsmith: error: no AWS credentials found, which s3://")
    assert "aws configure" in result.err and not s3_bucket.keys("nocreds/")


def test_load_reads_image_mode_path_images_from_s3(tf, s3_bucket, s3_built, tmp_path):
    """A build with --image_mode path stores each image's URI; load() reads s3:// ones through the storage layer
    (TensorFlow's tf.io.read_file has no s3://), the same pixels as the images stored in the records."""
    from pipeline import cli

    _, _, local = s3_built
    out = tmp_path / "paths"
    assert cli.main(["build", "--manifest", f"s3://{s3_bucket.name}/in/all.csv", "--name", "pets", "--num_shards",
                     "train=3,validation=1,test=1", "--output_dir", str(out), "--image_mode", "path"]) == 0

    def decoded(folder):
        return sorted((int(label), image.numpy().tobytes()) for image, label in shardsmith.load(
            folder, "validation", batch_size=None, shuffle_buffer=0, image_size=8))

    assert decoded(str(out)) == decoded(local) and len(decoded(local)) == 6
