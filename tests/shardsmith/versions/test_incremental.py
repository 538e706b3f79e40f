"""`--incremental` (issue 28): a scheduled build reads only the manifest's new rows, removed rows disappear for
every reader, label ids keep their meaning, versions stay readable, and retention never removes a file a kept
version lists."""

from __future__ import annotations

import csv
import hashlib
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

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class Pool:
    """A private copy of some of the session's images, and manifests of any subset of its rows."""

    def __init__(self, root: Path, rows: list[tuple[str, str, str]]):
        self.root = root
        self.rows = rows

    def manifest(self, name: str, rows: list[tuple[str, str, str]]) -> Path:
        path = self.root / f"{name}.csv"
        with path.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["split", "image_uri", "label"])
            writer.writerows(rows)
        return path


@pytest.fixture
def pool(label_sorted_set, tmp_path) -> Pool:
    """90 rows, 30 of each label, all three splits, images copied into tmp_path (tests may move them away)."""
    by_label: dict[str, list] = {}
    for row in label_sorted_set.rows:
        by_label.setdefault(row[2], []).append(row)
    rows = []
    for label_rows in by_label.values():
        picked = [r for r in label_rows if r[0] == "train"][:24]
        picked += [r for r in label_rows if r[0] == "validation"][:3] + [r for r in label_rows if r[0] == "test"][:3]
        rows += picked
    for _, uri, _ in rows:
        target = tmp_path / "pool" / uri
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(label_sorted_set.path_of(uri), target)
    return Pool(tmp_path / "pool", sorted(rows, key=lambda r: r[1]))


def build(shardsmith_cli, manifest: Path, out: Path, *extra: str):
    return shardsmith_cli("build", "--manifest", manifest, "--output_dir", out, "--name", "pets", "--incremental",
                          "--num_shards", "train=2,validation=1,test=1", *extra)


def metadata(out: Path, version: str | None = None) -> dict:
    folder = out if version is None else out / BUILDS_DIR / version
    return json.loads((folder / METADATA_FILE).read_text())


def uris(out: Path, split: str, version: str | None = None) -> list[str]:
    """The split's records' file names, read with shardsmith.records (no TensorFlow)."""
    return sorted(r["image/filename"].decode() for r in records(out, split, version=version))


def recipe_uris(out: Path, split: str) -> list[str]:
    """The split's file names as the README's plain tf.data recipe reads them."""
    import tensorflow as tf

    meta = json.loads(tf.io.gfile.GFile(f"{out}/metadata.json").read())
    files = [f"{out}/builds/{shard.get('build', meta['build_id'])}/{shard['file']}"
             for shard in meta["splits"][split]["shards"]]
    spec = {"image/filename": tf.io.FixedLenFeature([], tf.string)}
    names = [tf.io.parse_single_example(r, spec)["image/filename"].numpy().decode()
             for r in tf.data.TFRecordDataset(files)]
    return sorted(names)


