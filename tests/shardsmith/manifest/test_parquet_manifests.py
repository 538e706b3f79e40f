"""Parquet manifests (shardsmith/manifest/parquet_file.py) over real files written with pyarrow: the same rows
as a CSV build the same shards, byte for byte; bad rows are error rows naming their row number, across row groups;
columns are matched as a CSV header's are; a file named .parquet that is not Parquet, or lacks the columns, is one
line before Beam starts; `shardsmith schema` reads one. gs://: tests/pipeline/commands/test_gcs_end_to_end.py."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardsmith.manifest import ManifestFormat, ManifestParser, resolve_sources
from shardsmith.rows import ErrorRow, ManifestRow

ROOT = Path(__file__).resolve().parents[3]


def _parquet(path, columns: dict, row_group_size: int = 2):
    pq.write_table(pa.table(columns), path, row_group_size=row_group_size)
    return path


def _parse(path, fmt: ManifestFormat | None = None):
    (source,) = resolve_sources((str(path),))
    assert source.kind == "parquet"
    items = list(ManifestParser(fmt or ManifestFormat()).parse(source))
    return [i for i in items if isinstance(i, ManifestRow)], [i for i in items if isinstance(i, ErrorRow)]


def _usage_error(shardsmith, tmp_path, manifest) -> str:
    started = time.monotonic()
    result = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "x")
    assert result.code == 2, result.err
    assert len(result.err.strip().splitlines()) == 1 and result.err.startswith("shardsmith: error: ")
    # Before Beam starts: seconds, pyarrow's import (0.3 s of CPU, more on a busy disk) included.
    assert time.monotonic() - started < 10 and not (tmp_path / "out").exists()
    return result.err.strip()


def test_the_same_rows_in_parquet_and_csv_build_the_same_shards(tmp_path, image_set_factory, shardsmith,
                                                                 read_records, metadata_of):
    images = image_set_factory(tmp_path, {"ant": {"train": 14, "validation": 3, "test": 3},
                                          "bee": {"train": 10, "validation": 2, "test": 4}})
    splits, uris, labels = (list(column) for column in zip(*images.rows, strict=True))
    manifest = _parquet(tmp_path / "manifest.parquet", {"split": splits, "image_uri": uris, "label": labels},
                        row_group_size=7)
    assert pq.ParquetFile(manifest).num_row_groups == 6
    built = {}
    for name, source in (("csv", images.manifest), ("parquet", manifest)):
        out = tmp_path / f"out-{name}"
        result = shardsmith("build", "--manifest", source, "--output_dir", out, "--name", "bugs",
                            "--num_shards", "train=2,validation=1,test=1")
        assert result.code == 0, result.err
        built[name] = out
    shards = {name: [(shard["file"], shard["crc32c"]) for split in metadata_of(out)["splits"].values()
                     for shard in split["shards"]] for name, out in built.items()}
    assert len(shards["parquet"]) == 4 and shards["parquet"] == shards["csv"]
    for split in ("train", "validation", "test"):
        records = [r for shard in read_records(built["parquet"], split) for r in shard]
        assert sorted(r["image/filename"] for r in records) == sorted(u for s, u, _ in images.rows if s == split)
        for record in records:
            data = images.path_of(record["image/filename"]).read_bytes()
            assert record["image/encoded"] == data
            assert record["image/key/sha256"] == hashlib.sha256(data).hexdigest()
            assert record["image/filename"].split("/")[1] == record["image/class/text"]


def test_bad_rows_are_error_rows_naming_their_row_across_row_groups(tmp_path):
    manifest = _parquet(tmp_path / "m.parquet", {
        "split": ["train", None, "bogus", "TEST", "train", "validation", "train"],
        "image_uri": ["a.jpg", "b.jpg", "c.jpg", None, "e.jpg", "", "g.jpg"],
        "label": ["cat", "dog", "cat", "dog", None, "cat", "dog"],
        "unread": [[1], [2], [3], [4], [5], [6], [7]],
    })
    rows, errors = _parse(manifest)
    assert [(r.line, r.split, r.uri, r.label) for r in rows] == [(1, "train", "a.jpg", "cat"), (2, "", "b.jpg", "dog"),
                                                                 (7, "train", "g.jpg", "dog")]
    assert rows[0].resolved_uri == str(tmp_path / "a.jpg") and rows[0].source == str(manifest)
    assert [(e.line, e.reason) for e in errors] == [(3, "unknown split value 'bogus'"), (4, "empty image URI"),
                                                    (5, "empty label"), (6, "empty image URI")]
    assert all(e.stage == "manifest" and e.source == str(manifest) for e in errors)


def test_values_of_the_wrong_type_are_error_rows(tmp_path):
    lists = _parquet(tmp_path / "lists.parquet", {"image_uri": ["a.jpg", "b.jpg"], "label": [["cat", "dog"], []]})
    _, errors = _parse(lists)
    assert [(e.line, e.reason) for e in errors] == [(1, "label is a Parquet list"), (2, "label is a Parquet list")]
    assert errors[0].detail == 'one label per image (use --task multi_label for several); got ["cat", "dog"]'
    rows, errors = _parse(lists, ManifestFormat(task="multi_label"))
    assert [(r.line, r.annotation.labels) for r in rows] == [(1, ("cat", "dog"))]
    assert [(e.line, e.reason) for e in errors] == [(2, "empty label")]

    structs = _parquet(tmp_path / "structs.parquet", {"image_uri": [["a.jpg"]], "label": [{"name": "cat"}]})
    _, errors = _parse(structs)
    assert [(e.line, e.reason, e.detail) for e in errors] == [(1, "image URI is a Parquet list",
                                                               'expected a string; got ["a.jpg"]')]
    numbers = _parquet(tmp_path / "numbers.parquet", {"image_uri": [b"a.jpg", b"\xff.jpg"], "label": [3, 4]})
    rows, errors = _parse(numbers)
    assert [(r.uri, r.label) for r in rows] == [("a.jpg", "3")]
    assert [(e.line, e.reason) for e in errors] == [(2, "row is not valid UTF-8 text")]


def test_columns_are_found_in_any_case_with_the_column_flags_and_features(tmp_path):
    manifest = _parquet(tmp_path / "m.parquet", {
        "Path": ["x/a.jpg", "x/b.jpg"], "Class": ["cat", "dog"], "Fold": ["TRAIN", "test"], "Age": [3, 5],
        "tags": [["indoor"], []], "notes": ["big", "small"],
    })
    fmt = ManifestFormat(uri_column="path", label_column="class", split_column="fold",
                         features=(("age", "int"), ("tags", "string_list")))
    rows, errors = _parse(manifest, fmt)
    assert errors == []
    assert [(r.split, r.uri, r.label, r.annotation.features) for r in rows] == [
        ("train", "x/a.jpg", "cat", (("age", 3), ("tags", ("indoor",)))),
        ("test", "x/b.jpg", "dog", (("age", 5), ("tags", ()))),
    ]


def test_a_file_named_parquet_that_is_not_parquet_is_one_line(shardsmith, tmp_path):
    manifest = tmp_path / "m.parquet"
    manifest.write_text("split,image_uri,label\ntrain,a.jpg,cat\n")
    error = _usage_error(shardsmith, tmp_path, manifest)
    assert (f"manifest {manifest} is not a Parquet file (it starts with "
            "b'split,image_uri,label\\ntrain,a.jpg,cat\\n'); a CSV manifest's name ends in .csv, a JSON Lines one's "
            "in .jsonl") in error
    manifest.write_bytes(b"PAR1\x15\x04\x15\x10" + bytes(range(256)))
    error = _usage_error(shardsmith, tmp_path, manifest)
    assert f"manifest {manifest} is not a readable Parquet file: " in error


def test_parquet_columns_without_the_uri_and_label_columns_name_the_flags(shardsmith, tmp_path):
    manifest = _parquet(tmp_path / "m.parquet", {"filepath": ["a.jpg"], "class": ["cat"]})
    error = _usage_error(shardsmith, tmp_path, manifest)
    assert (f"manifest {manifest} has the columns 'filepath, class' with no 'image_uri' column (--uri_column) and no "
            "'label' column (--label_column); try --uri_column filepath --label_column class") in error


def test_swapped_parquet_columns_are_named(shardsmith, tmp_path):
    manifest = _parquet(tmp_path / "m.parquet", {"image_uri": ["cat"] * 20,
                                                 "label": [f"i/{n}.png" for n in range(20)]})
    error = _usage_error(shardsmith, tmp_path, manifest)
    assert "the columns look swapped" in error and "try --uri_column label --label_column image_uri" in error


@pytest.mark.parametrize("rows", ["1000", "2"])
def test_schema_reads_a_parquet_manifest(shardsmith, tmp_path, rows):
    manifest = _parquet(tmp_path / "m.parquet", {
        "split": ["train"] * 3, "image_uri": ["a.jpg", "b.jpg", "c.jpg"], "label": ["cat"] * 3,
        "age": [1, 2, 3], "weight": [1.5, 2.0, None], "tags": [["a"], [], ["b", "c"]]})
    result = shardsmith("schema", manifest, "--rows", rows)
    assert result.code == 0, result.err
    weight = "float" if rows == "2" else "float_list"  # a null cell makes a list, as an empty CSV cell does
    flags = f"--feature age:int --feature weight:{weight} --feature tags:string_list"
    assert result.out.strip().splitlines()[-1] == flags


def _hex_uri_manifest(path: Path, num_rows: int, uri_chars: int) -> Path:
    """A manifest of unique, incompressible URIs (random hex) in pyarrow's default row groups (up to 1Mi rows)."""
    rng = np.random.default_rng(num_rows)
    digits = np.frombuffer(b"0123456789abcdef", np.uint8)[rng.integers(0, 16, num_rows * uri_chars, np.uint8)]
    uris = pa.FixedSizeBinaryArray.from_buffers(pa.binary(uri_chars), num_rows, [None, pa.py_buffer(digits)])
    pq.write_table(pa.table({"split": pa.array(["train"] * num_rows), "image_uri": uris.cast(pa.string()),
                             "label": pa.array(["cat", "dog"] * (num_rows // 2))}), path, row_group_size=None)
    return path


# Read in a fresh process: the reader's peak memory (VmHWM; getrusage's ru_maxrss would carry a forked parent's
# peak across exec) above what it was after a small manifest of the same columns warmed pyarrow's pools and
# Python's allocator. Each row is checked for its line number, in order, and the URIs hashed in that order.
_READ_AND_MEASURE = """
import hashlib, json, sys
from shardsmith.manifest import ManifestFormat, ManifestParser, resolve_sources
def parsed(path):
    (source,) = resolve_sources((path,))
    return ManifestParser(ManifestFormat()).parse(source)
def peak_mb():
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM:")).split()[1]) / 1024
for _ in parsed(sys.argv[1]):
    pass
before, digest, line = peak_mb(), hashlib.sha256(), 0
for row in parsed(sys.argv[2]):
    line += 1
    assert row.line == line and row.split == "train", (row, line)
    digest.update(row.uri.encode() + b"\\n")
print(json.dumps({"rows": line, "growth_mb": peak_mb() - before, "sha256": digest.hexdigest()}))
"""


def test_one_large_row_group_is_read_a_bounded_batch_at_a_time(tmp_path):
    """200,000 rows of 500-character URIs in one row group: 95 MB of URI column. Reading the group at once (its
    column chunks fetched whole, or decoded whole) holds at least that; the reader holds one batch of
    ROWS_IN_MEMORY rows, a few MB, whatever the row group holds."""
    warm_up = _hex_uri_manifest(tmp_path / "small.parquet", 20_000, 500)
    manifest = _hex_uri_manifest(tmp_path / "large.parquet", 200_000, 500)
    metadata = pq.ParquetFile(manifest).metadata
    assert metadata.num_row_groups == 1
    chunk_mb = metadata.row_group(0).column(1).total_uncompressed_size / 2**20
    assert chunk_mb > 90
    done = subprocess.run([sys.executable, "-c", _READ_AND_MEASURE, str(warm_up), str(manifest)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout)
    uris = pq.read_table(manifest, columns=["image_uri"]).column(0).to_pylist()
    assert measured["rows"] == 200_000
    assert measured["sha256"] == hashlib.sha256(b"".join(uri.encode() + b"\n" for uri in uris)).hexdigest()
    # Bounded reading grew 6 MB alone and 30 MB beside the whole suite (the allocator keeps freed batches);
    # reading the group whole holds at least chunk_mb.
    assert measured["growth_mb"] < chunk_mb / 2, measured
