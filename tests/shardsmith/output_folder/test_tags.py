"""Versions a team can keep (issue 41 item 3): `shardsmith tag OUT ID NAME` pins a version against retention
(with every build folder it lists shards in), every reader takes the tag's name, `untag` lets the next build
retire it; a retired version reads as "no longer kept" (by which --keep_builds, when) in every reader, an id that
never was one says so; a tags.json that cannot be trusted never makes retention delete anything, and never leads
a reader out of the folder. Real builds through the CLI (FnApiRunner), real files."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import pytest

from shardsmith import records
from shardsmith.format.naming import BUILDS_DIR, METADATA_FILE, RETIRED_FILE, TAGS_FILE
from shardsmith.output_folder.lock import acquire_lock
from shardsmith.output_folder.retired import MAX_RETIRED, read_retired, record_retired
from shardsmith.read.record_sequence import Records

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SPLITS = ("train", "validation", "test")
WHEN = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


@pytest.fixture
def rows(version_rows) -> list[tuple[str, str, str]]:
    """60 rows (20 per label, all three splits) with absolute URIs, in URI order."""
    return version_rows(14)


def ok(shardsmith, *args):
    done = shardsmith(*args)
    assert done.code == 0, done.err + done.out
    return done


def build(shardsmith, tmp_path: Path, out: Path, day: str, rows, *extra: str) -> str:
    """Builds `rows` into `out` with --keep_builds 1 and the flags given; returns the new version's id."""
    manifest = tmp_path / f"{day}.csv"
    with manifest.open("w", newline="") as f:
        csv.writer(f).writerows([("split", "image_uri", "label"), *rows])
    ok(shardsmith, "build", "--manifest", manifest, "--output_dir", out, "--name", "pets", "--num_shards",
       "train=2,validation=1,test=1", "--keep_days", "0", "--keep_builds", "1", *extra)
    return published(out)


def published(out: Path) -> str:
    return json.loads((out / METADATA_FILE).read_text())["build_id"]


def builds(out: Path) -> list[str]:
    return sorted(p.name for p in (out / BUILDS_DIR).iterdir())


def uris(out: Path, version: str | None = None) -> dict[str, list[str]]:
    return {split: sorted(r["image/filename"].decode() for r in records(out, split, version=version))
            for split in SPLITS}


def want(rows) -> dict[str, list[str]]:
    return {split: sorted(uri for s, uri, _ in rows if s == split) for split in SPLITS}


def one_line_refusal(shardsmith, *args) -> str:
    done = shardsmith(*args)
    assert done.code == 2 and done.err.strip().count("\n") == 0 and "Traceback" not in done.err, done.err
    return done.err.strip()


def test_a_tagged_version_and_the_builds_it_lists_outlive_retention_until_untagged(rows, shardsmith, tmp_path):
    out = tmp_path / "out"
    day1, day2, day3, day4 = rows[:40], rows[:50], rows[:55], rows
    v1 = build(shardsmith, tmp_path, out, "d1", day1, "--incremental")
    v2 = build(shardsmith, tmp_path, out, "d2", day2, "--incremental")  # carries v1's shards
    assert builds(out) == [v1, v2]
    done = ok(shardsmith, "tag", out, v2, "trained-on")
    assert f"tag trained-on pins version {v2}" in done.out
    listed = ok(shardsmith, "versions", out).out.splitlines()
    assert listed[0].startswith(v2) and listed[0].endswith("(current)  tags: trained-on")
    listed_json = json.loads(ok(shardsmith, "versions", out, "--json").out)
    # v1 is beyond --keep_builds 1: its folder stays for the shards v2 carries from it, but it is no version.
    assert [(v["id"], v["tags"]) for v in listed_json] == [(v2, ["trained-on"])]

    # Compaction with --keep_builds 1 keeps only itself: without the tag, v2 and v1's folder (which holds most of
    # v2's shards) would go now.
    ok(shardsmith, "compact", out, "--keep_days", "0", "--keep_builds", "1")
    v3 = published(out)
    assert builds(out) == [v1, v2, v3]
    v4 = build(shardsmith, tmp_path, out, "d3", day3, "--incremental")
    assert builds(out) == [v1, v2, v3, v4]
    assert uris(out, "trained-on") == uris(out, v2) == want(day2)
    assert uris(out) == want(day3)
    ok(shardsmith, "verify", out, "--version", "trained-on")
    assert Records(out, "train", "trained-on").version_id == v2  # what a torch state records: the id, not the tag
    listed = ok(shardsmith, "versions", out).out
    assert re.search(rf"^{v2} .*  tags: trained-on$", listed, re.M), listed

    removed = ok(shardsmith, "untag", out, "trained-on")
    assert f"removed tag trained-on (version {v2})" in removed.out
    v5 = build(shardsmith, tmp_path, out, "d4", day4, "--incremental")
    assert v1 not in builds(out) and v2 not in builds(out) and v5 in builds(out)
    assert set(read_retired(str(out))) == {v1, v2, v3, v4}  # v3 and v4 lend v5 shards: retired, folders kept
    with pytest.raises(FileNotFoundError, match=rf"version {v2} is no longer kept in {out}: retention "
                                                rf"\(--keep_builds 1\) retired it at {WHEN}; `shardsmith versions"):
        records(out, "train", version=v2)
    with pytest.raises(FileNotFoundError, match="no version or tag 'trained-on'"):
        records(out, "train", version="trained-on")


