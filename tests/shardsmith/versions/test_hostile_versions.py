"""metadata.json and row lists are input on the paths that add to a version or rewrite it (`build --incremental`,
`compact`): an id or file name that leads out of the output folder is refused before anything is read, a row list
that does not describe its shard fails the build or compaction before anything is published, and a lost row list
is rebuilt from its shard's records where they hold it exactly (docs/versions.md, Trust)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from shardsmith import records
from shardsmith.format.naming import BUILDS_DIR, LOCK_FILE, METADATA_FILE

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SHARDS = ("--num_shards", "train=2,validation=1,test=1")
SPLITS = ("train", "validation", "test")


def build(shardsmith, csv_manifest, out: Path, day: str, day_rows, *extra: str):
    return shardsmith("build", "--manifest", csv_manifest(day, day_rows), "--output_dir", out, "--name",
                      "pets", "--incremental", *SHARDS, *extra)


def built(shardsmith, csv_manifest, out: Path, day: str, day_rows, *extra: str) -> dict:
    done = build(shardsmith, csv_manifest, out, day, day_rows, *extra)
    assert done.code == 0, done.err + done.out
    return metadata(out)


def metadata(out: Path) -> dict:
    return json.loads((out / METADATA_FILE).read_text())


def folder_listing(out: Path) -> list[str]:
    return sorted(str(p.relative_to(out)) for p in out.rglob("*"))


def row_list(out: Path, meta: dict, split: str, number: int) -> Path:
    shard = meta["splits"][split]["shards"][number]
    return out / BUILDS_DIR / shard.get("build", meta["build_id"]) / "rows" / f"{shard['file']}.jsonl"


def file_names(out: Path, split: str) -> list[str]:
    return sorted(r["image/filename"].decode() for r in records(out, split))


# A plain progress line, which a command that runs for more than a few seconds (a loaded machine) prints to a log:
# a build's (`shardsmith: progress: ...`) or a command's (`shardsmith: compact: 0 of 75 records copied`).
PROGRESS_LINE = re.compile(r"shardsmith: (progress: |\w+: \d+( of \d+)? \w+ \w+)")


def one_check_failed_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not PROGRESS_LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("shardsmith check failed: "), err
    assert "Traceback" not in err
    return lines[0]


def unchanged(out: Path, published: dict, listing: list[str] | None = None) -> None:
    """Nothing was published and no lock is left; with `listing` (a refusal before the pipeline started), no
    file was written either."""
    assert metadata(out) == published
    assert not (out / LOCK_FILE).exists()
    if listing is not None:
        assert [p for p in folder_listing(out) if p not in listing] == []


# Item 4: ids and file names from metadata.json ----------------------------------------------------------------

def _shard(meta: dict) -> dict:
    return meta["splits"]["train"]["shards"][0]


TAMPERED = {  # the entry a refusal names -> how metadata.json is changed to lead to tmp_path/outside
    "build_id": lambda meta: meta.update(build_id="../../outside"),
    "splits.train.shards[0].build": lambda meta: _shard(meta).update(build="../../outside"),
    "splits.train.shards[0].file": lambda meta: _shard(meta).update(file="../../../outside/" + _shard(meta)["file"]),
    "splits.train.shards[0].index": lambda meta: _shard(meta).update(
        index="../../../outside/" + _shard(meta)["file"] + ".idx"),
}


@pytest.fixture
def outside(rows, shardsmith, csv_manifest, tmp_path) -> list[tuple[str, str, str]]:
    """A real build folder of other rows at tmp_path/outside, its shards named as the tested versions' are: a
    metadata.json that leads there would find row lists and shards to carry. Returns its rows."""
    other_rows = rows[60:]
    other = tmp_path / "other"
    meta = built(shardsmith, csv_manifest, other, "other", other_rows)
    shutil.copytree(other / BUILDS_DIR / meta["build_id"], tmp_path / "outside")
    return other_rows


@pytest.mark.parametrize("entry", ["build_id", "splits.train.shards[0].build", "splits.train.shards[0].file"])
def test_an_incremental_build_refuses_metadata_that_leads_out_of_the_folder(entry, rows, outside, shardsmith,
                                                                            csv_manifest, tmp_path):
    out = tmp_path / "out"
    built(shardsmith, csv_manifest, out, "d1", rows[:60])
    published = metadata(out)
    TAMPERED[entry](published)
    (out / METADATA_FILE).write_text(json.dumps(published))
    listing = folder_listing(out)
    # The night's manifest lists the outside rows too: carried from a folder outside, they would be published.
    done = build(shardsmith, csv_manifest, out, "d2", rows[:60] + outside, "--max_removed_fraction", "1")
    assert done.code == 2, done.err + done.out
    assert done.err.startswith(f"shardsmith: error: {out}/metadata.json: {entry}: ") and "Traceback" not in done.err
    assert len(done.err.strip().splitlines()) == 1 and "nothing was read or written" in done.err
    unchanged(out, published, listing)  # (on a build that took them, the outside rows were a version's records)


@pytest.mark.parametrize("entry", list(TAMPERED))
def test_compact_refuses_metadata_that_leads_out_of_the_folder(entry, rows, outside, shardsmith, csv_manifest,
                                                               tmp_path):
    out = tmp_path / "out"
    built(shardsmith, csv_manifest, out, "d1", rows[:60])
    built(shardsmith, csv_manifest, out, "d2", rows[1:60])  # a second generation: the rewritten shards
    published = metadata(out)
    TAMPERED[entry](published)
    (out / METADATA_FILE).write_text(json.dumps(published))
    listing = folder_listing(out)
    done = shardsmith("compact", out)
    assert done.code == 2, done.err + done.out
    assert done.err.startswith(f"shardsmith: error: {out}/metadata.json: {entry}: ") and "Traceback" not in done.err
    assert len(done.err.strip().splitlines()) == 1
    unchanged(out, published, listing)


# Item 5: row lists -------------------------------------------------------------------------------------------

def test_a_row_list_one_line_short_fails_the_next_night_before_it_publishes(rows, shardsmith, csv_manifest, tmp_path):
    out = tmp_path / "out"
    published = built(shardsmith, csv_manifest, out, "d1", rows[:60])
    path = row_list(out, published, "train", 0)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))  # its last record's row looks new: it would be published twice
    done = build(shardsmith, csv_manifest, out, "d2", rows)
    assert done.code == 1, done.err + done.out
    line = one_check_failed_line(done.err)
    assert f"{path} lists {len(lines) - 1} rows, but metadata.json counts {len(lines)} records" in line
    assert "nothing was published" in line
    unchanged(out, published)


@pytest.mark.parametrize("writers", ["0", "2"])  # row lists read in the launcher, or by shard writer processes
def test_a_row_list_one_line_short_fails_compaction(writers, rows, shardsmith, csv_manifest, tmp_path):
    out = tmp_path / "out"
    built(shardsmith, csv_manifest, out, "d1", rows[:60])
    published = built(shardsmith, csv_manifest, out, "d2", rows[:70])
    path = row_list(out, published, "train", 0)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:-1]))
    done = shardsmith("compact", out, "--writer_processes", writers)
    assert done.code == 1, done.err + done.out
    assert f"{path} lists {len(lines) - 1} rows, but metadata.json counts {len(lines)}" in one_check_failed_line(
        done.err)
    unchanged(out, published)


def _swap_lines(path: Path, first: int, second: int) -> list[list]:
    """Swaps two lines of a row list (whose records differ in URI); returns the lines as they were, parsed."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[first], lines[second] = lines[second], lines[first]
    path.write_bytes(b"".join(lines))
    return [json.loads(line) for line in lines]


