"""The input forms a user brings, built end to end: folders, JSONL, globs of manifests, TFRecorder's data."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from pathlib import Path


def all_records(read_records, out, splits=("train", "validation", "test")):
    return {split: [r for shard in read_records(out, split) for r in shard] for split in splits}


def test_tfrecorder_folder_layout_builds_unchanged(tfrecorder_data, shardsmith, tmp_path, read_records, metadata_of):
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", tfrecorder_data / "images", "--output_dir", out, "--name", "pets")
    assert result.code == 0, result.err
    records = all_records(read_records, out)
    for split in ("train", "validation", "test"):
        assert sorted(r["image/class/text"] for r in records[split]) == ["cat", "goat"]
        for r in records[split]:
            file_name = r["image/filename"].split("/")[-1]
            path = tfrecorder_data / "images" / split.upper() / r["image/class/text"] / file_name
            assert r["image/encoded"] == path.read_bytes()
    assert metadata_of(out)["labels"] == ["cat", "goat"]


def test_tfrecorder_csv_builds_with_a_path_map(tfrecorder_data, shardsmith, tmp_path, read_records):
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", tfrecorder_data / "data.csv", "--output_dir", out, "--name", "pets",
                        "--path_map", f"tfrecorder/test_data/images={tfrecorder_data / 'images'}")
    assert result.code == 0, result.err
    records = all_records(read_records, out)
    assert {s: len(r) for s, r in records.items()} == {"train": 2, "validation": 2, "test": 2}
    for r in records["train"]:
        # image/filename keeps the URI as written in the manifest.
        assert r["image/filename"].startswith("tfrecorder/test_data/images/TRAIN/")
        relative = r["image/filename"].removeprefix("tfrecorder/test_data/images/")
        assert r["image/key/sha256"] == hashlib.sha256((tfrecorder_data / "images" / relative).read_bytes()).hexdigest()


def test_tfrecorder_csv_without_the_map_reports_every_missing_file(tfrecorder_data, shardsmith, tmp_path):
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", tfrecorder_data / "data.csv", "--output_dir", out, "--name", "pets")
    assert result.code == 1
    errors_file = Path(result.err.strip().splitlines()[-1].rsplit("see ", 1)[1])  # the unpublished build's
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    assert len(errors) == 6 and {e["reason"] for e in errors} == {"file not found"}


def test_folder_of_class_folders_assigns_splits_by_hash(tmp_path, image_set_factory, shardsmith, read_records,
                                                        metadata_of):
    images = image_set_factory(tmp_path / "src", {"ant": {"x": 30}, "bee": {"x": 30}})
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", images.root / "img", "--output_dir", out, "--name", "bugs",
                        "--split_ratios", "0.5,0.25,0.25")
    assert result.code == 0, result.err
    metadata = metadata_of(out)
    sizes = {s: info["num_examples"] for s, info in metadata["splits"].items()}
    assert sum(sizes.values()) == 60
    assert 18 <= sizes["train"] <= 42 and sizes["validation"] > 0 and sizes["test"] > 0
    labels = Counter(r["image/class/text"] for shard in read_records(out, "train") for r in shard)
    assert set(labels) == {"ant", "bee"}


def test_jsonl_and_headerless_csv_in_one_glob(tmp_path, image_set_factory, shardsmith, read_records):
    images = image_set_factory(tmp_path, {"ant": {"train": 6, "test": 2}, "bee": {"train": 6, "test": 2}})
    rows = images.rows
    (tmp_path / "part-1.csv").write_text("".join(f"{s.upper()},{u},{lab}\r\n" for s, u, lab in rows[:8]))
    (tmp_path / "part-2.jsonl").write_text(
        "".join(json.dumps({"split": s, "image_uri": u, "label": lab}) + "\n" for s, u, lab in rows[8:])
    )
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", tmp_path / "part-*", "--output_dir", out, "--name", "bugs",
                        "--num_shards", "2")
    assert result.code == 0, result.err
    records = all_records(read_records, out, ("train", "test"))
    assert sorted(r["image/filename"] for r in records["train"] + records["test"]) == sorted(u for _, u, _ in rows)
    assert Counter(r["image/class/text"] for r in records["test"]) == {"ant": 2, "bee": 2}


def test_custom_column_names(tmp_path, image_set_factory, shardsmith, read_records):
    images = image_set_factory(tmp_path, {"ant": {"train": 3}, "bee": {"train": 3}})
    (tmp_path / "custom.csv").write_text(
        "\ufeffpath,class,fold\n" + "".join(f'"{u}",{lab},{s}\n' for s, u, lab in images.rows)
    )
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", tmp_path / "custom.csv", "--output_dir", out, "--name", "bugs",
                        "--uri_column", "path", "--label_column", "class", "--split_column", "fold")
    assert result.code == 0, result.err
    assert len(all_records(read_records, out, ("train",))["train"]) == 6


def test_a_class_folder_whose_every_image_fails_is_named_and_its_errors_name_the_image_files(
        tmp_path, image_set_factory, shardsmith, metadata_of):
    """Ids are given before the shard writer decodes an image: a class whose every image fails to decode keeps
    its id (labels.txt, metadata) with no records, and the summary says so instead of counting it silently. A
    folder's error names its image file, not a "line" of the folder."""
    images = image_set_factory(tmp_path / "src", {"ant": {"x": 8}, "bee": {"x": 8}})
    broken = images.root / "img" / "cicada"
    broken.mkdir()
    for i in range(3):
        (broken / f"{i}.jpg").write_bytes(b"not an image" * 20)
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", images.root / "img", "--output_dir", out, "--name", "bugs",
                        "--max_error_fraction", "0.5", "--split_ratios", "1,0,0")
    assert result.code == 0, result.err
    metadata = metadata_of(out)
    assert metadata["labels"] == ["ant", "bee", "cicada"]
    assert "3 labels, 1 without records (cicada))" in result.out
    assert f"e.g. {images.root / 'img'}/cicada/0.jpg" in result.out
    assert " line " not in result.out