def test_every_reader_says_a_retired_version_is_no_longer_kept_and_an_unknown_one_never_was(rows, shardsmith,
                                                                                              tmp_path):
    from shardsmith import load

    out = tmp_path / "out"
    first = build(shardsmith, tmp_path, out, "d1", rows[:30])
    build(shardsmith, tmp_path, out, "d2", rows[:36], "--overwrite")
    assert first not in builds(out)
    retired = (rf"version {first} is no longer kept in {out}: retention \(--keep_builds 1\) retired it at {WHEN}; "
               rf"`shardsmith versions {out}` lists them")
    unknown = rf"no version 20200101T000000Z-00000000 in {out}; `shardsmith versions {out}` lists them"
    for version, line in ((first, retired), ("20200101T000000Z-00000000", unknown)):
        with pytest.raises(FileNotFoundError, match=line):
            records(out, "train", version=version)
        with pytest.raises(FileNotFoundError, match=line):
            load(str(out), "train", version=version)
        for command in ("verify", "inspect", "index"):
            assert re.search(line, one_line_refusal(shardsmith, command, out, "--version", version)), command
        assert re.search(line, one_line_refusal(shardsmith, "tag", out, version, "kept"))
    from shardsmith.grain import ShardSource

    with pytest.raises(FileNotFoundError, match=retired):
        ShardSource(str(out), "train", version=first)
    torch = pytest.importorskip("shardsmith.torch")
    for dataset in (torch.ShardDataset, torch.StreamingShardDataset):
        with pytest.raises(FileNotFoundError, match=retired):
            dataset(out, "train", version=first)


def test_tag_and_untag_refuse_what_they_cannot_do_safely(rows, shardsmith, tmp_path):
    out = tmp_path / "out"
    older = build(shardsmith, tmp_path, out, "d1", rows[:30], "--keep_days", "0", "--keep_builds", "2")
    newer = build(shardsmith, tmp_path, out, "d2", rows[:36], "--overwrite", "--keep_days", "0", "--keep_builds", "2")
    for name in ("../x", "a/b", "1st", "x" * 65, newer, ""):
        assert "choose another name" in one_line_refusal(shardsmith, "tag", out, older, name), name
    assert not (out / TAGS_FILE).exists()
    ok(shardsmith, "tag", out, older, "baseline")
    assert "already pins" in ok(shardsmith, "tag", out, "baseline", "baseline").out  # by its own name: unchanged
    refused = one_line_refusal(shardsmith, "tag", out, newer, "baseline")
    assert f"tag baseline already pins version {older}" in refused and "--force" in refused
    ok(shardsmith, "tag", out, "baseline", "candidate")  # a tag's name stands for its version
    ok(shardsmith, "tag", out, newer, "baseline", "--force")
    tags = json.loads((out / TAGS_FILE).read_text())["tags"]
    assert {name: tag["version"] for name, tag in tags.items()} == {"baseline": newer, "candidate": older}
    assert "no tag 'nope'" in one_line_refusal(shardsmith, "untag", out, "nope")

    # A build (here: a live process of this host) holding the folder's lock refuses both, writing nothing.
    lock = acquire_lock(str(out), "20990101T000000Z-0000beef")
    try:
        before = (out / TAGS_FILE).read_bytes()
        assert "is being built by build 20990101T000000Z-0000beef" in one_line_refusal(
            shardsmith, "tag", out, older, "during")
        assert "is being built" in one_line_refusal(shardsmith, "untag", out, "baseline")
        assert (out / TAGS_FILE).read_bytes() == before
    finally:
        lock.release()
    ok(shardsmith, "untag", out, "candidate")
    assert set(json.loads((out / TAGS_FILE).read_text())["tags"]) == {"baseline"}


HOSTILE = {
    "garbage": b"\x00not json{",
    "a path as its version": json.dumps({"tags": {"x": {"version": "../../x", "tagged": ""}}}).encode(),
    "a path as its name": json.dumps({"tags": {"../../x": {"version": "20200101T000000Z-00000000"}}}).encode(),
    "another shape": json.dumps(["x"]).encode(),
}


