"""--task multi_label: a label column holding several labels gives list-valued image/class/label and
image/class/text (in id order); each image is placed by its rarest label; load() returns multi-hot vectors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest

from shardsmith import load
from shardsmith.output_folder.layout import published_dir

LABELS = ("beach", "dog", "person", "sunset")


@pytest.fixture(scope="module")
def multi_label_set(tmp_path_factory, image_set_factory):
    """Images with 1-3 labels each; "sunset" is rare. The manifest is label-sorted, the worst case."""
    base = image_set_factory(tmp_path_factory.mktemp("multi_label"), {"x": {"train": 90, "validation": 20,
                                                                         "test": 20}})
    rng = random.Random(5)
    rows = []
    for split, uri, _ in base.rows:
        labels = sorted(rng.sample(LABELS[:3], 1 + rng.randrange(2)) + (["sunset"] if rng.random() < 0.15 else []))
        rows.append((split, uri, labels))
    rows.sort(key=lambda row: row[2])
    rows[0] = (rows[0][0], rows[0][1], ["dog", " ", "dog", "person"])  # blanks and repeats are dropped
    manifest = base.root / "multi.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{';'.join(ls)}\n" for s, u, ls in rows)
                        + "train,img/x/train_0000.jpg, ; \n")  # no label at all: an error row
    return base, manifest, {uri: sorted(set(ls) - {" "}) for _, uri, ls in rows}


@pytest.fixture(scope="module")
def multi_label_built(multi_label_set, tmp_path_factory):
    from pipeline import cli

    _, manifest, _ = multi_label_set
    out = tmp_path_factory.mktemp("multi_label_out") / "out"
    assert cli.main(["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "tags",
                     "--task", "multi_label", "--num_shards", "train=4,validation=2,test=2"]) == 0
    return out


def test_records_hold_every_label_in_id_order(multi_label_set, multi_label_built, read_records, metadata_of):
    _, _, expected = multi_label_set
    metadata = metadata_of(multi_label_built)
    assert metadata["labels"] == list(LABELS) and metadata["task"] == "multi_label"
    assert metadata["features"]["image/class/label"] == "int64_list"
    seen = {}
    for split in metadata["splits"]:
        for shard in read_records(multi_label_built, split):
            for record in shard:
                seen[record["image/filename"]] = (record["image/class/text"], record["image/class/label"])
    assert seen == {uri: (labels, [LABELS.index(label) for label in labels]) for uri, labels in expected.items()}
    errors_file = Path(published_dir(multi_label_built)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    assert [(e["line"], e["reason"]) for e in errors] == [(len(expected) + 2, "empty label")]
    assert metadata["num_input_rows"] == len(expected) + 1 == metadata["num_examples"] + metadata["num_errors"]


def test_placement_is_balanced_by_the_rarest_label_and_deterministic(multi_label_set, multi_label_built,
                                                                     read_records, metadata_of, checks,
                                                                     shardsmith, tmp_path):
    metadata = metadata_of(multi_label_built)
    counts = dict(zip(metadata["labels"], metadata["label_image_counts"], strict=True))
    assert min(counts, key=counts.get) == "sunset"
    for split in metadata["splits"]:
        shards = [[checks.placed_by(r["image/class/label"], metadata) for r in shard]
                  for shard in read_records(multi_label_built, split)]
        checks.assert_balanced(shards, split)
        assert all("sunset" not in r["image/class/text"] or placed == "sunset"
                   for shard, placed_shard in zip(read_records(multi_label_built, split), shards, strict=True)
                   for r, placed in zip(shard, placed_shard, strict=True))
    _, manifest, _ = multi_label_set
    again = tmp_path / "again"
    assert shardsmith("build", "--manifest", manifest, "--output_dir", again, "--name", "tags", "--task",
                      "multi_label", "--num_shards", "train=4,validation=2,test=2", "--writer_processes", "0").code == 0
    assert checks.shard_bytes(again) == checks.shard_bytes(multi_label_built)
    assert shardsmith("verify", multi_label_built).code == 0


def test_load_returns_multi_hot_vectors(multi_label_set, multi_label_built):
    _, _, expected = multi_label_set
    dataset = load(str(multi_label_built), "validation", batch_size=None, features=True, shuffle_buffer=0,
                   shuffle_files=False)
    for example in dataset:
        labels = expected[example["image/filename"].numpy().decode()]
        assert example["image/class/text"].numpy().tolist() == [label.encode() for label in labels]
    images, targets = next(iter(load(str(multi_label_built), "train", batch_size=16, image_size=24)))
    assert images.shape == (16, 24, 24, 3) and targets.shape == (16, len(LABELS))
    assert targets.dtype.name == "float32" and set(np.unique(targets.numpy())) <= {0.0, 1.0}
    assert (targets.numpy().sum(axis=1) >= 1).all()


def test_jsonl_lists_are_labels_too(multi_label_set, multi_label_built, shardsmith, tmp_path, checks):
    base, manifest, _ = multi_label_set
    lines = manifest.read_text().splitlines()[1:-1]
    jsonl = base.root / "multi.jsonl"
    jsonl.write_text("".join(json.dumps({"split": s, "image_uri": u, "label": ls.split(";")}) + "\n"
                             for s, u, ls in (line.split(",", 2) for line in lines)))
    out = tmp_path / "jsonl"
    assert shardsmith("build", "--manifest", jsonl, "--output_dir", out, "--name", "tags", "--task", "multi_label",
                      "--num_shards", "train=4,validation=2,test=2").code == 0
    assert checks.shard_bytes(out) == checks.shard_bytes(multi_label_built)


def test_automl_layout_with_one_label_per_column_gives_the_same_records(multi_label_set, multi_label_built,
                                                                        shardsmith, tmp_path, checks):
    base, manifest, _ = multi_label_set
    lines = manifest.read_text().splitlines()[1:-1]
    automl = base.root / "automl.csv"
    # No header, the set column in capitals, then one label per column.
    automl.write_text("".join(f"{s.upper()},{u},{ls.replace(';', ',')}\n" for s, u, ls in
                              (line.split(",", 2) for line in lines)))
    out = tmp_path / "automl"
    assert shardsmith("build", "--manifest", automl, "--output_dir", out, "--name", "tags", "--task",
                      "multi_label", "--num_shards", "train=4,validation=2,test=2").code == 0
    assert checks.shard_bytes(out) == checks.shard_bytes(multi_label_built)
