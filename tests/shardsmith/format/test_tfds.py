"""TFDS compatibility: the build writes dataset_info.json, features.json and the label names, and
`tfds.builder_from_directory` reads the shards as they are; a version spread over several build folders by
--incremental nights is read by `tfds.builder_from_directories(shardsmith.tfds_dirs(out))`."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import tensorflow_datasets as tfds

from shardsmith import tfds_dirs
from shardsmith.format.build_record import written_entries
from shardsmith.format.metadata_schema import Metadata
from shardsmith.format.naming import BUILDS_DIR, METADATA_FILE
from shardsmith.format.tfds import DATASET_INFO_FILE, PARTS_DIR, TFDS_FILE_NAMES, tfds_metadata_files
from shardsmith.output_folder.layout import published_dir


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


# Versions of several generations ------------------------------------------------------------------------------

SPLITS = ("train", "validation", "test")


@pytest.fixture
def rows(version_rows) -> list[tuple[str, str, str]]:
    """90 rows (30 per label, all three splits) with absolute URIs, in URI order."""
    return version_rows()


def night(shardsmith_cli, tmp_path: Path, out: Path, day: str, day_rows, *extra: str) -> dict:
    """An --incremental build of `day_rows` into `out`; returns the published metadata.json."""
    manifest = tmp_path / f"{day}.csv"
    with manifest.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows(day_rows)
    done = shardsmith_cli("build", "--manifest", manifest, "--output_dir", out, "--name", "pets", "--incremental",
                          "--num_shards", "train=3,validation=1,test=1", "--keep_builds", "5", *extra)
    assert done.code == 0, done.err + done.out
    return json.loads((out / METADATA_FILE).read_text())


def read_through_tfds(builder) -> dict[str, Counter]:
    """Each split's (uri, label name) pairs as TFDS yields them, counted."""
    names = builder.info.features["image/class/label"].names
    return {split: Counter((example["image/filename"].decode(), names[example["image/class/label"]])
                           for example in tfds.as_numpy(builder.as_dataset(split=split)))
            for split in SPLITS}


def expected(day_rows) -> dict[str, Counter]:
    return {split: Counter((uri, label) for s, uri, label in day_rows if s == split) for split in SPLITS}


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def test_a_version_of_three_generations_reads_every_record_once_with_builder_from_directories(
        rows, shardsmith, tmp_path):
    out = tmp_path / "out"
    day1 = rows[:60]
    day2 = day1[3:] + rows[60:75]  # 3 removed (their shards rewritten), 15 added
    day3 = day2[:20] + day2[24:] + rows[75:]  # 4 removed, 15 added
    first = night(shardsmith, tmp_path, out, "d1", day1)
    second = night(shardsmith, tmp_path, out, "d2", day2)
    earlier = {build: folder_bytes(out / BUILDS_DIR / build) for build in (first["build_id"], second["build_id"])}
    meta = night(shardsmith, tmp_path, out, "d3", day3)
    assert meta["incremental"]["generations"] == 3 and meta["incremental"]["num_rewritten_shards"] > 0
    folders = {shard.get("build") for split in meta["splits"].values() for shard in split["shards"]}
    assert folders == {first["build_id"], second["build_id"], None}, "shards in three build folders"

    dirs = tfds_dirs(out)
    own = out / meta["build_dir"]
    assert len(dirs) > 1 and all(Path(d).parent == own / PARTS_DIR for d in dirs)
    builder = tfds.builder_from_directories(dirs)
    assert builder.info.name == "pets"
    assert {split: builder.info.splits[split].num_examples for split in SPLITS} == {
        split: meta["splits"][split]["num_examples"] for split in SPLITS}
    assert read_through_tfds(builder) == expected(day3), "every record of every split once, with its label"
    image, label = next(iter(tfds.as_numpy(builder.as_dataset(split="train", as_supervised=True))))
    assert image.dtype == np.uint8 and image.shape[2] == 3 and 0 <= label < 3
    # The version before stays readable by TFDS too, from its own folder.
    assert read_through_tfds(tfds.builder_from_directories(tfds_dirs(out, second["build_id"]))) == (
        expected(day2))

    # The TFDS files lie in the new build's folder only, and its record lists each of them.
    for build, files in earlier.items():
        assert folder_bytes(out / BUILDS_DIR / build) == files, f"build {build}'s folder changed"
    tfds_files = {name for name in folder_bytes(own) if name.startswith(f"{PARTS_DIR}/")}
    assert tfds_files == set(tfds_metadata_files(Metadata.from_json(meta)))
    assert not (own / DATASET_INFO_FILE).exists(), "no one-folder description of a version that is not in one"
    listed = written_entries([str(p.relative_to(own)) for p in own.rglob("*") if p.is_file()])
    assert tfds_files <= listed
    verified = shardsmith("verify", out)
    assert verified.code == 0 and "every check holds" in verified.out, verified.out

    # Compacted into one generation: builder_from_directory reads its folder again. Retention then removes the
    # earlier builds' folders entirely, the TFDS files among them: each was listed as written.
    done = shardsmith("compact", out, "--compact_after", "1", "--keep_builds", "1", "--keep_days", "0")
    assert done.code == 0, done.err + done.out
    assert tfds_dirs(out) == [published_dir(out)]
    assert read_through_tfds(tfds.builder_from_directory(published_dir(out))) == expected(day3)
    assert sorted(p.name for p in (out / BUILDS_DIR).iterdir()) == [json.loads(
        (out / METADATA_FILE).read_text())["build_id"]]