@pytest.mark.parametrize("kind", [*HOSTILE, "a symbolic link"])
def test_a_tags_file_that_cannot_be_trusted_never_deletes_and_never_reads_outside(rows, shardsmith, tmp_path,
                                                                                   kind):
    out = tmp_path / "out"
    first = build(shardsmith, tmp_path, out, "d1", rows[:30])
    # A dataset folder where "../../x" from builds/ lands: a reader that followed the name would read it.
    shutil.copytree(out / BUILDS_DIR / first, tmp_path / "x")
    if kind == "a symbolic link":  # to a tags file that would pin `first`, outside the folder
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(json.dumps({"tags": {"x": {"version": first, "tagged": ""}}}))
        (out / TAGS_FILE).symlink_to(elsewhere)
    else:
        (out / TAGS_FILE).write_bytes(HOSTILE[kind])
    second = build(shardsmith, tmp_path, out, "d2", rows[:36], "--overwrite")
    third = build(shardsmith, tmp_path, out, "d3", rows, "--overwrite")
    assert builds(out) == [first, second, third], "retention removed nothing"
    assert not (out / RETIRED_FILE).exists()
    for version in ("x", "../../x"):
        with pytest.raises(ValueError, match="is neither a build id|tags.json"):
            records(out, "train", version=version)
    listed = shardsmith("versions", out)
    assert listed.code == 0 and "tags.json" in listed.err and "retention removes no build" in listed.err
    assert [line.split()[0] for line in listed.out.splitlines()] == [third, second, first]
    assert "fix or remove it" in one_line_refusal(shardsmith, "tag", out, second, "y")
    assert (out / TAGS_FILE).is_symlink() == (kind == "a symbolic link"), "the file is left as it was"

    (out / TAGS_FILE).unlink()
    build(shardsmith, tmp_path, out, "d4", rows[:33], "--overwrite")
    assert len(builds(out)) == 1, "with the file gone, retention retires as usual"


def test_retired_json_is_bounded_and_unreadable_ones_are_no_entries(tmp_path):
    out = str(tmp_path)
    ids = [f"2026010{day}T000000Z-{n:08x}" for day in range(1, 4) for n in range(100)]
    for start in range(0, len(ids), 50):
        record_retired(out, ids[start:start + 50], f"2026-02-0{1 + start // 100}T00:00:00Z", 2)
    found = read_retired(out)
    assert len(found) == MAX_RETIRED and set(found) == set(ids[-MAX_RETIRED:])
    assert found[ids[-1]].keep_builds == 2
    (tmp_path / RETIRED_FILE).write_bytes(b"[1, 2")
    assert read_retired(out) == {}
    (tmp_path / RETIRED_FILE).write_text(json.dumps({"retired": [{"version": "../x", "retired": "now"}]}))
    assert read_retired(out) == {}
    record_retired(out, [ids[0]], "2026-03-01T00:00:00Z", None)
    assert list(read_retired(out)) == [ids[0]]


@pytest.mark.parametrize("command", ["tag", "untag"])
def test_a_tag_killed_between_its_temporary_file_and_the_rename_changes_nothing_and_needs_no_person(
        command, rows, shardsmith, tmp_path):
    # SIGKILL at the fault point: tags.json's new content is whole in its temporary file, not yet renamed.
    import os
    import subprocess
    import sys

    from shardsmith.fault_injection import BEFORE_TAGS_RENAME, FAULT_ENV

    out = tmp_path / "out"
    first = build(shardsmith, tmp_path, out, "day1", rows[:40])
    ok(shardsmith, "tag", out, first, "release-1")
    before = (out / TAGS_FILE).read_bytes()
    args = [str(out), first, "release-2"] if command == "tag" else [str(out), "release-1"]
    killed = subprocess.run([sys.executable, "-m", "pipeline", command, *args], capture_output=True, text=True,
                            env={**os.environ, FAULT_ENV: BEFORE_TAGS_RENAME}, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert (out / TAGS_FILE).read_bytes() == before, "readers still see the tags as they were"
    assert [r["image/filename"] for r in records(out, "train", version="release-1")]
    ok(shardsmith, command, *args)  # run again: it takes over the dead command's lock and does it
    assert ("release-2" in json.loads((out / TAGS_FILE).read_text())["tags"]) == (command == "tag")
    second = build(shardsmith, tmp_path, out, "day2", rows[:50], "--incremental")
    assert first in builds(out) or command == "untag"
    assert second in builds(out)
    assert not [p.name for p in out.iterdir() if p.name not in (METADATA_FILE, BUILDS_DIR, TAGS_FILE, RETIRED_FILE)]


def test_a_users_file_named_like_a_temporary_is_refused_never_removed(rows, shardsmith, tmp_path):
    out = tmp_path / "out"
    build(shardsmith, tmp_path, out, "day1", rows[:40])
    user_file = out / ".shardsmith-tmp-tags.json.my-backup"  # not a temporary's name: no 16-hex-digit token
    user_file.write_text("mine")
    refused = shardsmith("tag", out, published(out), "release-1")
    assert refused.code == 0 and user_file.read_text() == "mine", "tag touches only tags.json and its temporary"
    refused = shardsmith("build", "--manifest", tmp_path / "day1.csv", "--output_dir", out, "--name", "pets",
                         "--incremental")
    assert refused.code == 2 and ".shardsmith-tmp-tags.json.my-backup" in refused.err
    assert user_file.read_text() == "mine"
