"""Manifest parsing (shardsmith/manifest/) over real files in tmp_path, through the build's ReadSourceFn: CSV
(with and without a header, odd encodings and line ends), JSON Lines, class folders, URI resolution, and the
ReadManifest stage in a TestPipeline (FnApiRunner). Parquet manifests:
tests/shardsmith/manifest/test_parquet_manifests.py.

Every data row must leave exactly once: as a ManifestRow, or as an ErrorRow of stage "manifest".
"""

from __future__ import annotations

import csv
import json
import math
import os
import pickle
import posixpath
import random
import tracemalloc
from pathlib import Path

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that, equal_to

from shardsmith.manifest import ManifestFormat, Source, resolve_uri, source_kind
from shardsmith.manifest.csv_file import csv_fields
from shardsmith.manifest.text_lines import MAX_MANIFEST_LINE_BYTES, bounded_lines
from shardsmith.rows import ROWS_PER_BATCH, ErrorRow, ManifestRow
from transforms import ERRORS
from transforms.read_manifest import ReadManifest, ReadSourceFn

DEFAULT = ManifestFormat()


def _write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


def _read(path: Path, fmt: ManifestFormat = DEFAULT, index: int = 0, kind: str | None = None):
    """Runs ReadSourceFn over one source; returns (rows, errors) in the order produced."""
    source = Source(str(path), index, kind or source_kind(str(path), path.is_dir()))
    rows, errors = [], []
    for out in ReadSourceFn(fmt).process(source):
        if isinstance(out, beam.pvalue.TaggedOutput):
            assert out.tag == ERRORS
            assert isinstance(out.value, ErrorRow)
            errors.append(out.value)
        else:
            assert isinstance(out, list) and 0 < len(out) <= ROWS_PER_BATCH
            assert all(isinstance(row, ManifestRow) for row in out)
            rows.extend(out)
    return rows, errors


def _lines_once(rows, errors, expected_lines):
    """Every data line comes out exactly once, as a row or as an error."""
    assert sorted([r.line for r in rows] + [e.line for e in errors]) == sorted(expected_lines)


def _triples(rows):
    return [(r.line, r.split, r.uri, r.label) for r in rows]


def _reasons(errors):
    return [(e.line, e.reason) for e in errors]


def _check_error_rows(errors, path: Path | str):
    for error in errors:
        assert error.stage == "manifest" and error.source == str(path) and error.reason
        assert "\n" not in error.reason


# CSV ------------------------------------------------------------------------------------------------------


def test_csv_with_header(tmp_path):
    path = _write(tmp_path / "data" / "m.csv",
                  "split,image_uri,label\n"
                  "train,img/a.jpg,cat\n"
                  "validation,img/b.jpg,dog\n"
                  "test,/abs/c.jpg,cat\n"
                  ",gs://bucket/d.jpg,emu\n")
    rows, errors = _read(path, index=3)
    assert errors == []
    base = tmp_path / "data"
    assert rows == [
        ManifestRow(str(path), 3, 2, "img/a.jpg", str(base / "img/a.jpg"), "train", "cat"),
        ManifestRow(str(path), 3, 3, "img/b.jpg", str(base / "img/b.jpg"), "validation", "dog"),
        ManifestRow(str(path), 3, 4, "/abs/c.jpg", "/abs/c.jpg", "test", "cat"),
        ManifestRow(str(path), 3, 5, "gs://bucket/d.jpg", "gs://bucket/d.jpg", "", "emu"),
    ]
    assert all(r.size == -1 and r.label_id == -1 for r in rows)


def test_csv_without_header_three_columns(tmp_path):
    path = _write(tmp_path / "m.csv", "train,a.jpg,cat\nTEST,b.jpg,dog\n,c.jpg,cat\n")
    rows, errors = _read(path)
    assert errors == []
    assert _triples(rows) == [(1, "train", "a.jpg", "cat"), (2, "test", "b.jpg", "dog"),
                              (3, "", "c.jpg", "cat")]
    assert rows[0].resolved_uri == str(tmp_path / "a.jpg")


def test_csv_without_header_two_columns_automl_style(tmp_path):
    path = _write(tmp_path / "m.csv", "gs://b/a.jpg,cat\ngs://b/b.jpg,dog\nvalidation,gs://b/c.jpg,dog\n")
    rows, errors = _read(path)
    assert errors == []
    assert _triples(rows) == [(1, "", "gs://b/a.jpg", "cat"), (2, "", "gs://b/b.jpg", "dog"),
                              (3, "validation", "gs://b/c.jpg", "dog")]
    assert [r.resolved_uri for r in rows] == ["gs://b/a.jpg", "gs://b/b.jpg", "gs://b/c.jpg"]


