"""`shardsmith compact` (issue 28 item 5): a version of several generations is rewritten, from its shards' own
records, into the shards a full build of the same rows writes with the same seed, shard count and label ids,
byte for byte; earlier versions stay readable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shardsmith import load, records
from shardsmith.fault_injection import FAULT_ENV
from shardsmith.format.naming import BUILDS_DIR, LOCK_FILE, METADATA_FILE
from shardsmith.format.row_list import parse_row_list

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SHARD_COUNTS = ("--num_shards", "train=3,validation=1,test=1")
BY_SIZE = ("--target_shard_mb", "0.02")  # shard counts from the images' sizes, as the row lists keep them
SPLITS = ("train", "validation", "test")


def metadata(out: Path, version: str | None = None) -> dict:
    return json.loads(((out if version is None else out / BUILDS_DIR / version) / METADATA_FILE).read_text())


def ok(shardsmith, *args):
    done = shardsmith(*args)
    assert done.code == 0, done.err + done.out
    return done


def incremental(shardsmith, csv_manifest, out: Path, day: str, rows, *extra: str, shards=SHARD_COUNTS):
    ok(shardsmith, "build", "--manifest", csv_manifest(day, rows), "--output_dir", out, "--name", "pets",
       "--incremental", *shards, *extra)


def shard_files(out: Path, version: str | None = None) -> dict[str, bytes]:
    """Each shard's and index file's bytes, by name, of a version of `out`."""
    meta = metadata(out, version)
    files = {}
    for split in meta["splits"].values():
        for shard in split["shards"]:
            folder = out / BUILDS_DIR / shard.get("build", meta["build_id"] if version is None else version)
            files[shard["file"]] = (folder / shard["file"]).read_bytes()
            if shard.get("index"):  # gzip shards have none
                files[shard["index"]] = (folder / shard["index"]).read_bytes()
    return files


def version_rows(out: Path) -> list[tuple[str, str, str]]:
    """The published version's rows, (split, uri, label), in version order (split, shard, record), read from its
    row lists."""
    meta = metadata(out)
    listed = []
    for split, info in meta["splits"].items():
        for shard in info["shards"]:
            path = out / BUILDS_DIR / shard.get("build", meta["build_id"]) / "rows" / f"{shard['file']}.jsonl"
            listed += [(split, row.uri, row.label) for row in parse_row_list(path.read_bytes(), str(path))]
    return listed


def full_build_matches(shardsmith, csv_manifest, tmp_path: Path, compacted: Path, rows, labels: list[str],
                       shards=SHARD_COUNTS) -> None:
    """A plain build of `rows` with --label_file (the labels in id order) and the same seed and shard count
    writes exactly the compacted version's shards and index files."""
    label_file = tmp_path / "labels.txt"
    label_file.write_text("".join(f"{label}\n" for label in labels))
    full = tmp_path / "full"
    ok(shardsmith, "build", "--manifest", csv_manifest("full", rows), "--output_dir", full, "--name", "pets",
       *shards, "--label_file", label_file)
    want, got = shard_files(full), shard_files(compacted)
    assert sorted(got) == sorted(want)
    assert [name for name in want if got[name] != want[name]] == []