def test_only_new_rows_are_read_and_removed_rows_vanish_for_every_reader(pool, shardsmith, tmp_path):
    out = tmp_path / "out"
    first, later = pool.rows[:60], pool.rows[60:]
    done = build(shardsmith, pool.manifest("day1", first), out)
    assert done.code == 0, done.err
    v1 = metadata(out)["build_id"]
    # The carried rows' images are moved away: an incremental build must not read or stat them.
    kept = first[4:]
    for _, uri, _ in kept:
        (pool.root / uri).rename(pool.root / (uri + ".moved"))
    day2 = pool.manifest("day2", kept + later)
    done = build(shardsmith, day2, out)
    assert done.code == 0, done.err
    meta = metadata(out)
    change = meta["incremental"]
    rewritten = change.pop("num_rewritten_shards")
    data = Path(day2).read_bytes()  # what the version records of the manifest it read, for the next night
    assert change.pop("manifest") == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                      "lines": data.count(b"\n"), "rows": 86}
    assert change == {"previous": v1, "num_carried_rows": 56, "num_added_rows": 30, "num_added_records": 30,
                      "num_failed_again": 0, "num_removed_rows": 4, "num_removed_records": 4,
                      "num_images_read": 30, "generation": 2, "generations": 2, "appended": False}
    assert 1 <= rewritten <= 4
    assert meta["num_input_rows"] == 86 and meta["num_examples"] == 86 and meta["num_errors"] == 0
    assert ("rows carried over 56 (not read), added 30 (30 new records, 0 errors), removed 4 (" in done.out
            and "images read 30; 2 generation(s)" in done.out)
    for split in ("train", "validation", "test"):
        want = sorted(uri for s, uri, _ in kept + later if s == split)
        assert uris(out, split) == want, split
        sizes = [os.path.getsize(next(p for p in (pool.root / uri, pool.root / (uri + ".moved")) if p.exists()))
                 for uri in want]
        assert meta["splits"][split]["source_bytes"] == sum(sizes), split
        assert recipe_uris(out, split) == want, split
        assert sorted(r[1] for r in uris_v(out, split, v1)) == sorted(uri for s, uri, _ in first if s == split)
    ds = load(out, "train", batch_size=None, shuffle_buffer=None)
    assert int(ds.cardinality()) == sum(1 for s, _, _ in kept + later if s == "train")
    assert sum(1 for _ in ds) == int(ds.cardinality())
    check = shardsmith_cli_ok(shardsmith, "verify", out)
    assert "every check holds" in check.out
    assert "every check holds" in shardsmith_cli_ok(shardsmith, "verify", out, "--version", v1).out
    versions = json.loads(shardsmith_cli_ok(shardsmith, "versions", out, "--json").out)
    assert [(v["id"], v["rows_added"], v["rows_removed"]) for v in versions] == [
        (meta["build_id"], 30, 4), (v1, 60, 0)]


def uris_v(out: Path, split: str, version: str) -> list[tuple[str, str]]:
    return [(split, uri) for uri in uris(out, split, version)]


def shardsmith_cli_ok(shardsmith_cli, *args):
    done = shardsmith_cli(*args)
    assert done.code == 0, done.err + done.out
    return done


def test_label_ids_keep_their_meaning_and_new_labels_follow(pool, shardsmith, tmp_path):
    out = tmp_path / "out"
    base = [r for r in pool.rows if r[2] != "cat"]  # dog, emu
    assert build(shardsmith, pool.manifest("a", base), out).code == 0
    assert metadata(out)["labels"] == ["dog", "emu"]
    # "cat" sorts first but is new: it gets the next id; every emu row goes, emu keeps its id.
    cats = [r for r in pool.rows if r[2] == "cat"]
    dogs = [r for r in base if r[2] == "dog"]
    done = build(shardsmith, pool.manifest("b", dogs + cats), out, "--max_removed_fraction", "0.6")
    assert done.code == 0, done.err
    meta = metadata(out)
    assert meta["labels"] == ["dog", "emu", "cat"]
    folder = out / meta["build_dir"]
    assert (folder / "labels.txt").read_text().split() == ["dog", "emu", "cat"]
    assert (folder / "transform_fn" / "assets" / "labels").read_text().split() == ["dog", "emu", "cat"]
    ids = {r["image/filename"].decode(): (int(r["image/class/label"]), r["image/class/text"].decode())
           for split in ("train", "validation", "test") for r in records(out, split)}
    assert {label: i for i, label in ids.values()} == {"dog": 0, "cat": 2}
    assert "emu" not in meta["splits"]["train"]["label_counts"]


def test_too_many_removed_rows_fail_before_anything_is_written(pool, shardsmith, tmp_path):
    out = tmp_path / "out"
    assert build(shardsmith, pool.manifest("full", pool.rows), out).code == 0
    before = metadata(out)
    done = build(shardsmith, pool.manifest("truncated", pool.rows[:9] + [("train", "img/new.jpg", "cat")]), out)
    assert done.code == 1
    lines = [line for line in done.err.splitlines() if "lacks" in line]
    assert len(lines) == 1 and "lacks 81 of the 90 rows" in lines[0] and "--max_removed_fraction=0.1" in lines[0]
    assert "Traceback" not in done.err
    assert metadata(out) == before
    newest = sorted((out / BUILDS_DIR).iterdir())[-1]
    assert not list(newest.glob("*.tfrecord-*"))  # no shard, new or rewritten, was written


