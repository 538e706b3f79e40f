"""Identical images inside and across splits (--on_duplicate), and where a manifest may point
(--allowed_prefixes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from transforms.build_folder import published_dir


@pytest.fixture
def leaky_set(tmp_path, image_set_factory):
    """12 train and 4 test images per label, plus: a train image copied into test under another name (leakage)
    and a train image copied inside train."""
    images = image_set_factory(tmp_path, {"a": {"train": 12, "test": 4}, "b": {"train": 12, "test": 4}})
    train_a = [u for s, u, lab in images.rows if s == "train" and lab == "a"]
    shutil.copy(images.path_of(train_a[0]), tmp_path / "img" / "a" / "leaked_copy.jpg")
    shutil.copy(images.path_of(train_a[1]), tmp_path / "img" / "a" / "train_copy.jpg")
    ext0, ext1 = train_a[0].rsplit(".", 1)[1], train_a[1].rsplit(".", 1)[1]
    (tmp_path / "img" / "a" / "leaked_copy.jpg").rename(tmp_path / "img" / "a" / f"leaked_copy.{ext0}")
    (tmp_path / "img" / "a" / "train_copy.jpg").rename(tmp_path / "img" / "a" / f"train_copy.{ext1}")
    with images.manifest.open("a") as f:
        f.write(f"test,img/a/leaked_copy.{ext0},a\ntrain,img/a/train_copy.{ext1},a\n")
    return images, train_a[0], f"img/a/leaked_copy.{ext0}", f"img/a/train_copy.{ext1}", train_a[1]


def build(shardsmith, images, out, *extra):
    return shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "d", *extra)


def test_keep_writes_every_copy_and_reports_leakage(leaky_set, shardsmith, tmp_path, metadata_of):
    images, original, leaked, *_ = leaky_set
    out = tmp_path / "out"
    result = build(shardsmith, images, out)
    assert result.code == 0, result.err
    duplicates = metadata_of(out)["duplicates"]
    assert duplicates["num_groups"] == 2 and duplicates["num_extra_copies"] == 2
    assert duplicates["num_groups_across_splits"] == 1 and duplicates["split_pairs"] == {"test+train": 1}
    leak = next(g for g in duplicates["examples"] if len({c["split"] for c in g["copies"]}) == 2)
    assert leak["copies"] == [{"split": "train", "uri": original}, {"split": "test", "uri": leaked}]
    assert "across splits" in result.out and "leaks test data" in result.out
    assert metadata_of(out)["num_examples"] == 34


def test_drop_keeps_the_training_copy(leaky_set, shardsmith, tmp_path, metadata_of, read_records):
    images, original, leaked, train_copy, train_original = leaky_set
    out = tmp_path / "out"
    result = build(shardsmith, images, out, "--on_duplicate", "drop")
    assert result.code == 0, result.err
    metadata = metadata_of(out)
    assert metadata["num_examples"] == 32 and metadata["duplicates"]["num_groups"] == 0
    errors_file = Path(published_dir(out)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    by_uri = {e["uri"]: e for e in errors}
    assert set(by_uri) == {leaked, train_copy}
    assert by_uri[leaked]["stage"] == by_uri[train_copy]["stage"] == "duplicate"
    assert original in by_uri[leaked]["detail"] and train_original in by_uri[train_copy]["detail"]
    test_files = {r["image/filename"] for shard in read_records(out, "test") for r in shard}
    assert leaked not in test_files and len(test_files) == 8


def test_error_fails_the_job_and_names_the_copies(leaky_set, shardsmith, tmp_path):
    images, *_ = leaky_set
    out = tmp_path / "out"
    result = build(shardsmith, images, out, "--on_duplicate", "error")
    assert result.code == 1
    last = result.err.strip().splitlines()[-1]
    assert last.startswith("shardsmith check failed: 2 images occur more than once") and "--on_duplicate" in last
    assert not (out / "metadata.json").exists()


def test_allowed_prefixes_turn_outside_uris_into_error_rows(tmp_path, image_set_factory, shardsmith, metadata_of):
    images = image_set_factory(tmp_path / "data", {"a": {"train": 5}, "b": {"train": 5}})
    outside = tmp_path / "secret.jpg"
    shutil.copy(images.path_of(images.rows[0][1]), outside)
    with images.manifest.open("a") as f:
        f.write(f"train,{outside},a\ntrain,../secret.jpg,b\ntrain,img/../../secret.jpg,a\n")
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "d",
                        "--allowed_prefixes", str(tmp_path / "data" / "img"), "--max_error_fraction", "0.5")
    assert result.code == 0, result.err
    errors_file = Path(published_dir(out)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    assert len(errors) == 3
    assert all(e["reason"] == "image URI is outside --allowed_prefixes" for e in errors)
    assert metadata_of(out)["num_examples"] == 10


def test_allowed_prefixes_must_be_absolute(tmp_path, shardsmith, label_sorted_set):
    result = shardsmith("build", "--manifest", label_sorted_set.manifest, "--output_dir", tmp_path / "o",
                        "--name", "d", "--allowed_prefixes", "relative/dir")
    assert result.code == 2 and "--allowed_prefixes" in result.err