def test_csv_custom_column_names_any_order_and_case(tmp_path):
    fmt = ManifestFormat(split_column="Subset", uri_column="path", label_column="class")
    path = _write(tmp_path / "m.csv",
                  "CLASS, Path ,notes,subset\n"
                  "cat,x/a.jpg,\"some, notes\",Train\n"
                  "dog,x/b.jpg,,\n")
    rows, errors = _read(path, fmt)
    assert errors == []
    assert _triples(rows) == [(2, "train", "x/a.jpg", "cat"), (3, "", "x/b.jpg", "dog")]


def test_csv_header_without_split_column(tmp_path):
    path = _write(tmp_path / "m.csv", "image_uri,label\na.jpg,cat\nb.jpg,dog\n")
    rows, errors = _read(path)
    assert errors == []
    assert _triples(rows) == [(2, "", "a.jpg", "cat"), (3, "", "b.jpg", "dog")]


def test_csv_header_without_the_label_column_makes_each_row_an_error(tmp_path):
    path = _write(tmp_path / "m.csv", "split,image_uri,category\ntrain,a.jpg,cat\n\ntrain,b.jpg,dog\n")
    rows, errors = _read(path)
    assert rows == []
    _lines_once(rows, errors, [2, 4])
    assert all("no label column 'label'" in e.reason and "--label_column" in e.detail for e in errors)
    _check_error_rows(errors, path)


def test_csv_utf8_bom_crlf_and_blank_lines(tmp_path):
    content = "\ufeffsplit,image_uri,label\r\ntrain,a.jpg,cat\r\n\r\n   \r\nvalid,b.jpg,dog\r\n\r\n"
    path = _write(tmp_path / "m.csv", content)
    rows, errors = _read(path)
    assert errors == []
    assert _triples(rows) == [(2, "train", "a.jpg", "cat"), (5, "validation", "b.jpg", "dog")]


def test_csv_bom_on_a_headerless_file_is_not_part_of_the_first_field(tmp_path):
    path = _write(tmp_path / "m.csv", "\ufefftrain,a.jpg,cat\r\ntest,b.jpg,dog")  # no final line end
    rows, errors = _read(path)
    assert errors == []
    assert _triples(rows) == [(1, "train", "a.jpg", "cat"), (2, "test", "b.jpg", "dog")]


def test_csv_old_mac_line_ends(tmp_path):
    path = _write(tmp_path / "m.csv", "train,a.jpg,cat\rtest,b.jpg,dog\r\rvalid,c.jpg,emu\r")
    rows, errors = _read(path)
    assert errors == []
    assert _triples(rows) == [(1, "train", "a.jpg", "cat"), (2, "test", "b.jpg", "dog"),
                              (4, "validation", "c.jpg", "emu")]


def test_csv_quoted_fields_and_surrounding_spaces(tmp_path):
    path = _write(tmp_path / "m.csv",
                  'split,image_uri,label\n'
                  'train,"img/a,b.jpg","big, cat"\n'
                  'train,"img/""q"".jpg",dog\n'
                  ' test , img/c.jpg , red fox \n')
    rows, errors = _read(path)
    assert errors == []
    assert _triples(rows) == [(2, "train", "img/a,b.jpg", "big, cat"), (3, "train", 'img/"q".jpg', "dog"),
                              (4, "test", "img/c.jpg", "red fox")]
    assert rows[0].resolved_uri == str(tmp_path / "img/a,b.jpg")


def test_csv_bad_lines_are_one_error_each(tmp_path):
    content = (
        "split,image_uri,label\n"       # 1 header
        "train,a.jpg,cat\n"              # 2 ok
        "train,b.jpg\n"                  # 3 too few columns
        "train,c.jpg,cat,extra\n"        # 4 too many columns
        "train,,cat\n"                   # 5 empty uri
        "trian,d.jpg,cat\n"              # 6 unknown split
        "dev,e.jpg,cat\n"                # 7 unknown split
        "train,f.jpg,\n"                 # 8 empty label
        "train,g.jpg,   \n"              # 9 blank label
        'train,"h.jpg,cat\n'             # 10 unclosed quote
        'train,"i"j.jpg,cat\n'           # 11 text after a closing quote
        "\n"                             # 12 blank: no data row
        "test,k.jpg,dog\n"               # 13 ok: a bad line never swallows the next one
    )
    path = _write(tmp_path / "m.csv", content)
    rows, errors = _read(path)
    assert _triples(rows) == [(2, "train", "a.jpg", "cat"), (13, "test", "k.jpg", "dog")]
    _lines_once(rows, errors, [2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13])
    assert _reasons(errors) == [
        (3, "wrong number of columns"), (4, "wrong number of columns"), (5, "empty image URI"),
        (6, "unknown split value 'trian'"), (7, "unknown split value 'dev'"), (8, "empty label"),
        (9, "empty label"), (10, "malformed CSV line"), (11, "malformed CSV line"),
    ]
    _check_error_rows(errors, path)
    assert "got 2, expected 3" in errors[0].detail and "got 4" in errors[1].detail
    assert (errors[3].uri, errors[3].split, errors[3].label) == ("d.jpg", "trian", "cat")
    assert "train" in errors[3].detail and "validation" in errors[3].detail


