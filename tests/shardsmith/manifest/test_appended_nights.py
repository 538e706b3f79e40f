"""A night whose manifest only had rows appended parses only those and the rows that failed, and publishes the same
version, byte for byte, as the full pairing of every row (shardsmith/manifest/appended.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

from shardsmith.format.metadata_schema import ManifestDigestEntry
from shardsmith.format.naming import BUILDS_DIR, METADATA_FILE, NAMES_ITS_BUILD
from shardsmith.manifest import AppendedPlan, ManifestChanged, ManifestRead, valid_digest
from shardsmith.manifest.text_lines import manifest_lines

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def write_csv(path: Path, rows: list[tuple[str, str, str]], line_end: str = "\n") -> Path:
    path.write_text("".join(f"{','.join(row)}{line_end}" for row in [("split", "image_uri", "label"), *rows]))
    return path


def write_jsonl(path: Path, rows: list[tuple[str, str, str]], line_end: str = "\n") -> Path:
    path.write_text("".join(json.dumps({"split": s, "image_uri": u, "label": label}) + line_end
                            for s, u, label in rows))
    return path


def night(shardsmith, manifest: Path, out: Path, max_error_fraction: str = "0.5") -> dict:
    done = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "pets", "--incremental",
                      "--num_shards", "train=2,validation=1,test=1", "--max_error_fraction", max_error_fraction)
    assert done.code == 0, done.err + done.out
    return json.loads((out / METADATA_FILE).read_text())


def build_files(out: Path, meta: dict) -> dict[str, bytes]:
    """The files the version's build wrote, by name (metadata.json and the build's record, which name it, apart)."""
    folder = out / BUILDS_DIR / meta["build_id"]
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name not in (METADATA_FILE, *NAMES_ITS_BUILD)}


def comparable(meta: dict) -> dict:
    """metadata.json less what names the build and how the night read its manifest."""
    meta = json.loads(json.dumps(meta))
    for key in ("build_id", "build_dir"):
        meta.pop(key, None)
    for key in ("manifest", "appended"):
        meta["incremental"].pop(key, None)
    return meta


@pytest.mark.parametrize("write", [write_csv, write_jsonl], ids=["csv", "jsonl"])
def test_an_appended_night_parses_only_new_and_failed_rows_and_publishes_what_the_full_pairing_does(
        write, version_rows, shardsmith, tmp_path):
    rows = version_rows()
    broken = ("train", str(tmp_path / "fixed-tonight.jpg"), "cat")  # fails in the first version, fixed later
    still_broken = ("train", str(tmp_path / "missing.jpg"), "dog")
    copy = ("test", str(tmp_path / "copy-of-first.jpg"), "cat")  # a new copy of a published image
    shutil.copyfile(rows[0][1], copy[1])
    first = [*rows[:60], broken, still_broken]
    out = tmp_path / "out"
    manifest = write(tmp_path / ("m.csv" if write is write_csv else "m.jsonl"), first)
    meta = night(shardsmith, manifest, out)
    data = manifest.read_bytes()
    assert meta["incremental"]["manifest"] == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                                               "lines": data.count(b"\n"), "rows": 62}
    assert meta["num_errors"] == 2
    shutil.copyfile(rows[1][1], broken[1])
    paired = tmp_path / "paired"
    shutil.copytree(out, paired)

    tonight = [*first, *rows[60:], copy]
    write(manifest, tonight)
    appended = night(shardsmith, manifest, out)
    assert appended["incremental"]["appended"] is True
    # The same rows, every line ending in \r\n: the bytes differ, so every row is paired as before.
    write(manifest, tonight, "\r\n")
    full = night(shardsmith, manifest, paired)
    assert full["incremental"]["appended"] is False

    assert comparable(appended) == comparable(full)
    assert build_files(out, appended) == build_files(paired, full)
    change = appended["incremental"]
    assert (change["num_carried_rows"], change["num_added_rows"], change["num_added_records"]) == (60, 33, 32)
    assert (change["num_failed_again"], appended["num_errors"], appended["num_input_rows"]) == (1, 1, 93)
    assert appended["duplicates"]["num_groups"] == 2  # the new copy, and the fixed image (a copy of another)


def test_a_manifest_whose_old_lines_changed_is_paired_in_full(version_rows, shardsmith, tmp_path):
    rows = version_rows()
    out, manifest = tmp_path / "out", tmp_path / "m.csv"
    night(shardsmith, write_csv(manifest, rows[:60]), out)
    write_csv(manifest, [*rows[:10], *rows[11:60], *rows[60:70]])  # one row removed, ten appended
    meta = night(shardsmith, manifest, out)
    assert meta["incremental"]["appended"] is False
    assert (meta["incremental"]["num_removed_rows"], meta["num_examples"]) == (1, 69)


def test_a_night_after_a_version_whose_errors_do_not_add_up_reads_its_manifest_whole(
        version_rows, shardsmith, tmp_path):
    rows = version_rows()
    out, manifest = tmp_path / "out", tmp_path / "m.csv"
    missing = ("train", str(tmp_path / "missing.jpg"), "dog")
    meta = night(shardsmith, write_csv(manifest, [*rows[:60], missing]), out)
    (out / BUILDS_DIR / meta["build_id"] / "errors.jsonl").write_text("")  # its failed row's line is lost
    write_csv(manifest, [*rows[:60], missing, *rows[60:65]])
    meta = night(shardsmith, manifest, out)
    assert meta["incremental"]["appended"] is False
    assert (meta["num_examples"], meta["num_errors"], meta["num_input_rows"]) == (65, 1, 66)


def test_a_read_fails_when_the_bytes_it_checked_change_before_it_parses_them(tmp_path):
    manifest = write_csv(tmp_path / "m.csv", [("train", "a.jpg", "cat"), ("train", "b.jpg", "dog")])
    data = manifest.read_bytes()
    digest = ManifestDigestEntry(bytes=len(data), sha256=hashlib.sha256(data).hexdigest(), lines=3, rows=2)
    errors = tmp_path / "errors.jsonl"
    errors.write_text("")
    plan = AppendedPlan(digest, num_rows=2, errors_path=str(errors))
    selection = plan.selection(str(manifest))
    assert selection is not None and not selection.parses(3) and selection.parses(4)
    manifest.write_bytes(data.replace(b"b.jpg", b"c.jpg") + b"train,d.jpg,emu\n")
    read = ManifestRead(selection, expected=digest.sha256, expected_bytes=digest.bytes)
    with pytest.raises(ManifestChanged):
        list(manifest_lines(str(manifest), read))
    assert plan.selection(str(manifest)) is None  # checked again, the changed file is read whole


@pytest.mark.parametrize("digest", [
    None, {"bytes": 10}, ManifestDigestEntry(bytes=-1, sha256="0" * 64, lines=1, rows=1),
    ManifestDigestEntry(bytes=10, sha256="../x", lines=1, rows=1),
    ManifestDigestEntry(bytes=10, sha256="0" * 64, lines=True, rows=1),
])
def test_a_recorded_digest_that_is_not_one_is_never_trusted(digest):
    assert not valid_digest(digest)
    assert valid_digest(ManifestDigestEntry(bytes=10, sha256="0" * 64, lines=1, rows=1))


def test_an_appended_night_of_copies_of_images_the_version_holds_several_times_reads_as_a_full_build(
        version_rows, shardsmith, tmp_path):
    # A real export's shape: each image under 1 to 6 names (hard links and copies), then a night appending more
    # copies of them. The version's duplicate summary (published groups grown by the night) must be a full build's.
    rows = version_rows()[:12]
    copied = []
    for i, (_, uri, label) in enumerate(rows):
        for n in range(i % 6):
            name = tmp_path / f"copy-{i}-{n}.jpg"
            (os.link if n % 2 else shutil.copyfile)(uri, name)
            copied.append((("train", "validation", "test")[n % 3], str(name), label))
    tonight = []
    for i, (_, uri, label) in enumerate(rows[:8]):
        name = tmp_path / f"tonight-{i}.jpg"
        shutil.copyfile(uri, name)
        tonight.append(("test" if i % 2 else "train", str(name), label))
    out, manifest = tmp_path / "out", tmp_path / "m.csv"
    night(shardsmith, write_csv(manifest, [*rows, *copied]), out)
    write_csv(manifest, [*rows, *copied, *tonight])
    appended = night(shardsmith, manifest, out)
    assert appended["incremental"]["appended"] is True
    full = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "full", "--name", "pets",
                      "--num_shards", "train=2,validation=1,test=1", "--max_error_fraction", "0.5")
    assert full.code == 0, full.err
    whole = json.loads((tmp_path / "full" / METADATA_FILE).read_text())
    assert appended["duplicates"] == whole["duplicates"]
    assert appended["duplicates"]["num_groups"] == 12 and appended["duplicates"]["num_extra_copies"] == 38


def test_a_night_whose_only_new_row_fails_publishes_a_version_that_lists_it(version_rows, shardsmith, tmp_path):
    rows = version_rows()[:30]
    out, manifest = tmp_path / "out", tmp_path / "m.csv"
    first = night(shardsmith, write_csv(manifest, rows), out)
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(Path(rows[0][1]).read_bytes()[:200])
    write_csv(manifest, [*rows, ("train", str(truncated), "cat")])
    # A user's files named as the night's empty shard would be, in the folder of the version it is built on.
    look_alikes = {out / BUILDS_DIR / first["build_id"] / f"pets-train.tfrecord-g2-{i:05d}-of-{n:05d}{end}"
                   for n in (1, 2) for i in range(n) for end in ("", ".idx")}
    for path in look_alikes:
        path.write_bytes(b"a user's file")
    second = night(shardsmith, manifest, out, max_error_fraction="1")  # 1 of 1 new rows failed: within budget
    assert second["build_id"] != first["build_id"]
    assert (second["num_examples"], second["num_errors"], second["num_input_rows"]) == (30, 1, 31)
    shards = [shard for split in second["splits"].values() for shard in split["shards"]]
    assert all(shard["num_examples"] for shard in shards), "no empty shard of tonight's for readers to open"
    assert second["splits"]["train"]["num_shards"] == first["splits"]["train"]["num_shards"] == 2
    assert not list((out / BUILDS_DIR / second["build_id"]).glob("*.tfrecord*")), "nor its files left behind"
    assert all(path.read_bytes() == b"a user's file" for path in look_alikes), "a user's look-alike files stay"
    verified = shardsmith("verify", out)
    assert verified.code == 0, verified.out + verified.err
    listed = [json.loads(line)["uri"] for line in (out / BUILDS_DIR / second["build_id"] / "errors.jsonl")
              .read_text().splitlines()]
    assert listed == [str(truncated)]
    # The next night with the same manifest: the row failed in the version, so nothing changed.
    third = night(shardsmith, manifest, out)
    assert third["build_id"] == second["build_id"]


def test_skipped_lines_are_counted_as_rows_exactly_when_they_hold_text(tmp_path):
    """The verified prefix's lines are counted without being parsed: a line counts as a data row unless it is
    blank as text (ASCII or Unicode spaces; the first line's byte order mark is not text), a header line is
    never counted, and an over-long line counts. The quick test of a line's first byte agrees with the full one
    on every kind of line, in every position."""
    import codecs
    import random

    from shardsmith.manifest.appended import LineSelection, skipped_line_counts
    from shardsmith.manifest.text_lines import lines_of

    kinds = [b"train,a.jpg,cat", b"", b"   ", b"\t", b"\tx,y,z", b" lead,a.jpg,cat", "\u3000".encode(),
             "\u3000x".encode(), "é,a.jpg,cat".encode(), b"\x7f", b"~x", None, codecs.BOM_UTF8, codecs.BOM_UTF8 + b"a"]
    rng = random.Random(11)
    for trial in range(600):
        # Mostly rows, so that whole blocks of them are counted at once, in blocks as line_blocks makes them.
        lines = [b"val,b.jpg,dog" if rng.random() < 0.6 else rng.choice(kinds) for _ in range(rng.randrange(1, 40))]
        ending = rng.choice((b"\n", b"\r\n", b"\r"))
        blocks, block = [], b""
        for line in lines:
            if line is None:
                blocks += [block] * bool(block) + [None]
                block = b""
                continue
            block += line + ending
            if rng.random() < 0.3:
                blocks.append(block)
                block = b""
        blocks += [block] * bool(block)
        after, uncounted = rng.randrange(0, len(lines) + 1), rng.choice((0, 1, 2))
        also = frozenset(n for n in range(1, after + 1) if rng.random() < 0.1)
        read = ManifestRead(selection=LineSelection(after, also, uncounted))
        parsed = list(lines_of(read, iter(blocks), limit=100))
        expected_skipped = sum(1 for number, line in enumerate(lines, start=1)
                               if number <= after and number not in also and number != uncounted
                               and (line is None or skipped_line_counts(number, line)))
        assert parsed == [(n, lines[n - 1]) for n in range(1, len(lines) + 1) if n > after or n in also], trial
        assert (read.skipped, read.lines) == (expected_skipped, len(lines)), (trial, lines, after, also, uncounted)
    stopped = ManifestRead(selection=LineSelection(3))
    reader = lines_of(stopped, iter([b"a\nb\n", b"\n", b"d\ne\n"]), limit=100)
    assert next(reader) == (4, b"d")
    reader.close()  # a reader that stops early: what it read is counted
    assert (stopped.skipped, stopped.lines) == (2, 4)