def _two_nights(shardsmith, csv_manifest, out: Path, rows) -> dict:
    """A version in two generations (60 rows, then 15 more): one compaction has work to do."""
    built(shardsmith, csv_manifest, out, "d1", rows[:60])
    return built(shardsmith, csv_manifest, out, "d2", rows[:75])


def _refused_compaction(shardsmith, out: Path, writers: str) -> str:
    """The one line of a compaction that must fail its dataset check (exit 1)."""
    done = shardsmith("compact", out, "--writer_processes", writers)
    assert done.code == 1, done.err + done.out
    return one_check_failed_line(done.err)


@pytest.mark.parametrize("writers", ["0", "2"])  # copied in the launcher, or by shard writer processes
def test_two_swapped_lines_of_a_row_list_fail_compaction_before_it_publishes(writers, rows, shardsmith, csv_manifest,
                                                                             tmp_path):
    out = tmp_path / "out"
    published = _two_nights(shardsmith, csv_manifest, out, rows)
    path = row_list(out, published, "train", 0)
    swapped = _swap_lines(path, 0, 1)
    line = _refused_compaction(shardsmith, out, writers)
    assert f"{path} line " in line and "does not describe record" in line and "nothing was published" in line
    assert repr(swapped[0][4]) in line or repr(swapped[1][4]) in line  # the URI that differs
    unchanged(out, published)