def test_a_csv_line_splits_into_the_fields_the_csv_module_reads():
    """Lines without a quote are split at their commas, others read by the csv module: the same fields, and the
    same error for a malformed line, whichever way a line goes."""
    rng = random.Random(3)
    alphabet = ["a", "b", ",", " ", "\t", "é", "\0", "'", "\\", ";", '"']
    lines = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 12))) for _ in range(3000)]
    lines += ["train,img/a.jpg,cat", " a , b ,", ",,", "a,\"b,c\",d", 'a,"b""c"', 'a,"b', 'a,b"c', "a\0b,c"]
    for line in lines:
        try:
            expected: object = next(csv.reader([line], strict=True))
        except csv.Error as e:
            expected = type(e)
        try:
            got: object = csv_fields(line)
        except csv.Error as e:
            got = type(e)
        assert got == expected, line


def test_csv_headerless_wrong_column_counts(tmp_path):
    path = _write(tmp_path / "m.csv", "a.jpg\ntrain,a.jpg,cat,x\ngs://b/c.jpg,dog\n")
    rows, errors = _read(path)
    assert _triples(rows) == [(3, "", "gs://b/c.jpg", "dog")]
    assert _reasons(errors) == [(1, "wrong number of columns"), (2, "wrong number of columns")]
    assert "3 (split,image_uri,label) or 2" in errors[0].detail


def test_csv_invalid_utf8_is_an_error_for_that_line_only(tmp_path):
    raw = (b"split,image_uri,label\n"
           b"train,img/\xff\xfe.jpg,cat\n"  # not UTF-8
           b"train,ok.jpg,caf\xc3\xa9\n"  # UTF-8
           b"train,b.jpg,\xe9t\xe9\n")  # Latin-1
    path = _write(tmp_path / "m.csv", raw)
    rows, errors = _read(path)
    assert _triples(rows) == [(3, "train", "ok.jpg", "café")]
    assert _reasons(errors) == [(2, "line is not valid UTF-8 text"), (4, "line is not valid UTF-8 text")]
    _check_error_rows(errors, path)
    for error in errors:  # what the report writes must itself be valid UTF-8
        json.dumps(error.to_dict(), ensure_ascii=False).encode("utf-8")


@pytest.mark.parametrize(
    "written, canonical",
    [("train", "train"), ("Training", "train"), ("TRAIN", "train"), ("VAL", "validation"),
     ("valid", "validation"), ("Validation", "validation"), ("eval", "validation"),
     ("Evaluation", "validation"),
     ("test", "test"), ("Testing", "test"), (" Test ", "test"), ("", "")],
)
def test_split_aliases_any_case(tmp_path, written, canonical):
    path = _write(tmp_path / "m.csv", f"split,image_uri,label\n{written},a.jpg,cat\n")
    rows, errors = _read(path)
    assert errors == []
    assert [r.split for r in rows] == [canonical]


# URIs -----------------------------------------------------------------------------------------------------


def test_resolve_uri():
    assert resolve_uri("img/a.jpg", "/data/set", DEFAULT) == "/data/set/img/a.jpg"
    assert resolve_uri("./img/../a.jpg", "/data/set/", DEFAULT) == "/data/set/a.jpg"
    assert resolve_uri("../other/a.jpg", "/data/set", DEFAULT) == "/data/other/a.jpg"
    assert resolve_uri("/abs/a.jpg", "/data/set", DEFAULT) == "/abs/a.jpg"
    assert resolve_uri("file:///abs/a.jpg", "/data/set", DEFAULT) == "/abs/a.jpg"
    assert resolve_uri("gs://b/a.jpg", "/data/set", DEFAULT) == "gs://b/a.jpg"
    assert resolve_uri("img/a.jpg", "gs://b/manifests", DEFAULT) == "gs://b/manifests/img/a.jpg"
    assert resolve_uri("img/a.jpg", "gs://b/manifests/", DEFAULT) == "gs://b/manifests/img/a.jpg"


