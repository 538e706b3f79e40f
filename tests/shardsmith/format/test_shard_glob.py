"""The shard glob docs/format.md gives (`<name>-<split>.tfrecord-*-of-?????`) matches a build's shards and nothing
else, its index files included, and tf.data reads what it matches; the shorter `<name>-<split>.tfrecord-*`
matches the index files too, on which tf.data fails with DataLossError. shardsmith's readers list the files
metadata.json names and never glob: an index file beside the shards is never read as one."""

from __future__ import annotations

from pathlib import Path

import pytest

import shardsmith

ROOT = Path(__file__).resolve().parents[3]
SHARDS_ONLY = "{name}-{split}.tfrecord-*-of-?????"


def test_format_md_gives_the_glob_that_matches_shards_only():
    text = (ROOT / "docs/format.md").read_text()
    assert "`<name>-train.tfrecord-*-of-?????`" in text and "`-of-?????.gz`" in text


@pytest.mark.parametrize("split", ["train", "validation", "test"])
def test_the_documented_glob_matches_the_shards_and_tf_data_reads_them(built, split, metadata_of, files_of_build,
                                                                         tf):
    metadata = metadata_of(built)
    folder = files_of_build(built)
    listed = {shard["file"] for shard in metadata["splits"][split]["shards"]}
    assert {f"{shard}.idx" for shard in listed} <= {p.name for p in folder.iterdir()}, "index files lie beside"

    matched = sorted(folder.glob(SHARDS_ONLY.format(name=metadata["name"], split=split)))
    assert {p.name for p in matched} == listed
    records = tf.data.TFRecordDataset([str(p) for p in matched])
    assert sum(1 for _ in records) == metadata["splits"][split]["num_examples"]

    too_wide = sorted(folder.glob(f"{metadata['name']}-{split}.tfrecord-*"))
    assert any(p.suffix == ".idx" for p in too_wide)
    with pytest.raises(tf.errors.DataLossError):
        sum(1 for _ in tf.data.TFRecordDataset([str(p) for p in too_wide]))


def test_the_readers_read_the_listed_shards_not_the_index_files(built, metadata_of):
    expected = metadata_of(built)["splits"]["train"]["num_examples"]
    assert sum(1 for _ in shardsmith.load(str(built), "train", batch_size=None)) == expected
    assert len(list(shardsmith.records(built, "train"))) == expected
