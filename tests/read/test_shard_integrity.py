"""Each shard's SHA-256 and first record's key in metadata.json: a shard swapped in from another build of the
same size fails `verify` and `load()`, naming it; metadata written before them still reads; and a malformed
metadata.json is one line naming the file and what is wrong, never a traceback."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
import shutil
from pathlib import Path

import google_crc32c
import pytest

from shardsmith.format.example import SHA256, parse_example
from shardsmith.format.tfrecord import iter_records
from shardsmith.output_folder.layout import published_dir
from shardsmith.read.load import DatasetChanged, load
from shardsmith.rows import ManifestRow, PlacedRow
from shardsmith.settings import RecordSettings
from shardsmith.shard_writer.shard_file import write_shard_file
from shardsmith.shard_writer.writer_config import UnlockedFolder, WriterConfig


def _shard_entry(out: Path, split: str = "train", index: int = 0) -> dict:
    return json.loads((out / "metadata.json").read_text())["splits"][split]["shards"][index]


def test_metadata_records_each_shards_crc32c_and_first_key(two_builds):
    for out in two_builds:
        metadata = json.loads((out / "metadata.json").read_text())
        for info in metadata["splits"].values():
            for shard in info["shards"]:
                data = (Path(published_dir(out)) / shard["file"]).read_bytes()
                assert shard["crc32c"] == f"{google_crc32c.value(data):08x}" and "sha256" not in shard
                first = next(iter_records(io.BytesIO(data)))
                assert shard["first_key"] == parse_example(first)[SHA256][0].decode()


def test_a_shard_swapped_in_from_another_build_of_the_same_size_fails_verify_and_load(two_builds, tmp_path,
                                                                                       shardsmith):
    one, two = two_builds
    target = tmp_path / "swapped"
    shutil.copytree(one, target)
    name = _shard_entry(one)["file"]
    ours, theirs = Path(published_dir(target)) / name, Path(published_dir(two)) / name
    assert ours.stat().st_size == theirs.stat().st_size, "the size check alone cannot tell"
    assert _shard_entry(one)["first_key"] != _shard_entry(two)["first_key"], "the seeds placed other images first"
    shutil.copyfile(theirs, ours)

    result = shardsmith("verify", target)
    assert result.code == 1
    assert f"{name}: file CRC32C differs from metadata.json" in result.out
    assert f"{name} record 0: first record's {SHA256} differs from metadata.json's first_key" in result.out
    failed = [line for line in result.out.splitlines() if "FAIL " in line]
    assert len(failed) == 1 and name in failed[0], result.out
    with pytest.raises(DatasetChanged, match=f"{name}.*first record.*not the file this build wrote"):
        load(str(target), "train", batch_size=None)
    assert sum(1 for _ in load(str(target), "test", batch_size=None)) == 12, "other splits still load"


def test_a_shard_and_its_index_swapped_in_from_another_build_fail_every_reader(two_builds, tmp_path):
    # records() at random and streamed, the PyTorch readers and Grain's source all check a shard's first record
    # against metadata.json's first_key before handing any of its records out, as load() does.
    one, two = two_builds
    target = tmp_path / "swapped"
    shutil.copytree(one, target)
    name = _shard_entry(one)["file"]
    for suffix in ("", ".idx"):
        shutil.copyfile(Path(published_dir(two)) / (name + suffix), Path(published_dir(target)) / (name + suffix))
    swapped = f"{name}: its first record is image .*not the file this build wrote"
    import shardsmith
    from shardsmith.read.record_sequence import CorruptRecord

    records = shardsmith.records(target, "train")
    with pytest.raises(CorruptRecord, match=swapped):
        records[0]
    with pytest.raises(CorruptRecord, match=swapped):
        list(shardsmith.records(target, "train"))
    readers = []
    try:
        from shardsmith.torch import ShardDataset, StreamingShardDataset

        readers += [lambda: ShardDataset(target, "train")[0],
                    lambda: list(StreamingShardDataset(target, "train", shuffle=False))]
    except ImportError:  # torch is a test dependency; without it only records() and Grain are checked
        pass
    try:
        from shardsmith.grain import ShardSource

        readers.append(lambda: ShardSource(target, "train")[0])
    except ImportError:
        pass
    for read in readers:
        with pytest.raises(CorruptRecord, match=swapped):
            read()
    assert len(list(shardsmith.records(target, "test"))) == 12, "other splits still read"


def test_metadata_from_before_shard_hashes_still_verifies_and_loads(two_builds, tmp_path, shardsmith,
                                                                   metadata_writer):
    target = tmp_path / "older"
    shutil.copytree(two_builds[0], target)
    metadata = json.loads((target / "metadata.json").read_text())
    for info in metadata["splits"].values():
        for shard in info["shards"]:
            del shard["crc32c"], shard["first_key"]
    metadata_writer(target, metadata)
    result = shardsmith("verify", target)
    assert result.code == 0, result.out + result.err
    assert "3 shards have no checksum in metadata.json (built before shardsmith recorded them)" in result.out
    assert sum(1 for _ in load(str(target), "train", batch_size=None)) == 36


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_the_writer_hashes_the_file_as_written(tmp_path, compression, same_size_images):
    (tmp_path / "img").mkdir()
    manifest = same_size_images(tmp_path / "img", 2)
    lines = list(csv.reader(manifest.open()))[1:]
    labels = sorted({label for _, _, label in lines})
    rows = []
    for line, (_, uri, label) in enumerate(lines, start=2):
        rows.append(ManifestRow(str(manifest), 0, line, uri, str(tmp_path / "img" / uri), "train", label,
                                label_id=labels.index(label)))
    placed = [PlacedRow(row, 0, 1, (i, 0, row.line)) for i, row in enumerate(rows)]
    config = WriterConfig(UnlockedFolder(str(tmp_path / "out")), "same", RecordSettings(compression=compression))
    (tmp_path / "out").mkdir()
    outcome = write_shard_file(config, "train", 0, [placed])
    data = (tmp_path / "out" / outcome.result.file).read_bytes()
    assert outcome.result.crc32c == f"{google_crc32c.value(data):08x}"
    records = gzip.decompress(data) if compression == "gzip" else data
    first = parse_example(next(iter_records(io.BytesIO(records))))
    assert outcome.result.first_key == first[SHA256][0].decode() == hashlib.sha256(
        (tmp_path / "img" / rows[0].uri).read_bytes()).hexdigest()


def _one_line_error(result) -> str:
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.err, result.err
    return lines[0]


NOT_JSON = "not_json"


@pytest.mark.parametrize(("name", "edit", "message"), [
    (NOT_JSON, None,
     "metadata.json is not valid JSON (line 2 column 3): Expecting property name enclosed in double quotes"),
    ("no_splits", lambda m: m.pop("splits"), "metadata.json has no 'splits' entry"),
    ("splits_a_list", lambda m: m.update(splits=[]), "metadata.json: splits is a list, not an object"),
    ("no_shards", lambda m: m["splits"]["train"].pop("shards"), "metadata.json: splits.train has no 'shards' entry"),
    ("shard_without_file", lambda m: m["splits"]["test"]["shards"][0].pop("file"),
     "metadata.json: splits.test.shards[0] has no 'file' entry"),
    ("bytes_as_text", lambda m: m["splits"]["train"]["shards"][1].update(num_bytes="12"),
     "metadata.json: splits.train.shards[1].num_bytes is '12', not a whole number"),
    ("bad_hash", lambda m: m["splits"]["train"]["shards"][1].update(sha256="abc"),
     "metadata.json: splits.train.shards[1].sha256 is 'abc', not 64 hex digits"),
    ("features_a_list", lambda m: m.update(features=["image/encoded"]),
     "metadata.json: features is a list, not an object"),
    ("unknown_feature_kind", lambda m: m["features"].update({"image/encoded": "blob"}),
     "metadata.json: features.image/encoded is 'blob', not one of bytes, int64, float (or a _list of one)"),
])
@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_a_malformed_metadata_json_is_one_line_naming_the_file(two_builds, tmp_path, shardsmith, command, name,
                                                               edit, message):
    target = tmp_path / name
    shutil.copytree(published_dir(two_builds[0]), target)  # a build's own folder reads as a dataset by itself
    text = (target / "metadata.json").read_text()
    if name == NOT_JSON:
        text = text.replace('"name"', "name", 1)
    else:
        metadata = json.loads(text)
        edit(metadata)
        text = json.dumps(metadata, indent=2)
    (target / "metadata.json").write_text(text)
    result = shardsmith(command, target)
    assert result.code == 2
    assert _one_line_error(result) == f"shardsmith: error: {target}/{message}"
    with pytest.raises(ValueError, match=f"^{re.escape(f'{target}/{message}')}"):
        load(str(target), "train")