def test_a_relative_uri_resolves_as_normpath_of_the_join_whatever_its_segments():
    """Whatever the manifest's folder and the URI's segments (empty, ".", ".."), the same path as normpath of
    the join."""
    bases = ["/data/set", "/data/set/", "/data/./set", "/data//set", "/data/x/../set", "data", "./data", "", "/",
             ".", "..", "../up", "//srv/data", "///srv", "/a/b/..", "x/.", "data/", "a..b"]
    uris = ["a.jpg", "img/a.jpg", "img//a.jpg", "img/./a.jpg", "img/../a.jpg", "img/", "./a.jpg", "../a.jpg",
            "a.jpg/.", "a.jpg/..", ".", "..", "...", ".hidden/a.jpg", "img/.a.jpg", "a..b/c.jpg", "img/a.jpg."]
    for base in bases:
        for uri in uris:
            expected = posixpath.normpath(posixpath.join(base.rstrip("/"), uri))
            assert resolve_uri(uri, base, DEFAULT) == expected, (base, uri)


def test_resolve_uri_path_map_first_match_wins():
    fmt = ManifestFormat(path_map=(("gs://old/", "/mnt/new/"), ("gs://old/deep/", "/never/"),
                                   ("s3://x/", "gs://y/"), ("rel/", "file:///srv/")))
    assert resolve_uri("gs://old/deep/a.jpg", "/m", fmt) == "/mnt/new/deep/a.jpg"
    assert resolve_uri("s3://x/a.jpg", "/m", fmt) == "gs://y/a.jpg"
    assert resolve_uri("rel/a.jpg", "/m", fmt) == "/srv/a.jpg"
    assert resolve_uri("gs://older/a.jpg", "/m", fmt) == "gs://older/a.jpg"  # a prefix, not a substring
    assert resolve_uri("img/gs://old/a.jpg", "/m", fmt) == "img/gs://old/a.jpg"


def test_relative_paths_resolve_against_the_manifests_folder(tmp_path, monkeypatch):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # never against the working directory
    path = _write(tmp_path / "sets" / "one" / "m.csv", "train,img/a.jpg,cat\ntrain,../shared/b.jpg,cat\n")
    rows, _ = _read(path)
    assert [r.resolved_uri for r in rows] == [str(tmp_path / "sets/one/img/a.jpg"),
                                              str(tmp_path / "sets/shared/b.jpg")]
    assert [r.uri for r in rows] == ["img/a.jpg", "../shared/b.jpg"]  # as written


def test_path_map_in_a_manifest(tmp_path):
    fmt = ManifestFormat(path_map=(("gs://old-bucket/", str(tmp_path / "local") + "/"),))
    path = _write(tmp_path / "m.csv", "train,gs://old-bucket/img/a.jpg,cat\ntrain,gs://other/b.jpg,dog\n")
    rows, errors = _read(path, fmt)
    assert errors == []
    assert [(r.uri, r.resolved_uri) for r in rows] == [
        ("gs://old-bucket/img/a.jpg", str(tmp_path / "local/img/a.jpg")),
        ("gs://other/b.jpg", "gs://other/b.jpg"),
    ]


def test_allowed_prefixes(tmp_path):
    inside = str(tmp_path / "imgs") + "/"
    fmt = ManifestFormat(allowed_prefixes=(inside, "gs://ok/"))
    path = _write(tmp_path / "m.csv",
                  "train,imgs/a.jpg,cat\n"              # 1 inside
                  "train,imgs/../secret.jpg,cat\n"      # 2 climbs out
                  f"train,{inside}../secret.jpg,cat\n"  # 3 absolute, climbs out
                  "train,/etc/passwd,cat\n"             # 4 elsewhere
                  "train,gs://ok/a.jpg,cat\n"           # 5 inside
                  "train,gs://ok/../no/a.jpg,cat\n"     # 6 remote .. is never allowed
                  "train,gs://okay/a.jpg,cat\n")        # 7 a longer bucket name is not inside gs://ok/
    rows, errors = _read(path, fmt)
    assert [r.line for r in rows] == [1, 5]
    assert [e.line for e in errors] == [2, 3, 4, 6, 7]
    assert all(e.reason == "image URI is outside --allowed_prefixes" for e in errors)


# JSON Lines -----------------------------------------------------------------------------------------------