def test_a_night_that_only_removes_rows_spreads_one_generation_over_two_folders(rows, shardsmith, tmp_path):
    out = tmp_path / "out"
    day1 = rows[:60]
    night(shardsmith, tmp_path, out, "d1", day1)
    meta = night(shardsmith, tmp_path, out, "d2", day1[2:])  # nothing added: one generation, rewritten shards
    assert meta["incremental"]["generations"] == 1
    assert len({shard.get("build") for split in meta["splits"].values() for shard in split["shards"]}) == 2
    own = out / meta["build_dir"]
    # A description of the version's own folder alone would name shards that are not there.
    assert not (own / DATASET_INFO_FILE).exists()
    assert read_through_tfds(tfds.builder_from_directories(tfds_dirs(out))) == expected(day1[2:])
    # One written there before (by an earlier shardsmith) is a problem verify names.
    (own / DATASET_INFO_FILE).write_text(json.dumps({"name": "pets"}))
    verified = shardsmith("verify", out)
    assert verified.code == 1 and "dataset_info.json" in verified.out and "shardsmith.tfds_dirs" in verified.out

    # A version of several folders made before its TFDS files were written: one line names what is missing.
    for path in sorted((own / PARTS_DIR).rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    with pytest.raises(FileNotFoundError, match=r"tfds/00000/dataset_info.json is missing: .*shardsmith compact"):
        tfds_dirs(out)


def test_the_parts_name_their_shards_relative_to_their_own_folder(built, metadata_of):
    metadata = metadata_of(built)
    train = metadata["splits"]["train"]["shards"]
    train[1]["build"] = "20200101T000000Z-00000000"  # carried from an earlier build
    metadata["incremental"] = {"generation": 2, "generations": 1}
    files = tfds_metadata_files(Metadata.from_json(metadata))
    assert all(name.startswith(f"{PARTS_DIR}/") and ".." not in name for name in files)
    infos = {name: json.loads(content) for name, content in files.items() if name.endswith(DATASET_INFO_FILE)}
    here, there = (infos[f"{PARTS_DIR}/0000{n}/{DATASET_INFO_FILE}"]["splits"] for n in (0, 1))
    assert [s["name"] for s in here] == ["train", "validation", "test"] and [s["name"] for s in there] == ["train"]
    assert here[0]["filepathTemplate"] == "../../pets-train.tfrecord-{SHARD_X_OF_Y}"
    assert there[0]["filepathTemplate"] == "../../../20200101T000000Z-00000000/pets-train.tfrecord-{SHARD_X_OF_Y}"
    lengths = [shard["num_examples"] for shard in train]
    assert here[0]["shardLengths"] == [str(lengths[0]), "0", *map(str, lengths[2:])]
    assert there[0]["shardLengths"] == ["0", str(lengths[1]), *["0"] * (len(train) - 2)]


def test_tfds_dirs_says_in_one_line_why_tfds_cannot_read_a_version(built, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    meta = json.loads((built / METADATA_FILE).read_text())
    assert tfds_dirs(built) == [published_dir(built)]
    meta["compression"] = "gzip"  # TFDS reads no gzip: the build wrote no TFDS files
    (out / METADATA_FILE).write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=r"has no TFDS files \(TFDS cannot read --compression gzip.*shardsmith.load"):
        tfds_dirs(out)
