"""End to end: a label-sorted manifest of real images, built by the CLI, read back with tf.data."""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from pathlib import Path

import pytest

from shardsmith.format.naming import NAMES_ITS_BUILD
from shardsmith.output_folder.layout import published_dir

SPLITS = ("train", "validation", "test")


def expected_by_uri(image_set):
    return {uri: (split, label) for split, uri, label in image_set.rows}


def test_every_record_holds_the_source_file_unchanged(built, label_sorted_set, read_records, metadata_of):
    import tensorflow as tf

    expected = expected_by_uri(label_sorted_set)
    seen = Counter()
    for split in SPLITS:
        for shard in read_records(built, split):
            for record in shard:
                uri = record["image/filename"]
                seen[uri] += 1
                source = label_sorted_set.path_of(uri).read_bytes()
                assert record["image/encoded"] == source
                assert record["image/key/sha256"] == hashlib.sha256(source).hexdigest()
                assert expected[uri] == (split, record["image/class/text"])
                decoded = tf.io.decode_image(record["image/encoded"], expand_animations=False)
                shape = (record["image/height"], record["image/width"], record["image/channels"])
                assert tuple(decoded.shape) == shape
                assert record["image/format"] == ("jpeg" if uri.endswith(".jpg") else "png")
    assert set(seen) == set(expected)
    assert max(seen.values()) == 1
    assert metadata_of(built)["num_examples"] == len(expected)
    assert metadata_of(built)["num_errors"] == 0


def test_label_ids_are_alphabetical_from_train_and_match_labels_txt(built, read_records, metadata_of):
    labels = (Path(published_dir(built)) / "labels.txt").read_text().splitlines()
    assert labels == ["cat", "dog", "emu"]
    assert metadata_of(built)["labels"] == labels
    for split in SPLITS:
        for shard in read_records(built, split):
            for record in shard:
                assert labels[record["image/class/label"]] == record["image/class/text"]


def test_tf_transform_output_maps_label_text_to_the_same_ids(built):
    import tensorflow as tf
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(published_dir(built))
    layer = output.transform_features_layer()
    mapped = layer({"label": tf.constant(["emu", "cat", "dog", "not-a-label"])})["label_id"].numpy().tolist()
    assert mapped == [2, 0, 1, -1]
    assert (Path(published_dir(built)) / "transformed_metadata" / "schema.pbtxt").exists()


def test_shards_are_equal_in_size_and_stratified(built, read_records, metadata_of, label_sorted_set):
    metadata = metadata_of(built)
    wanted = {"train": 4, "validation": 2, "test": 2}
    for split in SPLITS:
        shards = read_records(built, split)
        assert len(shards) == wanted[split] == metadata["splits"][split]["num_shards"]
        sizes = [len(s) for s in shards]
        assert max(sizes) - min(sizes) <= 1, sizes
        totals = Counter(label for s, _, label in label_sorted_set.rows if s == split)
        for shard, shard_meta in zip(shards, metadata["splits"][split]["shards"], strict=True):
            counts = Counter(r["image/class/text"] for r in shard)
            assert counts == Counter(shard_meta["label_counts"])
            assert shard_meta["num_examples"] == len(shard)
            assert shard_meta["num_bytes"] == (Path(published_dir(built)) / shard_meta["file"]).stat().st_size
            for label, total in totals.items():
                n = len(shards)
                assert counts[label] in (total // n, math.ceil(total / n)), (split, label, counts)


def longest_run(labels: list[str]) -> int:
    best = run = 1
    for previous, current in zip(labels, labels[1:], strict=False):
        run = run + 1 if previous == current else 1
        best = max(best, run)
    return best


def test_records_inside_a_shard_are_shuffled_not_label_sorted(built, read_records):
    for shard in read_records(built, "train"):
        labels = [r["image/class/text"] for r in shard]
        # The manifest is sorted by label: written in arrival order, a shard would hold 3 runs (~19-22 long).
        # Shuffled, the longest run of one label among 3 in ~56 records stays far shorter.
        assert longest_run(labels) <= 8, labels
        changes = sum(a != b for a, b in zip(labels, labels[1:], strict=False))
        assert changes >= len(labels) // 3, labels


def test_file_names_follow_the_tfrecord_convention(built, metadata_of):
    folder = Path(published_dir(built))
    names = sorted(p.name for p in folder.iterdir() if ".tfrecord-" in p.name)
    shards = sorted(
        [f"pets-train.tfrecord-{i:05d}-of-00004" for i in range(4)]
        + [f"pets-{s}.tfrecord-{i:05d}-of-00002" for s in ("validation", "test") for i in range(2)]
    )
    assert names == sorted(shards + [f"{shard}.idx" for shard in shards])  # each shard and its index file
    assert not [p for p in folder.iterdir() if p.name.startswith(".shardsmith-tmp-")]
    assert (folder / "errors.jsonl").read_text() == ""


@pytest.mark.parametrize("how", [
    ("--direct_running_mode=multi_processing", "--direct_num_workers=2"),  # Beam's workers write the shards
    ("--writer_processes", "0"),  # the runner's own process writes them
    ("--writer_processes", "3"),
])
def test_rerun_with_other_writers_gives_identical_bytes(built, label_sorted_set, shardsmith, tmp_path, how):
    """`built` had its shards written with the default writer processes: none, for a build this small (in the
    runner's own process, transforms/write_shards.py); `--writer_processes 3` makes three write them."""
    out = tmp_path / "rerun"
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", out, "--name", "pets",
                        "--num_shards", "train=4,validation=2,test=2", *how)
    assert result.code == 0, result.err
    # The build's own metadata.json too; only its record and card (build id, times) differ.
    first = {p.name: p.read_bytes() for p in Path(published_dir(built)).iterdir()
             if p.is_file() and p.name not in NAMES_ITS_BUILD}
    second = {p.name: p.read_bytes() for p in Path(published_dir(out)).iterdir()
              if p.is_file() and p.name not in NAMES_ITS_BUILD}
    assert sorted(first) == sorted(second)
    for name in first:
        assert first[name] == second[name], name