def test_retention_keeps_every_build_a_kept_version_lists(pool, shardsmith, tmp_path):
    out = tmp_path / "out"
    rows = pool.rows
    assert build(shardsmith, pool.manifest("d1", rows[:50]), out, "--keep_days", "0", "--keep_builds", "1").code == 0
    v1 = metadata(out)["build_id"]
    assert build(shardsmith, pool.manifest("d2", rows[:70]), out, "--keep_days", "0", "--keep_builds", "1").code == 0
    assert build(shardsmith, pool.manifest("d3", rows), out, "--keep_days", "0", "--keep_builds", "1").code == 0
    meta = metadata(out)
    # Nothing was removed: the current version still lists the shards of the first two generations.
    held = {shard.get("build", meta["build_id"]) for s in meta["splits"].values() for shard in s["shards"]}
    assert v1 in held and len(held) == 3
    assert sorted(p.name for p in (out / BUILDS_DIR).iterdir()) == sorted(held)
    assert "every check holds" in shardsmith_cli_ok(shardsmith, "verify", out).out
    # A full rebuild lists only its own shards: the earlier generations go.
    done = shardsmith("build", "--manifest", pool.manifest("d4", rows), "--output_dir", out, "--name", "pets",
                      "--overwrite", "--keep_days", "0", "--keep_builds", "1")
    assert done.code == 0, done.err
    assert [p.name for p in (out / BUILDS_DIR).iterdir()] == [metadata(out)["build_id"]]


def test_a_plain_builds_folder_takes_an_incremental_night(pool, shardsmith, tmp_path):
    """Every build lists its rows: the first night of a schedule needs no rebuild."""
    plain = tmp_path / "plain"
    assert shardsmith("build", "--manifest", pool.manifest("m", pool.rows[:60]), "--output_dir", plain, "--name",
                      "pets", "--num_shards", "train=2,validation=1,test=1").code == 0
    v1 = metadata(plain)["build_id"]
    assert "full build" in shardsmith_cli_ok(shardsmith, "versions", plain).out
    done = build(shardsmith, pool.manifest("n", pool.rows[2:]), plain)
    assert done.code == 0, done.err
    change = metadata(plain)["incremental"]
    assert (change["previous"], change["num_carried_rows"], change["num_added_rows"], change["num_removed_rows"],
            change["num_images_read"]) == (v1, 58, 30, 2, 30)
    for split in ("train", "validation", "test"):
        assert uris(plain, split) == sorted(uri for s, uri, _ in pool.rows[2:] if s == split), split
    assert "every check holds" in shardsmith_cli_ok(shardsmith, "verify", plain).out


def test_incremental_into_an_incompatible_version_is_a_usage_error(pool, shardsmith, tmp_path):
    manifest = pool.manifest("m", pool.rows)
    versioned = tmp_path / "versioned"
    assert build(shardsmith, manifest, versioned).code == 0
    done = build(shardsmith, manifest, versioned, "--seed", "7")
    assert done.code == 2 and "seed 42, this build has 7" in done.err
    assert not (versioned / LOCK_FILE).exists()
    assert len(list((versioned / BUILDS_DIR).iterdir())) == 1  # the refused build left no folder
    done = build(shardsmith, manifest, versioned, "--on_duplicate", "drop")
    assert done.code == 2 and "--on_duplicate drop cannot be combined with --incremental" in done.err


def test_a_new_copy_of_a_published_image_counts_as_a_duplicate_of_the_version(pool, shardsmith, tmp_path):
    out = tmp_path / "out"
    first = pool.rows[:60]
    assert build(shardsmith, pool.manifest("d1", first), out).code == 0
    # Night 2 adds a copy, under a new name, of an image the published version holds (in another generation).
    split, uri, label = first[0]
    shutil.copyfile(pool.root / uri, pool.root / "copy-of-first.jpg")
    night2 = pool.manifest("d2", first + [("test", "copy-of-first.jpg", label)])
    v1 = metadata(out)["build_id"]
    refused = build(shardsmith, night2, out, "--on_duplicate", "error")
    assert refused.code == 1 and "1 images occur more than once" in refused.err, refused.err
    assert metadata(out)["build_id"] == v1  # nothing published
    kept = build(shardsmith, night2, out)  # --on_duplicate keep: listed in metadata.json
    assert kept.code == 0, kept.err
    groups = metadata(out)["duplicates"]["examples"]
    assert [sorted((c["split"], c["uri"]) for c in g["copies"]) for g in groups] == [
        sorted([(split, uri), ("test", "copy-of-first.jpg")])]


