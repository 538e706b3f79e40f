"""A line manifest parsed by the build's writer processes (shardsmith/shard_writer/parallel_parse.py) gives the rows and
error rows one parse in the launcher gives, in file order, whatever its lines hold; each row found on disk comes
with its size, which the LookupSizes stage then keeps; a writer process killed while it parses costs nothing; a
build with writer processes publishes what a build without them does, and leaves no process behind."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

import shardsmith.shard_writer.parallel_parse as parallel_parse
from shardsmith.manifest import ManifestFormat, ManifestParser, ManifestRead, resolve_sources
from shardsmith.rows import ManifestRow
from shardsmith.shard_writer import shard_worker
from shardsmith.shard_writer.parallel_parse import RowHelpers, parse_in_helpers
from tests.conftest import files_dir, shard_bytes


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 7 lines after the first 5: a manifest of a few dozen lines crosses many chunks and every path
    (parsed here while the processes start, sent, taken back when not started)."""
    monkeypatch.setattr(parallel_parse, "IN_PROCESS_LINES", 5)
    monkeypatch.setattr(parallel_parse, "CHUNK_LINES", 7)


@pytest.fixture
def helpers(tmp_path):
    folder = str(tmp_path / "build")
    yield RowHelpers(folder, 2, look_up_sizes=True)
    shard_worker.close_build_pool(folder)


def _hostile_lines(folder: Path) -> list[bytes]:
    """Lines of every kind a manifest's reader turns into a row or an error row, mixed."""
    (folder / "img").mkdir()
    for i in range(40):
        (folder / "img" / f"{i}.jpg").write_bytes(b"x" * (i + 1))
    (folder / "img" / "empty.jpg").write_bytes(b"")
    (folder / "img" / "folder.jpg").mkdir()
    kinds = [
        lambda i: f"train,img/{i}.jpg,cat",
        lambda i: f"validation,{folder}/img/{i}.jpg,dog",
        lambda i: f",img/{i}.jpg,emu",
        lambda i: f"test,img/missing-{i}.jpg,cat",
        lambda i: "train,img/empty.jpg,cat",
        lambda i: "train,img/folder.jpg,cat",
        lambda i: "",
        lambda i: "   ",
        lambda i: f'train,"img/{i}.jpg,cat',
        lambda i: f"train,img/{i}.jpg",
        lambda i: f"train,img/{i}.jpg,cat,extra",
        lambda i: f"sometimes,img/{i}.jpg,cat",
        lambda i: f"train,img/{i}.jpg,",
        lambda i: f"train,img/\0{i}.jpg,cat",
        lambda i: "train,img/caf\xe9.jpg,cat",
    ]
    rng = random.Random(5)
    lines = [b"split,image_uri,label"]
    for i in range(90):
        lines.append(rng.choice(kinds)(i % 40).encode())
    lines[30] = b"train,img/1.jpg,\xff\xfe"  # not UTF-8
    lines[50] = b"train,img/2.jpg," + b"a" * ((1 << 20) + 1)  # over MAX_MANIFEST_LINE_BYTES
    return lines


@pytest.mark.parametrize("line_end", [b"\n", b"\r\n", b"\r"])
def test_a_hostile_csv_parsed_by_writer_processes_gives_what_one_parse_gives(tmp_path, small_chunks, helpers,
                                                                             line_end):
    path = tmp_path / "manifest.csv"
    path.write_bytes(b"\xef\xbb\xbf" + line_end.join(_hostile_lines(tmp_path)) + line_end)
    _assert_same_as_one_parse(path, helpers)


def test_a_csv_whose_header_comes_after_the_lines_parsed_here_is_read_by_it(tmp_path, small_chunks, helpers):
    """The layout (header or not) is the first well-formed line's: the processes get it once it is known."""
    lines = [b"", b'"unclosed', b"", b'"x', b"  ", b'"y', b"split,image_uri,label"] + _hostile_lines(tmp_path)[1:]
    path = tmp_path / "manifest.csv"
    path.write_bytes(b"\n".join(lines))
    rows = _assert_same_as_one_parse(path, helpers)
    assert not any(row.line == 7 for row in rows)  # the header: no row


def test_a_hostile_json_lines_manifest_parsed_by_writer_processes_gives_what_one_parse_gives(
        tmp_path, small_chunks, helpers):
    _hostile_lines(tmp_path)
    rng = random.Random(8)
    kinds = [
        lambda i: json.dumps({"split": "train", "image_uri": f"img/{i}.jpg", "label": "cat"}),
        lambda i: json.dumps({"image_uri": f"img/missing-{i}.jpg", "label": ["a", "b"]}),
        lambda i: json.dumps([1, 2]),
        lambda i: "{not json",
        lambda i: "[" * 100_000,
        lambda i: json.dumps({"split": {"x": 1}, "image_uri": f"img/{i}.jpg", "label": "cat"}),
        lambda i: "",
    ]
    path = tmp_path / "manifest.jsonl"
    path.write_text("\n".join(rng.choice(kinds)(i % 40) for i in range(80)) + "\n")
    _assert_same_as_one_parse(path, helpers)