def test_jsonl_rows_and_errors(tmp_path):
    lines = [
        json.dumps({"split": "train", "image_uri": "img/a.jpg", "label": "cat"}),  # 1
        json.dumps({"image_uri": "gs://b/b.jpg", "label": "dog", "extra": [1, 2]}),  # 2 no split
        "",  # 3 blank
        json.dumps({"split": "VAL", "image_uri": "c.jpg", "label": 7}),  # 4 a number label
        "{not json",  # 5
        "[1, 2, 3]",  # 6
        '"just a string"',  # 7
        json.dumps({"split": "train", "image_uri": "d.jpg", "label": None}),  # 8 null label
        json.dumps({"split": "train", "label": "cat"}),  # 9 no uri
        json.dumps({"split": "holdout", "image_uri": "e.jpg", "label": "cat"}),  # 10
        json.dumps({"split": "train", "image_uri": "f.jpg", "label": "two\nlines"}),  # 11
        json.dumps({"split": "train", "image_uri": "g.jpg", "label": "\udcff"}),  # 12 lone surrogate escape
        json.dumps({"split": "test", "image_uri": "h.jpg", "label": "émeu ✓"}, ensure_ascii=False),  # 13
    ]
    path = _write(tmp_path / "m.jsonl", "\ufeff" + "\n".join(lines) + "\n")
    rows, errors = _read(path, index=2)
    assert _triples(rows) == [(1, "train", "img/a.jpg", "cat"), (2, "", "gs://b/b.jpg", "dog"),
                              (4, "validation", "c.jpg", "7"), (13, "test", "h.jpg", "émeu ✓")]
    assert {r.source_index for r in rows} == {2}
    assert rows[0].resolved_uri == str(tmp_path / "img/a.jpg")
    _lines_once(rows, errors, [1, 2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13])
    assert _reasons(errors) == [
        (5, "line is not valid JSON"), (6, "JSON line is not an object"), (7, "JSON line is not an object"),
        (8, "empty label"), (9, "empty image URI"), (10, "unknown split value 'holdout'"),
        (11, "label contains a line break"), (12, "line is not valid UTF-8 text"),
    ]
    _check_error_rows(errors, path)
    for error in errors:
        json.dumps(error.to_dict(), ensure_ascii=False).encode("utf-8")


def test_jsonl_custom_keys_and_extensions(tmp_path):
    fmt = ManifestFormat(split_column="subset", uri_column="file", label_column="y")
    path = _write(tmp_path / "m.ndjson", json.dumps({"subset": "test", "file": "a.png", "y": "cat"}) + "\r\n")
    assert source_kind(str(path), False) == "jsonl"
    assert source_kind("x.JSON", False) == "jsonl"
    assert source_kind("x.jsonl", False) == "jsonl"
    assert source_kind("x.csv", False) == "csv"
    assert source_kind("x.txt", False) == "csv"
    assert source_kind("x.jsonl", True) == "folder"
    rows, errors = _read(path, fmt)
    assert errors == []
    assert _triples(rows) == [(1, "test", "a.png", "cat")]


# Lines no manifest may break the build with ------------------------------------------------------------


@pytest.mark.parametrize("chunk_bytes", [1, 2, 3, 5, 64])
def test_line_splitting_matches_text_mode_at_every_chunk_boundary(tmp_path, chunk_bytes):
    """\\n, \\r\\n and \\r end lines as Python's text mode ends them, wherever a read chunk ends; a line over the
    limit is None, one at the limit is kept."""
    rng = random.Random(chunk_bytes)
    data = bytes(rng.choice(b"ab\r\n\xc3\xa9\x0b\x0c\x1c\x85") for _ in range(3000)) + b"tail"
    path = _write(tmp_path / "m.csv", data)
    limit = 6
    with open(path, newline="", encoding="latin-1") as text:  # latin-1: one byte is one character
        expected = [line.rstrip("\r\n").encode("latin-1") for line in text]
    expected = [None if len(line) > limit else line for line in expected]
    assert None in expected and any(line is not None and len(line) == limit for line in expected)
    with open(path, "rb") as raw:
        assert list(bounded_lines(raw, limit, chunk_bytes)) == expected


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"])
def test_overlong_lines_are_error_rows_and_the_rest_is_read(tmp_path, ending):
    at_limit = "train,a.jpg,cat" + "," * (MAX_MANIFEST_LINE_BYTES - len("train,a.jpg,cat"))
    padding = "x" * (MAX_MANIFEST_LINE_BYTES - len('{"split":"train","image_uri":"b.jpg","label":"dog","pad":""}'))
    csv_lines = ["split,image_uri,label", "train,a.jpg,cat", "train,b.jpg," + "d" * MAX_MANIFEST_LINE_BYTES,
                 "test,c.jpg,emu", at_limit, "x" * (3 * MAX_MANIFEST_LINE_BYTES), "valid,d.jpg,cat"]
    jsonl_lines = [json.dumps({"split": "train", "image_uri": "a.jpg", "label": "cat"}),
                   json.dumps({"split": "train", "image_uri": "b.jpg", "label": "d" * MAX_MANIFEST_LINE_BYTES}),
                   json.dumps({"split": "test", "image_uri": "c.jpg", "label": "emu"}),
                   '{"split":"train","image_uri":"b.jpg","label":"dog","pad":"' + padding + '"}']
    assert len(csv_lines[4]) == len(jsonl_lines[3]) == MAX_MANIFEST_LINE_BYTES
    too_long = "line is longer than 1 MiB"

    rows, errors = _read(_write(tmp_path / "m.csv", ending.join(csv_lines)))  # no line end after the last line
    assert _triples(rows) == [(2, "train", "a.jpg", "cat"), (4, "test", "c.jpg", "emu"),
                              (7, "validation", "d.jpg", "cat")]
    assert _reasons(errors) == [(3, too_long), (5, "wrong number of columns"), (6, too_long)]
    _check_error_rows(errors, tmp_path / "m.csv")

    rows, errors = _read(_write(tmp_path / "m.jsonl", ending.join(jsonl_lines) + ending))
    assert _triples(rows) == [(1, "train", "a.jpg", "cat"), (3, "test", "c.jpg", "emu"), (4, "train", "b.jpg", "dog")]
    assert _reasons(errors) == [(2, too_long)]


