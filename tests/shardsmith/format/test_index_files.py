"""Index files (`<shard>.idx`, the format DALI's and the `tfrecord` package's readers take): written by the build
beside each uncompressed shard, listed in metadata.json and in the build's record, checked by `verify`, and
written afterwards for an older build by `shardsmith index`, which never touches a shard."""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
from pathlib import Path

from shardsmith.format.build_record import entry_file
from shardsmith.output_folder.layout import published_dir


def _framed_records(data: bytes) -> list[tuple[int, int]]:
    """(offset, framed length) of each record, read from the framing alone (not with shardsmith's code)."""
    found, at = [], 0
    while at < len(data):
        (length,) = struct.unpack("<Q", data[at:at + 8])
        found.append((at, 12 + length + 4))
        at += 12 + length + 4
    return found


def _shards(out: Path) -> list[dict]:
    metadata = json.loads((out / "metadata.json").read_text())
    return [shard for info in metadata["splits"].values() for shard in info["shards"]]


def test_each_shard_has_its_index_file_listed_and_owned_by_the_build(built):
    folder = Path(published_dir(built))
    shards = _shards(built)
    assert len(shards) == 8
    for shard in shards:
        assert shard["index"] == shard["file"] + ".idx"
        lines = (folder / shard["index"]).read_text().splitlines()
        assert [tuple(map(int, line.split(" "))) for line in lines] == \
            _framed_records((folder / shard["file"]).read_bytes())
        assert len(lines) == shard["num_examples"]
        assert (folder / entry_file(shard["index"])).exists(), "listed in the build's record before it was written"


def _copy(built: Path, target: Path) -> Path:
    shutil.copytree(built, target)
    return target


def test_verify_fails_on_a_wrong_or_missing_index_file(built, tmp_path, shardsmith):
    out = _copy(built, tmp_path / "out")
    folder = Path(published_dir(out))
    first, second = _shards(out)[:2]
    index = folder / first["index"]
    lines = index.read_text().splitlines()
    lines[1] = f"{int(lines[1].split()[0]) + 1} {lines[1].split()[1]}"
    index.write_text("\n".join(lines) + "\n")
    (folder / second["index"]).unlink()
    result = shardsmith("verify", out)
    assert result.code == 1
    assert f"{first['file']}: index file is not an index" in result.out
    assert f"{second['file']}: index file listed in metadata.json is missing" in result.out
    (folder / "pets-train.tfrecord-00009-of-00010.idx").write_text("")
    assert "index file in the folder belongs to no shard listed" in shardsmith("verify", out).out


def test_index_writes_the_index_files_of_an_older_build_and_never_touches_a_shard(built, tmp_path, shardsmith,
                                                                                metadata_writer):
    out = _copy(built, tmp_path / "old")
    folder = Path(published_dir(out))
    metadata = json.loads((out / "metadata.json").read_text())
    expected = {}
    for info in metadata["splits"].values():
        for shard in info["shards"]:
            expected[shard["index"]] = (folder / shard["index"]).read_bytes()
            (folder / shard["index"]).unlink()
            (folder / entry_file(shard["index"])).unlink()
            del shard["index"]  # as a build made before index files wrote it
    metadata_writer(out, metadata)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.tfrecord-*")}
    top = (out / "metadata.json").read_bytes()

    result = shardsmith("index", out)
    assert result.code == 0, result.err
    assert result.out.startswith("shardsmith index: 8 index files written, 0 already there")
    assert {name: (folder / name).read_bytes() for name in expected} == expected
    assert all((folder / entry_file(name)).exists() for name in expected), "owned by the build's record"
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.glob("*.tfrecord-*")
            if not p.name.endswith(".idx")} == before
    assert (out / "metadata.json").read_bytes() == top
    assert not (out / ".shardsmith-lock").exists(), "the lock is released"
    assert "0 index files written, 8 already there" in shardsmith("index", out).out
    assert shardsmith("verify", out).code == 0


def test_index_refuses_gzip_shards_and_a_folder_without_a_dataset(built, tmp_path, shardsmith, gzip_copy):
    packed = gzip_copy(built, tmp_path / "packed")
    result = shardsmith("index", packed)
    assert result.code == 2 and "gzip shards, which get no index files" in result.err
    assert shardsmith("index", tmp_path / "nothing").code == 2


def test_a_gzip_build_writes_no_index_file(tfrecorder_data, tmp_path, shardsmith):
    out = tmp_path / "gz"
    assert shardsmith("build", "--manifest", tfrecorder_data / "images", "--output_dir", out, "--name", "pets",
                      "--compression", "gzip").code == 0
    assert not list(Path(published_dir(out)).glob("*.idx"))
    assert all(shard["index"] is None for shard in _shards(out))
    assert shardsmith("verify", out).code == 0