@pytest.mark.parametrize("writers", ["0", "2"])
def test_a_row_list_line_whose_sha256_is_not_its_records_fails_compaction(writers, rows, shardsmith, csv_manifest,
                                                                          tmp_path):
    out = tmp_path / "out"
    published = _two_nights(shardsmith, csv_manifest, out, rows)
    path = row_list(out, published, "train", 0)
    lines = path.read_bytes().splitlines(keepends=True)
    fields = json.loads(lines[2])
    true_sha256 = fields[5]
    fields[5] = ("0" if true_sha256[0] != "0" else "1") + true_sha256[1:]  # its first digit, which compaction checks
    lines[2] = (json.dumps(fields) + "\n").encode()
    path.write_bytes(b"".join(lines))
    line = _refused_compaction(shardsmith, out, writers)
    assert f"{path} line 3 does not describe record 2 of its shard" in line and "sha256 " in line, line
    assert f"the record's {true_sha256[:16]}" in line
    unchanged(out, published)


def test_two_swapped_lines_of_a_row_list_fail_the_rewrite_that_would_drop_the_wrong_record(rows, shardsmith,
                                                                                           csv_manifest, tmp_path):
    out = tmp_path / "out"
    published = built(shardsmith, csv_manifest, out, "d1", rows[:60])
    path = row_list(out, published, "train", 0)
    swapped = _swap_lines(path, 0, 1)
    gone = next(r for r in rows[:60] if r[1] == swapped[1][4])  # record 0's row: the night removes it
    done = build(shardsmith, csv_manifest, out, "d2", [r for r in rows[:60] if r != gone])
    assert done.code == 1, done.err + done.out
    line = one_check_failed_line(done.err)
    assert f"{path} line 1 does not describe record 0 of its shard" in line and gone[1] in line
    unchanged(out, published)


def test_a_lost_row_list_is_rebuilt_from_its_shards_records_into_the_new_build(rows, shardsmith, csv_manifest,
                                                                               tmp_path):
    out = tmp_path / "out"
    first = built(shardsmith, csv_manifest, out, "d1", rows[:60])
    intact = tmp_path / "intact"
    shutil.copytree(out, intact)
    lost = row_list(out, first, "train", 1)
    written = lost.read_bytes()
    lost.unlink()
    night = rows[:60] + rows[60:70]
    meta = built(shardsmith, csv_manifest, out, "d2", night)
    for split in SPLITS:
        assert file_names(out, split) == sorted(uri for s, uri, _ in night if s == split), split
    assert meta["num_examples"] == len(night)
    # The shard is rewritten, with its row list rebuilt exactly as the build wrote it, into the new build's folder;
    # the published build's folder is left as it was.
    shard = meta["splits"]["train"]["shards"][1]
    assert "build" not in shard and shard["file"] == first["splits"]["train"]["shards"][1]["file"]
    assert row_list(out, meta, "train", 1).read_bytes() == written
    assert not lost.exists()
    assert "every check holds" in shardsmith("verify", out).out
    # The same night on the intact copy publishes the same records.
    built(shardsmith, csv_manifest, intact, "d2", night)
    for split in SPLITS:
        assert file_names(intact, split) == file_names(out, split)
    # A night with nothing new publishes the repair too (else every later night would rebuild the list again),
    # and the next one then finds nothing to change.
    row_list(out, meta, "train", 1).unlink()
    repaired = built(shardsmith, csv_manifest, out, "d3", night)
    assert repaired["build_id"] != meta["build_id"] and repaired["num_examples"] == len(night)
    assert row_list(out, repaired, "train", 1).read_bytes() == written
    done = build(shardsmith, csv_manifest, out, "d3", night)
    assert done.code == 0 and f"nothing changed since version {repaired['build_id']}" in done.out, done.err