def test_a_killed_incremental_build_leaves_the_version_readable_and_a_rerun_is_identical(pool, shardsmith,
                                                                                         tmp_path):
    def run(manifest: Path, out: Path, fault: str = "") -> subprocess.CompletedProcess:
        args = ["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "pets", "--incremental",
                "--num_shards", "train=2,validation=1,test=1"]
        if not fault:  # in this process: a process of its own imports Beam again (about 3 s of CPU)
            result = shardsmith(*args)
            return subprocess.CompletedProcess(args, result.code, result.out, result.err)
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", FAULT_ENV: fault}
        return subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True, env=env,
                              timeout=300)

    day1, day2 = pool.manifest("d1", pool.rows[:60]), pool.manifest("d2", pool.rows[3:])
    outs = {}
    for name in ("killed", "clean"):
        out = tmp_path / name
        assert run(day1, out).returncode == 0
        outs[name] = out
    v1 = metadata(outs["killed"])["build_id"]
    killed = run(day2, outs["killed"], "mid_rewrite:2")
    assert killed.returncode == -9
    assert metadata(outs["killed"])["build_id"] == v1
    assert uris(outs["killed"], "train") == sorted(u for s, u, _ in pool.rows[:60] if s == "train")
    for name, out in outs.items():
        done = run(day2, out)
        assert done.returncode == 0, (name, done.stderr)

    assert shards(outs["killed"]) == shards(outs["clean"])
    assert len(list((outs["killed"] / BUILDS_DIR).iterdir())) == 2  # the killed build's folder was removed


def test_writer_processes_rewrite_the_same_shards_as_the_launcher(pool, shardsmith, tmp_path, monkeypatch):
    """A removal night whose shards are rewritten by writer processes (a local run's way for a version of 16,384
    records or more: the bound lowered here) publishes the shards a night rewriting them in the launcher does."""
    from transforms.versions import rewritten_shards

    day1, day2 = pool.manifest("d1", pool.rows[:70]), pool.manifest("d2", pool.rows[5:])
    outs = {writers: tmp_path / f"out{writers}" for writers in ("0", "2")}
    for out in outs.values():
        assert build(shardsmith, day1, out).code == 0
    assert build(shardsmith, day2, outs["0"], "--writer_processes", "0").code == 0
    monkeypatch.setattr(rewritten_shards, "REWRITE_IN_PROCESS_RECORDS", 0)

    def not_here(*args, **kwargs):
        raise AssertionError("rewritten in the launcher, not by a writer process")

    monkeypatch.setattr(rewritten_shards, "rewrite_shard", not_here)
    done = build(shardsmith, day2, outs["2"], "--writer_processes", "2")
    assert done.code == 0, done.err
    assert metadata(outs["2"])["incremental"]["num_rewritten_shards"] >= 1
    assert shards(outs["2"]) == shards(outs["0"])
    assert {k: v for k, v in metadata(outs["2"])["incremental"].items() if k != "previous"} == {
        k: v for k, v in metadata(outs["0"])["incremental"].items() if k != "previous"}


def shards(out: Path) -> dict[str, bytes]:
    """The published version's shard files, by name, with their bytes."""
    meta = metadata(out)
    return {shard["file"]: (out / BUILDS_DIR / shard.get("build", meta["build_id"]) / shard["file"]).read_bytes()
            for s in meta["splits"].values() for shard in s["shards"]}