def test_the_read_of_a_version_counts_the_same_bytes_and_lines(tmp_path, small_chunks, helpers):
    path = tmp_path / "manifest.csv"
    path.write_bytes(b"\n".join(_hostile_lines(tmp_path)))  # no final line end
    source = resolve_sources([str(path)])[0]
    parser = ManifestParser(ManifestFormat())
    reads = [ManifestRead(), ManifestRead()]
    alone = list(parser.parse(source, reads[0]))
    helped = list(parse_in_helpers(parser.line_parser(source), helpers, reads[1]))
    assert len(helped) == len(alone)
    assert reads[1].digest(len(helped)) == reads[0].digest(len(alone))
    assert (reads[1].lines, reads[1].num_bytes) == (reads[0].lines, reads[0].num_bytes)


def test_a_writer_process_killed_while_it_parses_is_replaced_and_the_lines_parsed_again(tmp_path, small_chunks,
                                                                                        helpers):
    path = tmp_path / "manifest.csv"
    path.write_bytes(b"\n".join(_hostile_lines(tmp_path)))
    pool = shard_worker.build_pool(helpers.build_folder, helpers.processes)
    for worker in list(pool._workers):
        worker.kill()  # each one's next job meets a dead process, which is replaced: the job runs again
    _assert_same_as_one_parse(path, helpers)


def test_a_build_with_writer_processes_publishes_what_a_build_without_them_does(label_sorted_set, shardsmith,
                                                                              tmp_path):
    """285 rows (more than the launcher parses itself), with missing and empty image files among them."""
    rows = list(label_sorted_set.rows)
    rows[3] = (rows[3][0], "img/not-there.jpg", rows[3][2])
    (tmp_path / "empty.jpg").write_bytes(b"")
    rows[200] = (rows[200][0], str(tmp_path / "empty.jpg"), rows[200][2])
    manifest = tmp_path / "data" / "manifest.csv"
    manifest.parent.mkdir()
    manifest.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{label}\n" for s, u, label in rows))
    (tmp_path / "data" / "img").symlink_to(label_sorted_set.root / "img")
    built = {}
    for writers in ("0", "2"):
        out = tmp_path / f"out-{writers}"
        result = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "pets",
                            "--writer_processes", writers)
        assert result.code == 0, result.err
        errors = (files_dir(out) / "errors.jsonl").read_text()
        built[writers] = (shard_bytes(out), errors)
        assert "file not found" in errors and "file is empty" in errors
    assert built["2"] == built["0"]
    assert not shard_worker._BUILD_POOLS  # closed with the build


def _assert_same_as_one_parse(path: Path, helpers: RowHelpers) -> list:
    source = resolve_sources([str(path)])[0]
    parser = ManifestParser(ManifestFormat())
    alone = list(parser.parse(source))
    helped = list(parse_in_helpers(parser.line_parser(source), helpers))
    assert len(alone) > 3 * parallel_parse.CHUNK_LINES  # many chunks
    assert [_unsized(item) for item in helped] == alone
    for item in helped:
        if isinstance(item, ManifestRow):
            found = os.path.isfile(item.resolved_uri) if "\0" not in item.resolved_uri else False
            assert item.size == (os.path.getsize(item.resolved_uri) if found else -1), item
    assert any(isinstance(item, ManifestRow) and item.size > 0 for item in helped)
    return helped


def _unsized(item):
    return item.replaced(size=-1) if isinstance(item, ManifestRow) else item


def test_a_parse_job_says_which_lines_of_which_manifest_it_parses(tmp_path):
    (tmp_path / "m.csv").write_text("img/a.jpg,cat\n")
    source = resolve_sources([str(tmp_path / "m.csv")])[0]
    parser = ManifestParser(ManifestFormat()).line_parser(source)
    described = shard_worker._Described((parallel_parse.parse_chunk, parser, [(300, "a"), (301, None)], True))
    assert str(described) == f"lines 300-301 of manifest {source.path}"
    assert str(shard_worker._Described((parallel_parse.parse_chunk, parser, [], False))).startswith("the start of")


def test_a_build_pool_started_to_parse_grows_to_the_writers_asked_for_and_closes_with_its_jobs(tmp_path):
    folder = str(tmp_path / "build")
    try:
        pool = shard_worker.build_pool(folder, 1)
        early = pool.submit(os.getpid)
        assert shard_worker.build_pool(folder, 3) is pool and pool.processes == 3
        assert shard_worker.build_pool(folder, 2) is pool and pool.processes == 3  # never shrunk
        pids = {pool.submit(os.getpid).result(timeout=60) for _ in range(12)} | {early.result(timeout=60)}
        assert len(pids) >= 2 and os.getpid() not in pids  # its own processes, more than the first
    finally:
        shard_worker.close_build_pool(folder)
    assert folder not in shard_worker._BUILD_POOLS and all(w.poll() is not None for w in pool._workers)


def test_a_killed_build_pool_starts_no_more_writers(tmp_path):
    """An interrupted build kills its writers; WriteShards asking for more afterwards starts none."""
    folder = str(tmp_path / "build")
    try:
        pool = shard_worker.build_pool(folder, 1)
        pool.kill()
        assert shard_worker.build_pool(folder, 3) is pool and pool.processes == 1 and len(pool._workers) == 1
    finally:
        shard_worker.close_build_pool(folder)