@pytest.mark.parametrize("name", ["m.csv", "m.jsonl"])
def test_an_overlong_line_is_skipped_without_being_held_in_memory(tmp_path, name):
    path = tmp_path / name
    with path.open("wb") as f:
        f.write(b"train,a.jpg,cat\n" if name == "m.csv" else b'{"split":"train","image_uri":"a.jpg","label":"cat"}\n')
        for _ in range(64):  # one line of 64 MiB
            f.write(b"[" * (1 << 20))
        f.write(b"\n")
    tracemalloc.start()
    try:
        rows, errors = _read(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [r.line for r in rows] == [1] and _reasons(errors) == [(2, "line is longer than 1 MiB")]
    assert peak < 3 * MAX_MANIFEST_LINE_BYTES, peak


def test_a_line_that_breaks_the_parser_is_one_error_row(tmp_path):
    """JSON nested 100,000 deep makes json.loads raise RecursionError, not JSONDecodeError: still one error row."""
    lines = [json.dumps({"split": "train", "image_uri": "a.jpg", "label": "cat"}), "[" * 100_000,
             '{"a":' * 100_000, json.dumps({"split": "test", "image_uri": "b.jpg", "label": "dog"})]
    path = _write(tmp_path / "m.jsonl", "\n".join(lines) + "\n")
    rows, errors = _read(path)
    assert _triples(rows) == [(1, "train", "a.jpg", "cat"), (4, "test", "b.jpg", "dog")]
    assert _reasons(errors) == [(2, "line could not be parsed"), (3, "line could not be parsed")]
    assert all(e.detail.startswith("RecursionError: ") for e in errors)
    _check_error_rows(errors, path)


# Folders --------------------------------------------------------------------------------------------------


def _touch(root: Path, *relatives: str) -> None:
    for relative in relatives:
        _write(root / relative, b"\xff\xd8 not really an image")


def test_folder_of_label_folders(tmp_path):
    root = tmp_path / "photos"
    _touch(root, "cat/a.jpg", "cat/b.JPEG", "dog/c.png", "dog/d.gif", "dog/e.bmp", "emu/f.webp",
           "dog/notes.txt", "dog/g.tiff", "cat/.hidden.jpg", ".git/x.jpg", "README.md",  # never picked up
           "stray.jpg", "dog/puppies/h.jpg")  # images outside the layout: errors
    rows, errors = _read(root, index=1)
    images = sorted(["cat/a.jpg", "cat/b.JPEG", "dog/c.png", "dog/d.gif", "dog/e.bmp", "emu/f.webp",
                     "stray.jpg", "dog/puppies/h.jpg"])
    line_of = {rel: i for i, rel in enumerate(images, start=1)}
    expected = [
        ManifestRow(str(root) + "/", 1, line_of[rel], rel, str(root / rel), "", rel.split("/")[0])
        for rel in ["cat/a.jpg", "cat/b.JPEG", "dog/c.png", "dog/d.gif", "dog/e.bmp", "emu/f.webp"]
    ]
    assert sorted(rows, key=lambda r: r.line) == sorted(expected, key=lambda r: r.line)
    assert sorted((e.line, e.uri, e.reason) for e in errors) == sorted([
        (line_of["stray.jpg"], "stray.jpg", "file is not in a class folder"),
        (line_of["dog/puppies/h.jpg"], "dog/puppies/h.jpg", "file is not in a class folder"),
    ])
    assert all("<label>/<file>" in e.detail for e in errors)
    _lines_once(rows, errors, range(1, len(images) + 1))
    _check_error_rows(errors, f"{root}/")  # a folder source ends in "/"


def test_folder_of_split_folders(tmp_path):
    root = tmp_path / "ds"
    _touch(root, "train/cat/a.jpg", "train/dog/b.png", "Validation/cat/c.jpg", "VAL/dog/d.jpg",
           "test/emu/e.jpg", "train/f.jpg", "train/cat/deeper/g.jpg", "test/emu/notes.csv")
    rows, errors = _read(root)
    assert sorted((r.split, r.label, r.uri) for r in rows) == [
        ("test", "emu", "test/emu/e.jpg"), ("train", "cat", "train/cat/a.jpg"),
        ("train", "dog", "train/dog/b.png"),
        ("validation", "cat", "Validation/cat/c.jpg"), ("validation", "dog", "VAL/dog/d.jpg"),
    ]
    assert all(r.resolved_uri == str(root / r.uri) for r in rows)
    assert sorted(e.uri for e in errors) == ["train/cat/deeper/g.jpg", "train/f.jpg"]
    assert all("<split>/<label>/<file>" in e.detail for e in errors)
    _lines_once(rows, errors, range(1, 8))


def test_folder_with_a_non_split_top_folder_is_a_label_layout(tmp_path):
    root = tmp_path / "ds"
    _touch(root, "train/cat/a.jpg", "cat/b.jpg")
    rows, errors = _read(root)
    assert [(r.split, r.label, r.uri) for r in rows] == [("", "cat", "cat/b.jpg")]
    assert [(e.uri, e.reason) for e in errors] == [("train/cat/a.jpg", "file is not in a class folder")]


def test_folder_path_with_a_trailing_slash(tmp_path):
    root = tmp_path / "ds"
    _touch(root, "cat/a.jpg")
    rows, errors = _read(root)
    source = Source(str(root) + "/", 0, "folder")
    [slashed] = list(ReadSourceFn(DEFAULT).process(source))
    assert errors == [] and len(slashed) == 1
    assert slashed[0].resolved_uri == rows[0].resolved_uri == str(root / "cat/a.jpg")
    assert slashed[0].uri == "cat/a.jpg"


def test_folder_file_names_that_are_not_utf8_are_errors(tmp_path):
    root = tmp_path / "ds"
    _touch(root, "cat/a.jpg")
    bad = os.path.join(os.fsencode(root), b"cat", b"caf\xe9.jpg")
    with open(bad, "wb") as f:
        f.write(b"x")
    rows, errors = _read(root)
    assert [r.uri for r in rows] == ["cat/a.jpg"]
    assert [(e.reason, e.label) for e in errors] == [("file name is not valid UTF-8", "cat")]
    json.dumps(errors[0].to_dict(), ensure_ascii=False).encode("utf-8")  # the report can write it
    _lines_once(rows, errors, [1, 2])


# ReadManifest in a pipeline -------------------------------------------------------------------------------


def _dump_to(path: str):
    """An assert_that matcher that stores what the pipeline produced, for plain asserts after the run."""

    def dump(actual):
        Path(path).write_bytes(pickle.dumps(list(actual)))

    return dump


def test_read_manifest_pipeline_over_csv_jsonl_and_folder(tmp_path):
    csv_path = _write(tmp_path / "a.csv", "split,image_uri,label\ntrain,img/1.jpg,cat\nbogus,img/2.jpg,cat\n"
                                          "test,img/3.jpg,dog\n")
    jsonl_path = _write(tmp_path / "b.jsonl", '{"image_uri": "img/4.jpg", "label": "dog"}\n[]\n')
    folder = tmp_path / "c"
    _touch(folder, "cat/5.jpg", "x.jpg")
    sources = [Source(str(csv_path), 0, "csv"), Source(str(jsonl_path), 1, "jsonl"),
               Source(str(folder), 2, "folder")]
    expected_rows = [
        ManifestRow(str(csv_path), 0, 2, "img/1.jpg", str(tmp_path / "img/1.jpg"), "train", "cat"),
        ManifestRow(str(csv_path), 0, 4, "img/3.jpg", str(tmp_path / "img/3.jpg"), "test", "dog"),
        ManifestRow(str(jsonl_path), 1, 1, "img/4.jpg", str(tmp_path / "img/4.jpg"), "", "dog"),
        ManifestRow(str(folder) + "/", 2, 1, "cat/5.jpg", str(folder / "cat/5.jpg"), "", "cat"),
    ]
    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        batches, errors, _ = p | beam.Create(sources) | ReadManifest(DEFAULT)
        assert_that(batches | beam.FlatMap(lambda batch: batch), equal_to(expected_rows), label="Rows")
        assert_that(errors, _dump_to(str(tmp_path / "errors.pkl")), label="Errors")
    errors = sorted(pickle.loads((tmp_path / "errors.pkl").read_bytes()), key=ErrorRow.sort_key)
    assert [(Path(e.source).name, e.line, e.stage, e.reason) for e in errors] == [
        ("a.csv", 3, "manifest", "unknown split value 'bogus'"),
        ("b.jsonl", 2, "manifest", "JSON line is not an object"),
        ("c", 2, "manifest", "file is not in a class folder"),
    ]


def test_read_manifest_pipeline_every_row_exactly_once_at_scale(tmp_path):
    lines = ["split,image_uri,label"]
    for i in range(3000):
        if i % 97 == 0:
            lines.append(f"nope,img/{i}.jpg,l{i % 5}")  # an error row
        else:
            lines.append(f"{('train', 'validation', 'test', '')[i % 4]},img/{i}.jpg,l{i % 5}")
    path = _write(tmp_path / "big.csv", "\n".join(lines) + "\n")
    num_errors = sum(1 for i in range(3000) if i % 97 == 0)

    def check_rows(batches):
        assert all(0 < len(batch) <= ROWS_PER_BATCH for batch in batches)
        assert len(batches) == math.ceil((3000 - num_errors) / ROWS_PER_BATCH)
        actual = [row for batch in batches for row in batch]
        lines_seen = sorted(r.line for r in actual)
        assert len(lines_seen) == 3000 - num_errors
        assert len(set(lines_seen)) == len(lines_seen)
        assert all(r.uri == f"img/{r.line - 2}.jpg" for r in actual)

    def check_errors(actual):
        assert sorted(e.line for e in actual) == [i + 2 for i in range(3000) if i % 97 == 0]

    with test_pipeline.TestPipeline(runner=FnApiRunner()) as p:
        rows, errors, _ = p | beam.Create([Source(str(path), 0, "csv")]) | ReadManifest(DEFAULT)
        assert_that(rows, check_rows, label="Rows")
        assert_that(errors, check_errors, label="Errors")


def test_the_recorded_options_give_back_the_manifest_format_the_build_used():
    """inspect re-reads a build's manifests with ManifestFormat.from_recorded(metadata["options"]): every field
    BuildOptions records must come back as it was."""
    from pipeline.cli import _parser
    from pipeline.options.arguments import build_options_from

    args = _parser().parse_args([
        "build", "--manifest", "/m.csv", "--output_dir", "/out", "--name", "x", "--split_column", "Subset",
        "--uri_column", "path", "--label_column", "class", "--path_map", "a=b", "--allowed_prefixes", "gs://b/",
        "--task", "segmentation", "--list_delimiter", "|", "--mask_column", "masks", "--feature", "age:int"])
    options = build_options_from(args)
    assert ManifestFormat.from_recorded(options.recorded()) == options.manifest


def test_a_json_boolean_or_number_label_is_the_text_a_person_reads_in_the_file(version_rows, shardsmith, tmp_path):
    rows = version_rows()[:24]
    written = [True, "true", 7, 7.0, False, "7"]
    lines = [json.dumps({"split": "train", "image_uri": uri, "label": written[i % len(written)]})
             for i, (_, uri, _) in enumerate(rows)]
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("\n".join(lines) + "\n")
    done = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "pets")
    assert done.code == 0, done.err
    meta = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert meta["labels"] == ["7", "7.0", "false", "true"]
    assert meta["splits"]["train"]["label_counts"] == {"7": 8, "7.0": 4, "false": 4, "true": 8}