def test_the_partitioned_join_gives_the_same_version_however_rows_are_partitioned_and_spilled(
        pool, shardsmith, tmp_path, monkeypatch):
    from shardsmith.versions import spill

    day1 = pool.manifest("d1", pool.rows[:60])
    # Day 2 drops 3 rows, adds 30 and repeats a carried row (a duplicate: new, as in a full build).
    day2 = pool.manifest("d2", pool.rows[3:] + pool.rows[10:11])
    outs = {}
    for name, partition_rows, spill_entries in (("one-partition", 100_000, 50_000), ("many-partitions", 7, 5)):
        monkeypatch.setattr(spill, "PARTITION_ROWS", partition_rows)
        monkeypatch.setattr(spill, "SPILL_ENTRIES", spill_entries)
        out = outs[name] = tmp_path / name
        assert build(shardsmith, day1, out).code == 0
        done = build(shardsmith, day2, out)
        assert done.code == 0, done.err
        assert "rows carried over 57 (not read), added 31 (31 new records, 0 errors), removed 3" in done.out
        build_folder = out / BUILDS_DIR / metadata(out)["build_id"]
        assert not [p for p in build_folder.iterdir() if "carry-over" in p.name]  # the spill files are gone
    assert shards(outs["one-partition"]) == shards(outs["many-partitions"])


def test_row_lists_read_back_what_was_written_and_name_the_bad_line():
    from shardsmith.format.row_list import ListedRow, RowListError, parse_row_list, row_list_bytes

    rows = [ListedRow("ab" * 16, 1, "cat", 1234, "img/ç a.jpg"), ListedRow("cd" * 16, 3, "dog\t2", 0, "x")]
    assert parse_row_list(row_list_bytes(rows), "r.jsonl") == rows
    with pytest.raises(RowListError, match="r.jsonl line 2 is not"):
        parse_row_list(row_list_bytes(rows[:1]) + b'["x", 1, "cat"]\n', "r.jsonl")


def test_a_row_identity_is_its_content_not_its_place_in_the_manifest():
    import dataclasses

    from shardsmith.rows import ManifestRow
    from shardsmith.rows.row_identity import row_identity
    from shardsmith.versions.carry_over import RecordPlace, pair_rows

    row = ManifestRow("a.csv", 0, 2, "img/1.jpg", "/data/img/1.jpg", "train", "cat")
    moved = dataclasses.replace(row, source="b.csv", source_index=3, line=90, resolved_uri="/elsewhere/1.jpg")
    assert row_identity(row) == row_identity(moved)
    for changed in ({"label": "dog"}, {"split": "test"}, {"uri": "img/2.jpg"}):
        assert row_identity(dataclasses.replace(row, **changed)) != row_identity(row), changed
    # Identities pair as multisets: two rows and three records of one identity keep the first two records.
    second = dataclasses.replace(row, line=5)
    pairing = pair_rows([second, row], [RecordPlace(1, 0, 1), RecordPlace(0, 7, 1), RecordPlace(0, 3, 1)])
    assert pairing.carried_lines == 2 and pairing.new_rows == [] and pairing.removed == [RecordPlace(1, 0, 1)]
    pairing = pair_rows([second, row], [RecordPlace(0, 3, 1)])
    assert pairing.carried_lines == 1 and pairing.new_rows == [second] and pairing.removed == []


def test_a_rerun_with_nothing_new_publishes_nothing_and_keeps_every_version(pool, shardsmith, tmp_path):
    """A retried scheduled task (or a night without news) must not push a real version out of --keep_builds."""
    out = tmp_path / "out"
    assert build(shardsmith, pool.manifest("d1", pool.rows[:80]), out).code == 0
    assert build(shardsmith, pool.manifest("d2", pool.rows), out).code == 0
    versions_before = sorted(p.name for p in (out / BUILDS_DIR).iterdir())
    published = metadata(out)
    done = build(shardsmith, pool.manifest("d2", pool.rows), out)  # the same night again
    assert done.code == 0, done.err
    assert f"nothing changed since version {published['build_id']}" in done.out
    assert metadata(out) == published
    assert sorted(p.name for p in (out / BUILDS_DIR).iterdir()) == versions_before
    assert not (out / LOCK_FILE).exists()


def errors_of(out: Path) -> list[dict]:
    meta = metadata(out)
    return [json.loads(line) for line in (out / meta["build_dir"] / "errors.jsonl").read_text().splitlines()]


