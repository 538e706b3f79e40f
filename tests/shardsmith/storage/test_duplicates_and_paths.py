"""Identical images inside and across splits (--on_duplicate), and where a manifest may point
(--allowed_prefixes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from shardsmith.output_folder.layout import published_dir


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


def _errors_of(out) -> list[dict]:
    return [json.loads(line) for line in (Path(published_dir(out)) / "errors.jsonl").read_text().splitlines()]


def test_allowed_prefixes_cannot_be_left_through_symlinks(tmp_path, image_set_factory, shardsmith, metadata_of,
                                                          read_records):
    """A symlink inside the allowed folder to a file outside it is an error row, and the row says the same
    whether the target is an image, another file or missing. A symlink to a file inside stays allowed."""
    images = image_set_factory(tmp_path / "data", {"a": {"train": 5}, "b": {"train": 5}})
    img = tmp_path / "data" / "img"
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    shutil.copy(images.path_of(images.rows[0][1]), outside / "secret.jpg")
    (outside / "notes.txt").write_text("not an image\n")
    (img / "a" / "to_image.jpg").symlink_to(outside / "secret.jpg")
    (img / "a" / "to_text.jpg").symlink_to(outside / "notes.txt")
    (img / "a" / "to_nothing.jpg").symlink_to(outside / "missing.jpg")
    (img / "a" / "to_folder").symlink_to(outside / "sub")
    (img / "b" / "to_inside.jpg").symlink_to(images.path_of(images.rows[1][1]))
    escapes = ["img/a/to_image.jpg", "img/a/to_text.jpg", "img/a/to_nothing.jpg",
               f"{img}/a/to_folder/../secret.jpg"]  # `..` after a symlink climbs from its target, as open() does
    with images.manifest.open("a") as f:
        f.writelines(f"train,{uri},a\n" for uri in escapes)
        f.write("train,img/b/to_inside.jpg,b\n")
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "d",
                        "--allowed_prefixes", str(img), "--max_error_fraction", "0.5")
    assert result.code == 0, result.err
    errors = _errors_of(out)
    assert [e["uri"] for e in errors] == escapes
    for error in errors:  # nothing about the target: the same reason, and the path as the manifest resolves it
        assert error["reason"] == "image URI is outside --allowed_prefixes"
        assert error["stage"] == "manifest"
        expected = error["uri"] if error["uri"].startswith("/") else str(tmp_path / "data" / error["uri"])
        assert error["detail"] == expected
    assert metadata_of(out)["num_examples"] == 11
    written = {r["image/filename"] for shard in read_records(out, "train") for r in shard}
    assert "img/b/to_inside.jpg" in written and not written & set(escapes)


def test_allowed_prefixes_check_class_folders_by_real_path(tmp_path, image_set_factory, shardsmith, metadata_of):
    images = image_set_factory(tmp_path / "data", {"a": {"train": 4}, "b": {"train": 4}})
    classes = tmp_path / "data" / "img"
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(images.path_of(images.rows[0][1]), outside / "secret.jpg")
    (classes / "b" / "secret.jpg").symlink_to(outside / "secret.jpg")
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", classes, "--output_dir", out, "--name", "d",
                        "--allowed_prefixes", str(classes), "--max_error_fraction", "0.5")
    assert result.code == 0, result.err
    errors = _errors_of(out)
    assert [(e["uri"], e["reason"]) for e in errors] == [("b/secret.jpg", "image URI is outside --allowed_prefixes")]
    assert metadata_of(out)["num_examples"] == 8


def test_allowed_prefix_under_a_symlinked_folder_still_matches(tmp_path, image_set_factory, shardsmith,
                                                              metadata_of):
    """The prefix is given through a symlink (as /tmp is on some systems); the images' real paths are under it."""
    images = image_set_factory(tmp_path / "data", {"a": {"train": 4}, "b": {"train": 4}})
    (tmp_path / "alias").symlink_to(tmp_path / "data")
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "d",
                        "--allowed_prefixes", str(tmp_path / "alias" / "img"))
    assert result.code == 0, result.err
    assert metadata_of(out)["num_examples"] == 8


def test_relative_manifest_with_allowed_prefixes(tmp_path, image_set_factory, shardsmith, metadata_of,
                                                 monkeypatch):
    """A manifest named relative to the working directory: its relative image paths are checked as the
    absolute paths they are."""
    image_set_factory(tmp_path / "data", {"a": {"train": 4}, "b": {"train": 4}})
    monkeypatch.chdir(tmp_path / "data")
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", "manifest.csv", "--output_dir", out, "--name", "d",
                        "--allowed_prefixes", str(tmp_path / "data" / "img"))
    assert result.code == 0, result.err
    assert metadata_of(out)["num_examples"] == 8
    assert metadata_of(out)["options"]["manifests"] == [str(tmp_path / "data" / "manifest.csv")]


def test_copies_groups_by_the_whole_hash_when_hashes_share_their_first_64_bits():
    """The summary's grouping keeps only digests whose hash's first 64 bits repeat before grouping by the whole
    hash: over sealed batches (as the GroupByKey hands them), it finds the same groups as grouping every digest."""
    import random

    from shardsmith.rows import ImageDigest, ImageDigests, SealedBatch
    from transforms.duplicates import _copies

    rng = random.Random(5)
    prefix = "ab" * 8
    hashes = [prefix + f"{i:048x}" for i in range(6)] + [f"{rng.getrandbits(256):064x}" for _ in range(300)]
    digests = [ImageDigest(rng.choice(hashes[:4] + hashes[6:]), rng.choice(["train", "test"]), f"img/{n}.jpg", 0, n)
               for n in range(400)]
    batches = [SealedBatch.of(ImageDigests(digests[i:i + 64])) for i in range(0, len(digests), 64)]
    expected = {}
    for digest in digests:
        expected.setdefault(digest.sha256, []).append(digest)
    want = sorted(sorted((d.split, d.uri) for d in group) for group in expected.values() if len(group) > 1)
    got = sorted(sorted((d.split, d.uri) for d in group) for group in _copies((0, batches)))
    assert got == want and any(group[0].sha256.startswith(prefix) for group in _copies((0, batches)))
    assert len({tuple(g) for g in got}) == len(got) > 4