def test_another_seed_places_records_differently(built, label_sorted_set, shardsmith, tmp_path, read_records):
    out = tmp_path / "seed7"
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", out, "--name", "pets",
                        "--num_shards", "train=4,validation=2,test=2", "--seed", "7")
    assert result.code == 0, result.err
    order = [r["image/filename"] for shard in read_records(built, "train") for r in shard]
    order7 = [r["image/filename"] for shard in read_records(out, "train") for r in shard]
    assert sorted(order) == sorted(order7)
    assert order != order7


def test_summary_reports_counts_errors_speed_and_folder(built, label_sorted_set, shardsmith, tmp_path):
    out = tmp_path / "summary"
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", out, "--name", "pets")
    assert result.code == 0, result.err
    assert "train" in result.out and "cat 90" in result.out and "dog 60" in result.out
    assert "images/s" in result.out and str(out) in result.out
    assert "wrote train shard 1 of 1" in result.err  # the per-shard progress line


@pytest.mark.parametrize("compression", ["gzip"])
def test_gzip_compression_names_and_reads_back(label_sorted_set, shardsmith, tmp_path, read_records, compression):
    out = tmp_path / "gz"
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", out, "--name", "pets",
                        "--compression", compression, "--num_shards", "2")
    assert result.code == 0, result.err
    assert sorted(p.name for p in Path(published_dir(out)).glob("pets-train.*")) == [
        "pets-train.tfrecord-00000-of-00002.gz", "pets-train.tfrecord-00001-of-00002.gz"]
    records = [r for shard in read_records(out, "train") for r in shard]
    assert len(records) == 225


def test_shard_count_follows_target_shard_mb(label_sorted_set, shardsmith, tmp_path, metadata_of):
    out = tmp_path / "target"
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", out, "--name", "pets",
                        "--target_shard_mb", "0.2")
    assert result.code == 0, result.err
    metadata = metadata_of(out)
    for split in SPLITS:
        info = metadata["splits"][split]
        source_bytes = sum(label_sorted_set.path_of(u).stat().st_size
                           for s, u, _ in label_sorted_set.rows if s == split)
        assert info["source_bytes"] == source_bytes
        assert info["num_shards"] == max(1, math.ceil(source_bytes / (0.2 * 2**20)))
        sizes = [s["num_examples"] for s in info["shards"]]
        assert len(sizes) == info["num_shards"] and max(sizes) - min(sizes) <= 1
    assert metadata["splits"]["train"]["num_shards"] > 1