def test_compaction_rebuilds_a_lost_row_list_and_writes_the_same_bytes(rows, shardsmith, csv_manifest, tmp_path):
    out = tmp_path / "out"
    built(shardsmith, csv_manifest, out, "d1", rows[:60])
    published = built(shardsmith, csv_manifest, out, "d2", rows[2:75])
    intact = tmp_path / "intact"
    shutil.copytree(out, intact)
    row_list(out, published, "train", 0).unlink()
    for folder in (out, intact):
        done = shardsmith("compact", folder)
        assert done.code == 0, done.err + done.out

    def files(folder: Path) -> dict[str, bytes]:
        meta = metadata(folder)
        build_folder = folder / BUILDS_DIR / meta["build_id"]
        return {p.name: p.read_bytes() for p in build_folder.rglob("*") if "tfrecord" in p.name}

    assert files(out) == files(intact) and files(out)  # shards, index files and row lists


def test_a_lost_row_list_that_records_cannot_give_back_names_the_fix(rows, shardsmith, csv_manifest, tmp_path):
    out = tmp_path / "out"
    published = built(shardsmith, csv_manifest, out, "d1", rows[:60], "--task", "multi_label")
    lost = row_list(out, published, "train", 0)
    lost.unlink()
    done = build(shardsmith, csv_manifest, out, "d2", rows, "--task", "multi_label")
    assert done.code == 1, done.err + done.out
    line = one_check_failed_line(done.err)
    assert f"{lost} is missing and cannot be rebuilt from its shard's records (a multi_label record" in line
    assert "rebuild it in full once with --incremental --overwrite" in line
    unchanged(out, published)


def test_a_row_list_line_is_rebuilt_only_from_a_record_that_holds_its_files_bytes():
    from shardsmith.format.example import ImageRecord, encode_example
    from shardsmith.format.row_list import RowListError
    from shardsmith.rows import ManifestRow
    from shardsmith.rows.row_identity import row_identity
    from shardsmith.versions.row_check import listed_row

    image = b"\xff\xd8 not really a jpeg"
    digest = hashlib.sha256(image).hexdigest()
    record = encode_example(ImageRecord("img/a.jpg", "jpeg", 4, 3, 3, digest, encoded=image, label_ids=(1,),
                                        label_texts=("dog",)))
    row = listed_row(record, "validation", "rows/x.jsonl", 0)
    identity = row_identity(ManifestRow("m.csv", 0, 7, "img/a.jpg", "/data/img/a.jpg", "validation", "dog"))
    assert (row.identity, row.lines, row.label, row.size, row.uri, row.sha256) == (
        identity, 1, "dog", len(image), "img/a.jpg", digest)
    reencoded = encode_example(ImageRecord("img/a.jpg", "jpeg", 4, 3, 3, digest, encoded=image[:-1],
                                           label_ids=(1,), label_texts=("dog",)))
    with pytest.raises(RowListError, match="re-encoded image"):
        listed_row(reencoded, "validation", "rows/x.jsonl", 3)
    path_mode = encode_example(ImageRecord("img/a.jpg", "jpeg", 4, 3, 3, digest, uri="/data/img/a.jpg",
                                           num_bytes=1234, label_ids=(1,), label_texts=("dog",)))
    assert listed_row(path_mode, "validation", "rows/x.jsonl", 0).size == 1234