def test_every_manifest_reader_keeps_the_whole_protocol():
    """Each reader in READERS has every member ManifestReader names, and each line format's every member
    LineFormatReader names (the appended night's `rows(..., read)` and the writers' `line_parser`)."""
    import inspect

    from shardsmith.manifest import LINE_FORMATS
    from shardsmith.manifest.formats import READERS, LineFormatReader, ManifestReader, line_reader

    def members(protocol) -> dict[str, list[str]]:
        return {name: list(inspect.signature(member).parameters) for cls in protocol.__mro__
                if cls.__name__ in ("ManifestReader", "LineFormatReader")
                for name, member in vars(cls).items() if inspect.isfunction(member) and not name.startswith("_")}

    for kind, reader in READERS.items():
        protocol = LineFormatReader if kind in LINE_FORMATS else ManifestReader
        for name, parameters in members(protocol).items():
            assert list(inspect.signature(getattr(type(reader), name)).parameters)[:len(parameters)] == parameters, \
                (kind, name)
        assert reader.kind == kind and isinstance(reader.extensions, tuple)
    assert sorted(LINE_FORMATS) == sorted(kind for kind in READERS if hasattr(READERS[kind], "line_parser"))
    with pytest.raises(ValueError, match="not read line by line"):
        line_reader("parquet")