def test_compaction_writes_the_full_builds_shards_and_keeps_earlier_versions(rows, shardsmith, csv_manifest, tmp_path):
    out = tmp_path / "out"
    day1 = rows[:60]
    day2 = day1[2:] + rows[60:75]  # 2 removed, 15 added
    day3 = day2[:20] + day2[23:] + rows[75:]  # 3 removed, 15 added
    for day, day_rows in (("d1", day1), ("d2", day2), ("d3", day3)):
        incremental(shardsmith, csv_manifest, out, day, day_rows)
    before = metadata(out)
    assert before["incremental"]["generations"] == 3
    previous, old_files = before["build_id"], shard_files(out)
    old_rows = version_rows(out)
    assert sorted(old_rows) == sorted(day3)

    assert "nothing to compact" in ok(shardsmith, "compact", out, "--compact_after", "3").out
    assert metadata(out)["build_id"] == previous
    done = ok(shardsmith, "compact", out, "--keep_builds", "4", "--compact_after", "2")
    assert "compacted version" in done.out
    meta = metadata(out)
    assert meta["build_id"] != previous
    num_old_shards = sum(len(s["shards"]) for s in before["splits"].values())
    assert meta["incremental"] == {"previous": previous, "num_carried_rows": 85, "num_added_rows": 0,
                                   "num_added_records": 0, "num_failed_again": 0, "num_removed_rows": 0,
                                   "num_removed_records": 0, "num_rewritten_shards": num_old_shards,
                                   "num_images_read": 0, "generation": 4, "generations": 1,
                                   "manifest": before["incremental"]["manifest"], "appended": False}
    assert meta["num_examples"] == meta["num_input_rows"] == 85 and meta["num_errors"] == 0
    assert [s["num_shards"] for s in meta["splits"].values()] == [3, 1, 1]
    assert all("build" not in shard for s in meta["splits"].values() for shard in s["shards"])
    folder = out / meta["build_dir"]
    assert (folder / "errors.jsonl").read_bytes() == b""
    assert (folder / "labels.txt").read_text().split() == meta["labels"]
    assert (folder / "transform_fn" / "assets" / "labels").read_text().split() == meta["labels"]
    assert (folder / "dataset_info.json").exists()  # TFDS can read a version in one generation
    # The compacted version lists its rows, so later --incremental builds and compactions work from it.
    assert sorted(version_rows(out)) == sorted(old_rows)

    full_build_matches(shardsmith, csv_manifest, tmp_path, out, old_rows, meta["labels"])

    for split in SPLITS:
        want = sorted(uri for s, uri, _ in day3 if s == split)
        assert sorted(r["image/filename"].decode() for r in records(out, split)) == want
        assert sorted(r["image/filename"].decode() for r in records(out, split, version=previous)) == want
    ds = load(out, "train", batch_size=None, shuffle_buffer=None)
    assert sum(1 for _ in ds) == int(ds.cardinality()) == sum(1 for s, _, _ in day3 if s == "train")
    assert "every check holds" in ok(shardsmith, "verify", out).out
    assert "every check holds" in ok(shardsmith, "verify", out, "--version", previous).out
    assert shard_files(out, previous) == old_files  # readers of the earlier version keep its files
    assert not (out / LOCK_FILE).exists()

    # An incremental build on the compacted version carries its rows over (its row lists are there).
    incremental(shardsmith, csv_manifest, out, "d4", day3[1:])
    assert metadata(out)["incremental"]["previous"] == meta["build_id"]
    assert metadata(out)["incremental"]["num_carried_rows"] == 84


def test_writer_processes_copy_the_same_shards_as_the_launcher(rows, shardsmith, csv_manifest, tmp_path):
    """With --writer_processes 2 the compacted shards are copied by shard writer processes (a local run's
    default for a version larger than a small build), with 0 in the launcher's own process: the same shards,
    index files and row lists, and both match a full build of the version's rows."""
    out = tmp_path / "out"
    incremental(shardsmith, csv_manifest, out, "d1", rows[:60])
    incremental(shardsmith, csv_manifest, out, "d2", rows[2:75])
    rows_before = version_rows(out)
    twin = tmp_path / "twin"
    shutil.copytree(out, twin, symlinks=True)
    ok(shardsmith, "compact", out, "--writer_processes", "0")
    done = ok(shardsmith, "compact", twin, "--writer_processes", "2")
    assert "compacted version" in done.out
    assert shard_files(twin) == shard_files(out)
    assert version_rows(twin) == version_rows(out) and sorted(version_rows(twin)) == sorted(rows_before)
    full_build_matches(shardsmith, csv_manifest, tmp_path, twin, rows_before, metadata(twin)["labels"])
    assert not (twin / LOCK_FILE).exists()