def test_feature_values_reads_what_parse_example_reads():
    from shardsmith.format.example import (
        FILENAME,
        LABEL_TEXT,
        SHA256,
        ImageRecord,
        encode_example,
        feature_values,
        parse_example,
    )

    record = encode_example(ImageRecord("img/ç.jpg", "jpeg", 4, 3, 3, "ab" * 32, encoded=b"x" * 9000,
                                        label_ids=(0, 2), label_texts=("a", "c")))
    parsed = parse_example(record)
    assert feature_values(record, (FILENAME, SHA256, LABEL_TEXT, "image/not-there")) == {
        key: parsed[key] for key in (FILENAME, SHA256, LABEL_TEXT)}


def test_retention_keeps_what_the_top_level_metadata_lists_whatever_the_versions_own_copy_says(rows, shardsmith,
                                                                                               csv_manifest, tmp_path):
    """Retention reads each kept version's own metadata.json; the published one's top-level copy, which readers
    follow, counts too: an own copy edited to list no shard must not make the next build remove a folder the
    published version carries shards from."""
    out = tmp_path / "out"
    first = built(shardsmith, csv_manifest, out, "d1", rows[:60], "--keep_builds", "1")
    second = built(shardsmith, csv_manifest, out, "d2", rows[:66], "--keep_builds", "1")  # carries d1's shards
    assert any(shard.get("build") == first["build_id"] for s in second["splits"].values() for shard in s["shards"])
    own = out / BUILDS_DIR / second["build_id"] / METADATA_FILE
    edited = json.loads(own.read_text())
    edited["splits"] = {}
    own.write_text(json.dumps(edited))
    built(shardsmith, csv_manifest, out, "d3", rows[:70], "--keep_builds", "1")
    for split in SPLITS:
        assert file_names(out, split) == sorted(uri for s, uri, _ in rows[:70] if s == split), split
    assert "every check holds" in shardsmith("verify", out).out


def test_a_digest_whose_line_count_was_edited_is_never_trusted(rows, shardsmith, csv_manifest, tmp_path):
    out = tmp_path / "out"
    first = built(shardsmith, csv_manifest, out, "m", rows[:60])
    for path in (out / METADATA_FILE, out / BUILDS_DIR / first["build_id"] / METADATA_FILE):
        edited = json.loads(path.read_text())
        edited["incremental"]["manifest"]["lines"] = 999
        path.write_text(json.dumps(edited))
    night = built(shardsmith, csv_manifest, out, "m", rows[:70])  # the same file with ten rows appended
    assert night["incremental"]["appended"] is False  # paired in full, not taken for appended
    assert (night["num_examples"], night["incremental"]["num_added_records"]) == (70, 10)


def test_a_build_dir_that_names_no_build_and_a_symlinked_builds_folder_are_named(rows, shardsmith, csv_manifest,
                                                                                 tmp_path):
    out = tmp_path / "out"
    first = built(shardsmith, csv_manifest, out, "m", rows[:60])
    published = (out / METADATA_FILE).read_text()
    edited = json.loads(published)
    edited["build_dir"] = "builds/x"
    (out / METADATA_FILE).write_text(json.dumps(edited))
    refused = build(shardsmith, csv_manifest, out, "m", rows[:70])
    assert refused.code == 2
    assert "names build folder 'builds/x', which is not a finished build" in refused.err
    assert f"restore it from builds/{first['build_id']}/metadata.json" in refused.err
    assert "earlier shardsmith" not in refused.err
    (out / METADATA_FILE).write_text(published)

    moved = tmp_path / "moved-builds"
    (out / BUILDS_DIR).rename(moved)
    (out / BUILDS_DIR).symlink_to(moved)
    refused = build(shardsmith, csv_manifest, out, "m", rows[:70])
    assert refused.code == 2
    assert f"{out / BUILDS_DIR} is a symbolic link (to {moved})" in refused.err
    assert (out / BUILDS_DIR).is_symlink() and sorted(p.name for p in moved.iterdir()) == [first["build_id"]]
