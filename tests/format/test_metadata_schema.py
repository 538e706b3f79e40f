"""metadata.json's schema (shardsmith/format/metadata_schema/) on real files from every earlier layout
(tests/data/metadata/, README there): each parses, reads what load()/verify/inspect take, and is written back
byte for byte; keys this version does not know survive a round trip where they were."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from shardsmith.format.metadata_schema import Metadata, MetadataError, metadata_bytes, parse_metadata
from shardsmith.format.tfds import tfds_metadata_files
from shardsmith.output_folder.layout import dataset_dir, own_copy
from shardsmith.read.load import feature_spec
from shardsmith.read.summary import build_summary, inspect_report
from shardsmith.read.version_files import split_shards

LAYOUTS = Path(__file__).parents[1] / "data" / "metadata"
FILES = sorted(p for p in LAYOUTS.glob("*.json") if not p.name.endswith("-own-copy.json"))


def _parsed(path: Path) -> Metadata:
    return parse_metadata(path.read_bytes(), str(path), readable=True)


def test_there_is_a_file_of_every_layout():
    assert [p.name.split("-")[0] for p in FILES] == ["1", "2", "3", "4", "5", "6"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_layout_is_written_back_byte_for_byte(path):
    assert metadata_bytes(_parsed(path)) == path.read_bytes()


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_layout_gives_the_read_side_what_it_takes(path, tmp_path):
    metadata = _parsed(path)
    raw = json.loads(path.read_text())
    assert metadata.name == "pets" and metadata.labels == ["cat", "goat"] and metadata.num_examples == 6
    assert metadata.compression_or_default == "none" and metadata.task_or_default == "classification"
    assert list(metadata.splits) == list(raw["splits"])
    for split, shard in metadata.all_shards():
        entry = next(s for s in raw["splits"][split]["shards"] if s["file"] == shard.file)
        assert (shard.num_examples, shard.num_bytes, shard.label_counts) == (
            entry["num_examples"], entry["num_bytes"], entry["label_counts"])
        assert shard.sha256 == entry.get("sha256") and shard.crc32c == entry.get("crc32c")
        assert shard.first_key == entry.get("first_key")
    # load(): the split's files in the build's folder (the top level before builds had folders), the parse spec
    folder = dataset_dir(str(tmp_path), metadata)
    assert folder == str(tmp_path / raw["build_dir"]) if "build_dir" in raw else folder == str(tmp_path)
    shards = split_shards(str(tmp_path), metadata, "train")
    assert [s.path for s in shards] == [f"{folder}/{s['file']}" for s in raw["splits"]["train"]["shards"]]
    assert set(feature_spec(metadata)) == set(raw["features"])
    # verify compares the TFDS files with these; inspect and the build print these
    assert set(tfds_metadata_files(metadata)) == {"dataset_info.json", "features.json", "image.class.label.labels.txt"}
    report = inspect_report(str(tmp_path), metadata)
    assert "dataset 'pets': 6 examples, 2 labels, 3 shards" in report
    assert ("near dups         0 pairs" in report) == ("near_duplicates" in raw)
    summary = build_summary(metadata, str(tmp_path), "20260101T000000Z-00000000", 1.0)
    assert "  train             2 examples in 1 shard(s)" in summary and "errors            0" in summary


def test_shard_identity_is_a_sha256_in_layout_5_and_a_crc32c_since():
    for path in FILES:
        shards = [shard for _, shard in _parsed(path).all_shards()]
        assert [shard.sha256 is not None for shard in shards] == [path.name.startswith("5-")] * 3, path.name
        assert [shard.crc32c is not None for shard in shards] == [path.name.startswith("6-")] * 3, path.name


def test_a_build_folders_own_copy_is_the_published_one_less_its_id():
    published = _parsed(LAYOUTS / "4-before-shard-identity-3e64609.json")
    own_file = LAYOUTS / "4-before-shard-identity-3e64609-own-copy.json"
    own = _parsed(own_file)
    assert published.is_published and not own.is_published
    assert own_copy(published) == own  # what verify checks
    assert metadata_bytes(own_copy(published)) == own_file.read_bytes()


def _with_unknown_keys(raw: dict) -> dict:
    """`raw` with a key this version does not know in the middle of the document, a split, a shard, the
    duplicates and near-duplicates entries."""
    def inserted(entry: dict, after: str) -> dict:
        keys = list(entry)
        at = keys.index(after) + 1
        return {k: entry[k] for k in keys[:at]} | {"from_a_later_version": {"kept": [1, "two"]}} | \
            {k: entry[k] for k in keys[at:]}

    raw = inserted(raw, "seed")
    split = raw["splits"]["train"]
    split["shards"][0] = inserted(split["shards"][0], "file")
    raw["splits"]["train"] = inserted(split, "num_examples")
    raw["duplicates"] = inserted(raw["duplicates"], "num_groups")
    raw["near_duplicates"] = inserted(raw["near_duplicates"], "mode")
    return raw


def test_unknown_keys_are_kept_where_they_were():
    raw = _with_unknown_keys(json.loads((LAYOUTS / "5-current-c6339be.json").read_text()))
    data = (json.dumps(raw, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    metadata = parse_metadata(data, readable=True)
    assert metadata.extra == {"from_a_later_version": {"kept": [1, "two"]}}
    assert metadata.splits["train"].shards[0].extra == metadata.near_duplicates.extra == metadata.extra
    assert metadata_bytes(metadata) == data


def test_an_entry_set_after_reading_is_written_after_the_keys_read():
    path = LAYOUTS / "2-before-build-folders-dea4b88.json"
    published = metadata_bytes(dataclasses.replace(_parsed(path), build_id="x", build_dir="builds/x"))
    assert list(json.loads(published))[-2:] == ["build_id", "build_dir"]
    assert published.startswith(path.read_bytes()[:-3])  # everything before the closing brace, unchanged


@pytest.mark.parametrize(("edit", "message"), [
    (lambda raw: raw["splits"]["train"].update(shards="none"), "splits.train.shards is 'none', not a list"),
    (lambda raw: raw["splits"]["train"]["shards"][0].pop("file"), "splits.train.shards[0] has no 'file' entry"),
    (lambda raw: raw.update(splits=[]), "splits is a list, not an object"),
])
def test_a_broken_structure_is_one_line_naming_the_entry(edit, message):
    raw = json.loads((LAYOUTS / "5-current-c6339be.json").read_text())
    edit(raw)
    with pytest.raises(MetadataError) as error:
        parse_metadata(json.dumps(raw).encode(), "out/metadata.json")
    assert str(error.value) == f"out/metadata.json: {message}"