def test_rows_that_failed_before_do_not_fail_later_nights_and_a_fixed_one_becomes_a_record(pool, shardsmith,
                                                                                           tmp_path):
    """Every real export has a few broken rows: the error budget judges the rows new since the published version.
    A row that failed there and fails again is retried, reported (errors.jsonl, metadata, summary) and not
    counted; one whose image was fixed becomes a record; a night with nothing new exits 0, compaction between
    nights included."""
    out = tmp_path / "out"
    (pool.root / "img").mkdir(exist_ok=True)
    (pool.root / "img" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a JPEG")
    broken = [("train", "img/missing.jpg", "cat"), ("train", "img/broken.jpg", "dog")]
    good = pool.rows[:60]
    budget = ("--max_error_fraction", "0.05")
    done = build(shardsmith, pool.manifest("n1", good + broken), out, *budget)  # 2 of 62 rows: 3.2%
    assert done.code == 0, done.err
    v1 = metadata(out)["build_id"]
    night2 = pool.manifest("n2", good + broken + pool.rows[60:65])
    done = build(shardsmith, night2, out, *budget)
    assert done.code == 0, done.err
    meta = metadata(out)
    change = meta["incremental"]
    assert (change["num_carried_rows"], change["num_added_rows"], change["num_added_records"],
            change["num_failed_again"]) == (60, 7, 5, 2)
    assert (meta["num_input_rows"], meta["num_examples"], meta["num_errors"]) == (67, 65, 2)
    assert sorted(e["uri"] for e in errors_of(out)) == ["img/broken.jpg", "img/missing.jpg"]
    assert f"added 7 (5 new records, 2 errors, 2 of them failed in {v1} too)" in done.out
    v2 = meta["build_id"]

    # A quiet night (the same manifest; a retried task is the same), after a compaction too: exit 0, nothing new.
    for _ in range(2):
        done = build(shardsmith, night2, out, *budget)
        assert done.code == 0, done.err
        assert f"nothing changed since version {v2}" in done.out
    compacted = shardsmith("compact", out)
    assert compacted.code == 0, compacted.err
    v3 = metadata(out)["build_id"]
    assert v3 != v2 and metadata(out)["num_errors"] == 2 and len(errors_of(out)) == 2
    done = build(shardsmith, night2, out, *budget)
    assert done.code == 0, done.err
    assert f"nothing changed since version {v3}" in done.out

    # The broken image is fixed: its row becomes a record; the missing one is retried again.
    shutil.copyfile(pool.root / good[0][1], pool.root / "img" / "broken.jpg")
    done = build(shardsmith, night2, out, *budget)
    assert done.code == 0, done.err
    meta = metadata(out)
    assert (meta["incremental"]["num_added_records"], meta["incremental"]["num_failed_again"]) == (1, 1)
    assert "img/broken.jpg" in uris(out, "train") and [e["uri"] for e in errors_of(out)] == ["img/missing.jpg"]
    v4 = meta["build_id"]

    # New rows are still judged: one new broken row of six is over 5%, and nothing is published.
    night5 = pool.manifest("n5", good + broken + pool.rows[60:70] + [("test", "img/gone.jpg", "emu")])
    done = build(shardsmith, night5, out, *budget)
    assert done.code == 1
    assert "1 of 6 new rows (16.7%) failed" in done.err
    assert f"1 more that failed in version {v4} too were retried and are not counted" in done.err
    assert metadata(out)["build_id"] == v4


def test_label_ids_never_move_silently_on_a_rebuild_or_with_a_label_file(pool, shardsmith, tmp_path):
    out = tmp_path / "out"
    no_cats = [r for r in pool.rows if r[2] != "cat"]
    assert build(shardsmith, pool.manifest("a", no_cats), out).code == 0
    assert build(shardsmith, pool.manifest("b", pool.rows), out).code == 0
    assert metadata(out)["labels"] == ["dog", "emu", "cat"]
    # The rebuild the usage errors recommend keeps the published ids (alphabetical would renumber all three).
    done = build(shardsmith, pool.manifest("b", pool.rows), out, "--overwrite")
    assert done.code == 0, done.err
    assert metadata(out)["labels"] == ["dog", "emu", "cat"] and "label ids changed" not in done.out
    ids = {r["image/class/text"].decode(): int(r["image/class/label"]) for r in records(out, "train")}
    assert ids == {"dog": 0, "emu": 1, "cat": 2}
    # A fixed class list a model needs: it may extend the published ids, never contradict them.
    extends = tmp_path / "extends.txt"
    extends.write_text("dog\nemu\ncat\nfox\n")
    done = build(shardsmith, pool.manifest("b", pool.rows), out, "--label_file", extends)
    assert done.code == 0, done.err
    assert metadata(out)["labels"] == ["dog", "emu", "cat", "fox"]
    before = metadata(out)
    contradicts = tmp_path / "alphabetical.txt"
    contradicts.write_text("cat\ndog\nemu\nfox\n")
    done = build(shardsmith, pool.manifest("b", pool.rows), out, "--label_file", contradicts)
    assert done.code == 2
    assert f"gives 'dog' id 1, version {before['build_id']} id 0" in done.err and "Traceback" not in done.err
    assert metadata(out) == before
    # A full rebuild that numbers alphabetically says which ids moved.
    done = shardsmith("build", "--manifest", pool.manifest("b", pool.rows), "--output_dir", out, "--name", "pets",
                      "--overwrite")
    assert done.code == 0, done.err
    assert metadata(out)["labels"] == ["cat", "dog", "emu"]
    assert "label ids changed from the version this build replaced: 'dog' 0 -> 1, 'emu' 1 -> 2, 'cat' 2 -> 0" \
        in done.out


def test_a_nights_counts_mean_the_same_in_metadata_the_summary_the_metrics_and_versions(pool, shardsmith,
                                                                                       tmp_path):
    """Rows are manifest lines, records are examples: a line that does not parse is a row read (added) and an
    error, never a record, wherever the night's numbers are shown."""
    out = tmp_path / "out"
    first = pool.manifest("n1", pool.rows[:60])
    first.write_text(first.read_text() + "train,only-two-columns\n")
    assert build(shardsmith, first, out).code == 0
    v1 = metadata(out)["build_id"]
    second = pool.manifest("n2", pool.rows[:65])
    second.write_text(second.read_text() + "train,only-two-columns\n")
    done = build(shardsmith, second, out)
    assert done.code == 0, done.err
    change = metadata(out)["incremental"]
    assert (change["num_carried_rows"], change["num_added_rows"], change["num_added_records"],
            change["num_failed_again"], change["num_removed_records"]) == (60, 6, 5, 1, 0)
    assert f"added 6 (5 new records, 1 errors, 1 of them failed in {v1} too)" in done.out
    assert "rows_carried 60, rows_new 6, rows_read 66" in done.out + done.err
    listed = json.loads(shardsmith_cli_ok(shardsmith, "versions", out, "--json").out)
    assert [(v["rows_added"], v["records_added"], v["records_removed"], v["num_records"], v["num_errors"])
            for v in listed] == [(6, 5, 0, 65, 1), (61, 60, 0, 60, 1)]
    lines = shardsmith_cli_ok(shardsmith, "versions", out).out.splitlines()
    assert "+5 -0 records" in lines[0] and "full build" in lines[1] and "1 errors" in lines[1]


def test_a_version_kept_only_for_the_shards_it_lends_is_retired_not_listed_half_readable(pool, shardsmith,
                                                                                         tmp_path):
    """keep_builds 1: version B's folder stays while the current version carries shards from it, but B carries
    shards of A, which goes: B is no longer a version (not listed; readers say it is no longer kept)."""
    from shardsmith.output_folder.opening import VersionNotFound

    out = tmp_path / "out"
    keep = ("--keep_days", "0", "--keep_builds")
    assert build(shardsmith, pool.manifest("a", pool.rows[:60]), out, *keep, "3").code == 0
    a = metadata(out)["build_id"]
    assert build(shardsmith, pool.manifest("b", pool.rows[:66]), out, *keep, "3").code == 0
    b = metadata(out)["build_id"]
    firsts = {json.loads(path.read_text().splitlines()[0])[4] for path in (out / BUILDS_DIR / a / "rows").iterdir()}
    night = [row for row in pool.rows[:66] if row[1] not in firsts]  # every shard of A is rewritten
    done = build(shardsmith, pool.manifest("c", night), out, *keep, "1", "--max_removed_fraction", "0.5")
    assert done.code == 0, done.err
    c = metadata(out)["build_id"]
    assert not (out / BUILDS_DIR / a).exists()
    assert any(shard.get("build") == b for s in metadata(out)["splits"].values() for shard in s["shards"])
    listed = json.loads(shardsmith_cli_ok(shardsmith, "versions", out, "--json").out)
    assert [v["id"] for v in listed] == [c]
    with pytest.raises(VersionNotFound, match=f"version {b} is no longer kept in .*--keep_builds 1"):
        records(out, "train", version=b)
    assert uris(out, "train") == sorted(uri for s, uri, _ in night if s == "train")
    assert "every check holds" in shardsmith_cli_ok(shardsmith, "verify", out).out


def test_an_unreadable_metadata_json_says_how_to_restore_it_and_a_rebuild_keeps_the_kept_versions_ids(
        pool, shardsmith, tmp_path):
    out = tmp_path / "out"
    no_cats = [r for r in pool.rows if r[2] != "cat"]
    assert build(shardsmith, pool.manifest("a", no_cats), out).code == 0
    assert build(shardsmith, pool.manifest("b", pool.rows), out).code == 0
    published = metadata(out)["build_id"]
    top = out / METADATA_FILE
    top.write_bytes(top.read_bytes()[:200])  # truncated
    done = build(shardsmith, pool.manifest("b", pool.rows), out)
    assert done.code == 2
    assert f"restore it from builds/{published}/metadata.json" in done.err and "Traceback" not in done.err
    top.rename(tmp_path / "metadata.json.moved")  # the other way out the message gives
    done = build(shardsmith, pool.manifest("b", pool.rows), out, "--overwrite")
    assert done.code == 0, done.err
    assert metadata(out)["labels"] == ["dog", "emu", "cat"]
    done = shardsmith("build", "--manifest", pool.manifest("b", pool.rows), "--output_dir", out, "--name", "pets",
                      "--overwrite")
    assert done.code == 0 and "label ids changed" in done.out


def test_a_split_whose_every_record_is_removed_is_no_split_of_the_version(pool, shardsmith, tmp_path):
    # As in a full build of the rows: the version lists no test split, and its shard is rewritten nowhere (an
    # empty shard listed would read as an empty split, an unlisted one would fail verify).
    out = tmp_path / "out"
    assert build(shardsmith, pool.manifest("day1", pool.rows), out).code == 0
    without_test = [row for row in pool.rows if row[0] != "test"]
    night = build(shardsmith, pool.manifest("day2", without_test), out, "--max_removed_fraction", "0.5")
    assert night.code == 0, night.err
    meta = metadata(out)
    assert sorted(meta["splits"]) == ["train", "validation"] and meta["num_examples"] == len(without_test)
    assert meta["incremental"]["num_removed_records"] == 9
    assert not list((out / meta["build_dir"]).glob("*-test.tfrecord*"))
    assert shardsmith("verify", out).code == 0
    with pytest.raises(ValueError, match="split 'test' is not in this dataset"):
        records(out, "test")
    full = shardsmith("build", "--manifest", pool.manifest("day2", without_test), "--output_dir", tmp_path / "full",
                      "--name", "pets", "--num_shards", "train=2,validation=1,test=1")
    assert full.code == 0 and sorted(metadata(tmp_path / "full")["splits"]) == sorted(meta["splits"])


def test_a_split_that_only_ever_held_failed_rows_goes_with_them(pool, shardsmith, tmp_path):
    # The first version places its test rows but every one fails (truncated files): a test split of empty shards,
    # as a full build lists it. A night whose manifest no longer lists them carries no empty shard along.
    out = tmp_path / "out"
    rows = [row for row in pool.rows if row[0] != "test"]
    missing = []
    for i in range(2):  # truncated: they fail where the shard is written, after placement
        broken = tmp_path / f"truncated-{i}.jpg"
        broken.write_bytes((pool.root / rows[i][1]).read_bytes()[:100])
        missing.append(("test", str(broken), "cat"))
    first = build(shardsmith, pool.manifest("day1", rows + missing), out, "--max_error_fraction", "0.5")
    assert first.code == 0, first.err
    assert metadata(out)["splits"]["test"]["num_examples"] == 0
    night = build(shardsmith, pool.manifest("day2", rows), out)
    assert night.code == 0, night.err
    assert sorted(metadata(out)["splits"]) == ["train", "validation"]
    assert shardsmith("verify", out).code == 0