def test_compaction_keeps_label_ids_added_out_of_alphabetical_order(rows, shardsmith, csv_manifest, tmp_path):
    out = tmp_path / "out"
    no_cats = [r for r in rows if r[2] != "cat"]
    incremental(shardsmith, csv_manifest, out, "a", no_cats, shards=BY_SIZE)
    incremental(shardsmith, csv_manifest, out, "b", rows, shards=BY_SIZE)  # "cat" sorts first but is new: id 2
    assert metadata(out)["labels"] == ["dog", "emu", "cat"]
    old_rows = version_rows(out)
    damaged = tmp_path / "damaged"
    shutil.copytree(out, damaged)
    published = metadata(damaged)
    shard = published["splits"]["train"]["shards"][0]
    path = damaged / BUILDS_DIR / shard.get("build", published["build_id"]) / shard["file"]
    data = bytearray(path.read_bytes())
    data[40] ^= 0xFF  # inside the first record's data: its CRC no longer holds
    path.write_bytes(bytes(data))
    done = shardsmith("compact", damaged)
    assert done.code == 1 and "Traceback" not in done.err
    assert f"{path}: record data checksum mismatch at byte 0" in done.err
    assert metadata(damaged) == published and not (damaged / LOCK_FILE).exists()

    ok(shardsmith, "compact", out)
    meta = metadata(out)
    assert meta["labels"] == ["dog", "emu", "cat"] and meta["incremental"]["generations"] == 1
    ids = {(int(r["image/class/label"]), r["image/class/text"].decode()) for split in SPLITS
           for r in records(out, split)}
    assert ids == {(0, "dog"), (1, "emu"), (2, "cat")}
    assert meta["splits"]["train"]["num_shards"] > 1
    full_build_matches(shardsmith, csv_manifest, tmp_path, out, old_rows, ["dog", "emu", "cat"], shards=BY_SIZE)


def test_compact_usage_errors(rows, shardsmith, csv_manifest, tmp_path):
    def refused(out: Path, *extra: str) -> str:
        done = shardsmith("compact", out, *extra)
        assert done.code == 2, done.err + done.out
        assert len(done.err.strip().splitlines()) == 1 and "Traceback" not in done.err
        return done.err

    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no published dataset" in refused(empty)
    plain = tmp_path / "plain"
    ok(shardsmith, "build", "--manifest", csv_manifest("m", rows[:30]), "--output_dir", plain, "--name", "pets")
    assert "is in one generation already: nothing to compact" in refused(plain)
    one = tmp_path / "one"
    incremental(shardsmith, csv_manifest, one, "m1", rows[:30])
    before = sorted(p.name for p in (one / BUILDS_DIR).iterdir())
    assert "in one generation already: nothing to compact" in refused(one)
    assert sorted(p.name for p in (one / BUILDS_DIR).iterdir()) == before  # nothing was written
    assert not (one / LOCK_FILE).exists()
    assert "unknown flag --num_shards" in refused(one, "--num_shards", "2")
    assert "--compact_after must be at least 1" in refused(one, "--compact_after", "0")
    # With --compact_after, a version at or under K generations is no error: a scheduled DAG runs compact daily.
    assert "nothing to compact, nothing written" in ok(shardsmith, "compact", one, "--compact_after", "1").out
    assert sorted(p.name for p in (one / BUILDS_DIR).iterdir()) == before and not (one / LOCK_FILE).exists()


