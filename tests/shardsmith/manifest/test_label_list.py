"""--label_file FILE: a fixed label list gives ids 0..N-1 in the file's order (labels.txt, metadata.json, the records
and tf.transform's mapping agree), a row with an unlisted label is an error row, a listed label no row carries
keeps its id; a bad file is a one-line usage error before Beam starts. Real builds, FnApiRunner."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from shardsmith.output_folder.layout import published_dir

# Not alphabetical; "yak" has no row (an empty class); the manifest's "fox" rows are not listed.
LABEL_FILE_TEXT = "emu\n\n  dog \ncat\nyak\n"
FILE_ORDER = ["emu", "dog", "cat", "yak"]


def _build(shardsmith, manifest: Path, out: Path, *more: str):
    return shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "zoo",
                      "--num_shards", "train=2,validation=1,test=1", *more)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory, image_set_factory):
    counts = {label: {"train": 8, "validation": 2, "test": 2} for label in ("cat", "dog", "emu")}
    counts["fox"] = {"train": 1}
    base = image_set_factory(tmp_path_factory.mktemp("zoo"), counts)
    label_file = base.root / "labels.txt"
    label_file.write_text(LABEL_FILE_TEXT)
    return base, label_file


@pytest.fixture(scope="module")
def fixed_built(zoo, tmp_path_factory):
    from pipeline import cli

    base, label_file = zoo
    out = tmp_path_factory.mktemp("fixed") / "out"
    assert cli.main(["build", "--manifest", str(base.manifest), "--output_dir", str(out), "--name", "zoo",
                     "--num_shards", "train=2,validation=1,test=1", "--label_file", str(label_file)]) == 0
    return out


def test_ids_follow_the_file_in_labels_txt_metadata_and_records(zoo, fixed_built, metadata_of, read_records):
    base, label_file = zoo
    metadata = metadata_of(fixed_built)
    assert metadata["labels"] == FILE_ORDER
    assert (Path(published_dir(fixed_built)) / "labels.txt").read_text().splitlines() == FILE_ORDER
    assert metadata["options"]["label_file"] == str(label_file)
    assert metadata["label_image_counts"] == [8, 8, 8, 0]  # training images per label; none for the empty class
    seen = {}
    for split in ("train", "validation", "test"):
        for shard in read_records(fixed_built, split):
            for record in shard:
                assert record["image/class/label"] == FILE_ORDER.index(record["image/class/text"])
                seen[record["image/filename"]] = record["image/class/text"]
    assert seen == {uri: label for _, uri, label in base.rows if label != "fox"}


def test_transform_fn_maps_each_label_to_its_file_id(fixed_built, tf):
    import tensorflow_transform as tft

    output = tft.TFTransformOutput(published_dir(fixed_built))
    assert output.vocabulary_by_name("labels") == [label.encode() for label in FILE_ORDER]
    mapped = output.transform_raw_features({"label": tf.constant([*FILE_ORDER, "fox"]),
                                            "rank_weight": tf.constant([1.0] * 5)})
    assert mapped["label_id"].numpy().tolist() == [0, 1, 2, 3, -1]


def test_a_label_not_in_the_file_is_an_error_row_counted_in_the_budget(zoo, fixed_built, metadata_of):
    base, label_file = zoo
    errors = [json.loads(line) for line in (Path(published_dir(fixed_built)) / "errors.jsonl").read_text().splitlines()]
    assert [(e["label"], e["stage"]) for e in errors] == [("fox", "label")]
    assert errors[0]["reason"] == f"label 'fox' is not in --label_file {label_file}"
    metadata = metadata_of(fixed_built)
    assert metadata["num_input_rows"] == len(base.rows) and metadata["num_errors"] == 1


def test_unlisted_labels_count_against_the_error_budget(zoo, tmp_path, shardsmith):
    base, label_file = zoo
    result = _build(shardsmith, base.manifest, tmp_path / "out", "--label_file", label_file,
                    "--max_error_fraction", "0.01")
    assert result.code == 1
    assert "max_error_fraction" in result.err and "not in --label_file" in result.out + result.err


def test_the_build_verifies(fixed_built, shardsmith):
    result = shardsmith("verify", fixed_built)
    assert result.code == 0, result.out + result.err


@pytest.mark.parametrize(("text", "message"), [
    ("cat\ndog\n cat\n", "line 3: label 'cat' is already on line 1; each label may be listed once"),
    ("\n  \n", "lists no label: write one label a line"),
    (b"cat\n\xff\xfe\n", "line 2: not UTF-8 text"),
])
def test_a_bad_label_file_is_a_usage_error_before_anything_is_written(zoo, tmp_path, shardsmith, text, message):
    base, _ = zoo
    label_file = tmp_path / "labels.txt"
    if isinstance(text, bytes):
        label_file.write_bytes(text)
    else:
        label_file.write_text(text)
    out = tmp_path / "out"
    result = _build(shardsmith, base.manifest, out, "--label_file", label_file)
    assert result.code == 2
    assert result.err.strip().splitlines() == [f"shardsmith: error: --label_file {label_file} {message}"]
    assert not out.exists()


def test_a_missing_label_file_is_a_usage_error(zoo, tmp_path, shardsmith):
    base, _ = zoo
    result = _build(shardsmith, base.manifest, tmp_path / "out", "--label_file", tmp_path / "nope.txt")
    assert result.code == 2 and f"--label_file {tmp_path / 'nope.txt'} does not exist" in result.err
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def tagged(tmp_path_factory, image_set_factory):
    """A multi_label manifest with an extra column; its labels file lists a label no row carries, first."""
    base = image_set_factory(tmp_path_factory.mktemp("tagged"), {"x": {"train": 24, "test": 6}})
    rng = random.Random(3)
    lines = ["split,image_uri,label,age"]
    expected = {}
    for split, uri, _ in base.rows:
        labels = sorted(rng.sample(["beach", "dog", "person"], 1 + rng.randrange(2)))
        expected[uri] = labels
        lines.append(f"{split},{uri},{';'.join(labels)},{rng.randrange(1, 9)}")
    manifest = base.root / "tagged.csv"
    manifest.write_text("\n".join(lines) + "\n")
    label_file = base.root / "labels.txt"
    label_file.write_text("unicorn\nperson\nbeach\ndog\n")
    return manifest, label_file, expected


def test_multi_label_with_a_feature_follows_the_file(tagged, tmp_path, shardsmith, metadata_of, read_records, tf):
    import tensorflow_transform as tft

    manifest, label_file, expected = tagged
    order = ["unicorn", "person", "beach", "dog"]
    out = tmp_path / "out"
    result = _build(shardsmith, manifest, out, "--task", "multi_label", "--feature", "age:int",
                    "--label_file", label_file)
    assert result.code == 0, result.err
    assert metadata_of(out)["labels"] == order
    seen = {}
    for split in ("train", "test"):
        for shard in read_records(out, split):
            for record in shard:
                texts = record["image/class/text"]
                assert record["image/class/label"] == [order.index(label) for label in texts]
                seen[record["image/filename"]] = sorted(texts)
    assert seen == expected
    output = tft.TFTransformOutput(published_dir(out))
    assert output.vocabulary_by_name("labels") == [label.encode() for label in order]


def test_beams_labels_flag_still_reaches_beam():
    """`--labels K=V` is Dataflow's job labels flag (`shardsmith dataflow --labels` passes it to the build): it is
    not --label_file, not even as an abbreviation, and reaches Beam unchanged."""
    from pipeline import cli
    from pipeline.options.arguments import build_options_from

    args, beam_args = cli._parser().parse_known_args(
        ["build", "--manifest", "m.csv", "--output_dir", "out", "--name", "n", "--labels=team=vision",
         "--labels", "cost=ml"])
    assert build_options_from(args).label_file is None
    assert beam_args == ["--labels=team=vision", "--labels", "cost=ml"]
