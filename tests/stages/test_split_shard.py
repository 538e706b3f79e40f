"""A shard written in parts by several writers and joined (shardsmith/shard_writer/split_shard.py) is the shard one
writer writes whole: the same bytes, index file, row list and outcome, whichever rows each part rejects; a part file
changed before the join stops it with nothing renamed; a build whose last shard is split publishes the same folder as a
build written in one process."""

from __future__ import annotations

import errno
import io
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import google_crc32c
import pytest
from PIL import Image

from shardsmith.fault_injection import FAULT_ENV
from shardsmith.format.file_checksum import crc32c_of_joined
from shardsmith.format.naming import BUILDS_DIR, NAMES_ITS_BUILD, TEMP_PREFIX
from shardsmith.output_folder.layout import published_dir
from shardsmith.rows import ManifestRow, PlacedRow, RowBatch, SealedBatch
from shardsmith.settings import RecordSettings
from shardsmith.shard_writer.shard_file import write_shard_file
from shardsmith.shard_writer.split_shard import (
    MIN_ROWS_PER_PART,
    SplitShardError,
    cut,
    join_parts,
    num_parts,
    write_part,
)
from shardsmith.shard_writer.writer_config import UnlockedFolder, WriterConfig
from tests.conftest import write_manifest

NUM_ROWS = 70


def _jpeg(seed: int) -> bytes:
    rng = random.Random(seed)
    image = Image.new("RGB", (rng.randrange(8, 40), rng.randrange(8, 40)), tuple(rng.randrange(256) for _ in range(3)))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=90)
    return out.getvalue()


def _rows(root: Path, broken: set[int]) -> list[PlacedRow]:
    """NUM_ROWS rows of one shard, in record order; those in `broken` are not images (rejected as loaded)."""
    rows = []
    for i in range(NUM_ROWS):
        path = root / "img" / f"{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not an image" if i in broken else _jpeg(i))
        label = ("cat", "dog")[i % 2]
        row = ManifestRow(str(root / "m.csv"), 0, i + 2, f"img/{i:03d}.jpg", str(path), "train", label,
                          path.stat().st_size, i % 2)
        rows.append(PlacedRow(row, 0, 1, (i, 0, i + 2)))
    return rows


def _config(out: Path) -> WriterConfig:
    out.mkdir(parents=True, exist_ok=True)
    return WriterConfig(UnlockedFolder(str(out)), "pets", RecordSettings(validate="header"), list_rows=True)


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("parts", [2, 3])
@pytest.mark.parametrize("broken", [set(), {3, 40, 69}, set(range(36))], ids=["none", "some", "first-part"])
def test_a_shard_written_in_parts_is_the_shard_written_whole(tmp_path, parts, broken):
    rows = _rows(tmp_path, broken)
    whole = write_shard_file(_config(tmp_path / "whole"), "train", 0, [rows[::-1]])
    shuffled = random.Random(1).sample(rows, len(rows))  # cut() puts them in record order first
    written = [write_part(_config(tmp_path / "parts"), "train", 0, part)
               for part in cut([SealedBatch.of(RowBatch(shuffled))], parts)]
    joined = join_parts(_config(tmp_path / "parts"), written)

    assert _files(tmp_path / "parts") == _files(tmp_path / "whole")  # shard, index file and row list
    assert joined.result == whole.result
    assert (joined.errors, joined.digests, joined.image_sizes) == (whole.errors, whole.digests, whole.image_sizes)
    assert len(joined.errors) == len(broken)
    assert not [name for name in os.listdir(tmp_path / "parts") if name.startswith(TEMP_PREFIX)]


def test_a_part_file_changed_before_the_join_stops_it_and_nothing_is_renamed(tmp_path):
    config = _config(tmp_path / "out")
    first, second = (write_part(config, "train", 0, part)
                     for part in cut([SealedBatch.of(RowBatch(_rows(tmp_path, set())))], 2))
    with open(second.temp_path, "ab") as f:
        f.write(b"x")
    with pytest.raises(SplitShardError, match="another process changed it"):
        join_parts(config, [first, second])
    assert not [p for p in (tmp_path / "out").iterdir() if p.is_file()]  # no shard, index file or temporary file


def test_parts_are_joined_by_plain_reads_and_writes_where_the_kernel_cannot_copy(tmp_path, monkeypatch):
    rows = _rows(tmp_path, set())
    whole = write_shard_file(_config(tmp_path / "whole"), "train", 0, [rows])
    written = [write_part(_config(tmp_path / "parts"), "train", 0, part)
               for part in cut([SealedBatch.of(RowBatch(rows))], 2)]

    def cannot_copy(*args):
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "copy_file_range", cannot_copy, raising=False)
    joined = join_parts(_config(tmp_path / "parts"), written)
    assert _files(tmp_path / "parts") == _files(tmp_path / "whole")
    assert joined.result == whole.result