def test_a_killed_compaction_leaves_the_version_published_and_a_rerun_is_identical(rows, shardsmith, csv_manifest,
                                                                                   tmp_path):
    out = tmp_path / "killed"
    incremental(shardsmith, csv_manifest, out, "a", rows[:70])
    incremental(shardsmith, csv_manifest, out, "b", rows[1:])
    clean = tmp_path / "clean"
    shutil.copytree(out, clean)
    published = metadata(out)
    env = {**os.environ, FAULT_ENV: "mid_shard:5", "TF_CPP_MIN_LOG_LEVEL": "3"}
    killed = subprocess.run([sys.executable, "-m", "pipeline", "compact", str(out)], capture_output=True, text=True,
                            env=env, timeout=300)
    assert killed.returncode == -9, killed.stderr
    assert metadata(out) == published
    assert sorted(r["image/filename"].decode() for r in records(out, "train")) == sorted(
        uri for s, uri, _ in rows[1:] if s == "train")
    ok(shardsmith, "compact", out)  # takes over the dead process's lock, removes its unfinished build
    ok(shardsmith, "compact", clean)
    assert shard_files(out) == shard_files(clean)
    assert len(list((out / BUILDS_DIR).iterdir())) == len(list((clean / BUILDS_DIR).iterdir())) == 3


def test_compaction_of_gzip_shards_streams_each_once_and_matches_the_full_build(rows, shardsmith, csv_manifest,
                                                                                tmp_path):
    out = tmp_path / "out"
    gzip_shards = (*SHARD_COUNTS, "--compression", "gzip")
    incremental(shardsmith, csv_manifest, out, "g1", rows[:60], shards=gzip_shards)
    incremental(shardsmith, csv_manifest, out, "g2", rows[1:], shards=gzip_shards)
    old_rows = version_rows(out)
    ok(shardsmith, "compact", out)
    meta = metadata(out)
    assert meta["compression"] == "gzip" and meta["incremental"]["generations"] == 1
    folder = out / meta["build_dir"]
    assert all(shard["file"].endswith(".gz") for s in meta["splits"].values() for shard in s["shards"])
    assert not list(folder.rglob("*unpacked*"))  # the uncompressed copies went before the version was published
    full_build_matches(shardsmith, csv_manifest, tmp_path, out, old_rows, meta["labels"], shards=gzip_shards)
    assert "every check holds" in ok(shardsmith, "verify", out).out


def test_compaction_keeps_a_split_whose_placed_rows_all_failed_as_a_full_build_lists_it(rows, shardsmith,
                                                                                         csv_manifest, tmp_path):
    """The differential checker's seed 236: the version's test split holds only a row whose image failed at load,
    so it has no record and no row list names it. A full build of the manifest lists the split with an empty
    shard; so must the compacted version, or `records(out, "test")` refuses a split the manifest places."""
    out = tmp_path / "out"
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff\xe0 not a whole JPEG")
    day = [r for r in rows if r[0] != "test"][:30] + [("test", str(broken), rows[0][2])]
    incremental(shardsmith, csv_manifest, out, "d1", day, "--max_error_fraction", "0.5")
    incremental(shardsmith, csv_manifest, out, "d2", day[1:], "--max_error_fraction", "0.5")
    before = metadata(out)
    assert before["splits"]["test"]["num_examples"] == 0 and before["num_errors"] == 1

    ok(shardsmith, "compact", out)
    meta = metadata(out)
    assert meta["build_id"] != before["build_id"] and meta["incremental"]["generations"] == 1
    assert list(meta["splits"]) == list(before["splits"]) == ["train", "validation", "test"]
    test_split = meta["splits"]["test"]
    assert test_split["num_examples"] == 0 and test_split["num_shards"] == 1 and len(test_split["shards"]) == 1
    assert (out / meta["build_dir"] / test_split["shards"][0]["file"]).read_bytes() == b""
    assert list(records(out, "test")) == []
    assert meta["num_errors"] == 1 and meta["num_input_rows"] == len(day) - 1
    assert "every check holds" in ok(shardsmith, "verify", out).out
    full_build_matches(shardsmith, csv_manifest, tmp_path, out, version_rows(out) + [day[-1]], meta["labels"])