def test_a_shard_is_cut_into_one_part_per_writer_only_where_it_can_be_joined(tmp_path):
    config = WriterConfig(UnlockedFolder(str(tmp_path)), "pets")
    assert num_parts(config, 2000, 2) == 2
    assert num_parts(config, 2000, 16) == 16
    assert num_parts(config, 3 * MIN_ROWS_PER_PART, 16) == 3  # each part holds at least MIN_ROWS_PER_PART rows
    assert num_parts(config, 2 * MIN_ROWS_PER_PART - 1, 2) == 1
    assert num_parts(config, 2000, 1) == 1
    gzip = RecordSettings(compression="gzip")
    assert num_parts(WriterConfig(UnlockedFolder(str(tmp_path)), "pets", gzip), 2000, 2) == 1
    remote = WriterConfig(UnlockedFolder("gs://bucket/out"), "pets")
    assert num_parts(remote, 2000, 2) == 1  # an object cannot be appended to


def test_the_joined_checksum_is_the_checksum_of_the_joined_bytes():
    rng = random.Random(3)
    for first_length, second_length in [(0, 0), (0, 5), (7, 0), (1000, 12345), (3 << 20, (1 << 20) + 5)]:
        first, second = rng.randbytes(first_length), rng.randbytes(second_length)
        joined = crc32c_of_joined(google_crc32c.value(first), google_crc32c.value(second), second_length)
        assert joined == google_crc32c.value(first + second)


@pytest.mark.parametrize("writers", ["2", "3"])
def test_a_build_whose_last_shard_is_split_publishes_what_one_process_writes(label_sorted_set, shardsmith, tmp_path,
                                                                             writers):
    """Train rows only, one shard: the build's one shard is its last, cut into one part per writer process."""
    manifest = _train_only(label_sorted_set, tmp_path / "data")
    folders = {}
    for how in ("0", writers):
        out = tmp_path / f"out-{how}"
        result = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "pets", "--num_shards",
                            "1", "--writer_processes", how, "--incremental")
        assert result.code == 0, result.err
        folders[how] = {name: data for name, data in _files(Path(published_dir(out))).items()
                        if name not in NAMES_ITS_BUILD}  # the build's id and times
        assert not [name for name in folders[how] if Path(name).name.startswith(TEMP_PREFIX)]
    assert any(name.startswith("rows/") for name in folders["0"])  # --incremental: each shard's row list too
    assert folders[writers] == folders["0"]


def _train_only(label_sorted_set, folder: Path) -> Path:
    """A manifest of the set's training rows only, beside a link to its images: built with --num_shards 1, its one
    shard is the build's last, cut into one part per writer process."""
    folder.mkdir(parents=True, exist_ok=True)
    manifest = write_manifest(folder / "train.csv", [row for row in label_sorted_set.rows if row[0] == "train"])
    (folder / "img").symlink_to(label_sorted_set.root / "img")
    return manifest


@pytest.mark.parametrize("fault", ["mid_shard:40", "after_shards:1"])
def test_a_build_killed_while_its_last_shard_is_written_in_parts_or_joined_is_taken_over_by_the_next(
        label_sorted_set, tmp_path, fault):
    """Killed (SIGKILL) 40 records into a part, or once the joined shard is renamed (in the launcher, which joins):
    the rerun publishes what an undisturbed build does and no temporary file is left."""
    manifest = _train_only(label_sorted_set, tmp_path / "data")
    args = [sys.executable, "-m", "pipeline", "build", "--manifest", str(manifest), "--name", "pets",
            "--num_shards", "1", "--writer_processes", "2"]
    env = {key: value for key, value in os.environ.items() if key != FAULT_ENV}
    undisturbed = subprocess.run([*args, "--output_dir", str(tmp_path / "undisturbed")], env=env,
                                 capture_output=True, text=True, timeout=300)
    assert undisturbed.returncode == 0, undisturbed.stderr[-2000:]
    out = tmp_path / "out"
    killed = subprocess.run([*args, "--output_dir", str(out)], env={**env, FAULT_ENV: fault}, capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert not (out / "metadata.json").exists()
    rerun = subprocess.run([*args, "--output_dir", str(out)], env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-2000:]

    assert len(list((out / BUILDS_DIR).iterdir())) == 1, "the killed build's folder was removed"
    published = _files(Path(published_dir(out)))
    assert not [name for name in published if Path(name).name.startswith(TEMP_PREFIX)]
    expected = _files(Path(published_dir(tmp_path / "undisturbed")))
    for files in (published, expected):
        for name in NAMES_ITS_BUILD:  # the build's id and times
            del files[name]
    assert published == expected
