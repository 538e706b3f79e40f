"""Manifest mistakes a person makes get a sentence that names the mistake, before Beam starts where the inputs
alone show it: swapped CSV columns, a Parquet or other binary file given as manifest, a folder that is not laid
out as class folders; JSON labels that are objects (or lists outside multi_label) are error rows; Windows paths
get their own hint."""

from __future__ import annotations

import json
import time

import pytest

from shardsmith.manifest import ManifestFormat, ManifestParser, Source
from shardsmith.rows import ErrorRow, ManifestRow
from shardsmith.rows.failures import explain


def _build(shardsmith, tmp_path, manifest, *extra):
    started = time.monotonic()
    result = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "x", *extra)
    return result, time.monotonic() - started


def _usage_error(result, seconds, tmp_path) -> str:
    assert result.code == 2, result.err
    assert len(result.err.strip().splitlines()) == 1 and result.err.startswith("shardsmith: error: ")
    assert seconds < 3 and not (tmp_path / "out").exists()
    return result.err.strip()


def test_swapped_columns_of_a_headerless_csv_are_named_before_the_build(shardsmith, tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("".join(f"TRAIN,texture,images/x{i}.jpg\n" for i in range(300)))
    error = _usage_error(*_build(shardsmith, tmp_path, manifest), tmp_path)
    assert "columns look swapped" in error
    assert "column 3 holds image paths (e.g. 'images/x0.jpg')" in error
    assert "column 2, read as the image URI, holds 'texture'" in error
    assert "add a header row naming them and pass --uri_column/--label_column" in error


def test_swapped_columns_under_a_header_suggest_the_uri_column(shardsmith, tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"train,cat,img/{i}.png\n" for i in range(20)))
    error = _usage_error(*_build(shardsmith, tmp_path, manifest), tmp_path)
    assert "columns look swapped" in error and "try --uri_column label --label_column image_uri" in error


def test_paths_without_extensions_are_not_called_swapped(shardsmith, tmp_path):
    manifest = tmp_path / "m.csv"
    manifest.write_text("".join(f"train,gs://b/objects/{i},cat\n" for i in range(20)))
    from shardsmith.manifest.csv_file import CsvManifest

    assert CsvManifest().input_problem(str(manifest), ManifestFormat()) is None


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"PAR1\x15\x04\x15\x10\x15\x14L\x15\x02\x15\x00\x12\x00\x00" + bytes(range(256)) * 4,
         "is a Parquet file, read as Parquet only under a .parquet name: rename it to end in .parquet"),
        (b"PK\x03\x04\x14\x00\x06\x00" + bytes(200), "is a ZIP archive (an .xlsx workbook?)"),
        (b"\x1f\x8b\x08\x00" + bytes(100), "is gzip-compressed"),
        ("split,image_uri,label\n".encode("utf-16"), "is UTF-16 text; save it as UTF-8"),
        (b"train,a.jpg,cat\n\x00\x01\x02\x03binary", "holds binary data (NUL bytes), not CSV or JSON Lines text"),
    ],
)
def test_a_binary_manifest_is_one_line_naming_what_it_is(content, expected, shardsmith, tmp_path):
    for name in ("m.csv", "m.jsonl"):  # named .parquet: tests/shardsmith/manifest/test_parquet_manifests.py
        manifest = tmp_path / name
        manifest.write_bytes(content)
        error = _usage_error(*_build(shardsmith, tmp_path, manifest), tmp_path)
        assert f"manifest {manifest} {expected}" in error


def _folder(root, files):
    for relative in files:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\xff\xd8 not decoded here")
    return root


def test_the_parent_of_a_dataset_folder_is_refused_naming_the_folder_to_pass(shardsmith, tmp_path):
    root = _folder(tmp_path / "mydata", [f"dataset/{s}/{c}/{i}.jpg" for s in ("train", "test") for c in "ab"
                                         for i in range(3)])
    error = _usage_error(*_build(shardsmith, tmp_path, root), tmp_path)
    assert (f"folder {root} has no images in class folders: its images are 3 levels down (e.g. "
            "dataset/test/a/0.jpg)") in error
    assert f"expected {root}/<label>/<file> or {root}/<split>/<label>/<file>; try --manifest {root}/dataset" in error


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (["a.jpg", "b.jpg"], "its images are in the folder itself (e.g. a.jpg)"),
        (["notes.txt", "sub/readme.md"], "holds no image files"),
        (["x/y/z/w/1.jpg"], "its images are 4 levels down (e.g. x/y/z/w/1.jpg)"),
    ],
)
def test_other_wrong_folder_layouts_are_refused(files, expected, shardsmith, tmp_path):
    root = _folder(tmp_path / "mydata", files)
    error = _usage_error(*_build(shardsmith, tmp_path, root), tmp_path)
    assert expected in error


@pytest.mark.parametrize("files", [["cat/1.jpg", "dog/2.png"], ["train/cat/1.jpg", "test/dog/2.jpg"],
                                   ["cat/1.jpg", "stray/deep/x.jpg", "notes.txt"]])
def test_class_folder_layouts_pass_the_check(files, tmp_path):
    from shardsmith.manifest.class_folders import folder_problem

    assert folder_problem(str(_folder(tmp_path / "d", files))) is None


def test_symlinked_class_folders_pass_and_a_symlink_loop_ends(tmp_path):
    from shardsmith.manifest.class_folders import folder_problem

    elsewhere = _folder(tmp_path / "elsewhere", ["cat/1.jpg"])
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "cat").symlink_to(elsewhere / "cat")
    assert folder_problem(str(tmp_path / "d")) is None
    (tmp_path / "loop" / "a").mkdir(parents=True)
    (tmp_path / "loop" / "a" / "back").symlink_to(tmp_path / "loop")
    assert "holds no image files" in folder_problem(str(tmp_path / "loop"))


def _parse(tmp_path, lines, fmt: ManifestFormat | None = None):
    fmt = fmt or ManifestFormat()
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return list(ManifestParser(fmt).parse(Source(str(path), 0, "jsonl")))


def test_a_json_label_that_is_an_object_or_a_list_is_an_error_row(tmp_path):
    rows = _parse(tmp_path, [
        {"image_uri": "a.jpg", "label": {"x": 1}},
        {"image_uri": "b.jpg", "label": ["cat", "dog"]},
        {"image_uri": "c.jpg", "label": "cat"},
        {"image_uri": {"path": "d.jpg"}, "label": "cat"},
        {"image_uri": "e.jpg", "label": 3},
    ])
    assert [type(row) for row in rows] == [ErrorRow, ErrorRow, ManifestRow, ErrorRow, ManifestRow]
    assert (rows[0].line, rows[0].uri, rows[0].reason, rows[0].detail) == (
        1, "a.jpg", "label is a JSON object", 'a label is a string or a number; got {"x": 1}')
    assert (rows[1].reason, rows[1].detail) == (
        "label is a JSON list", 'one label per image (use --task multi_label for several); got ["cat", "dog"]')
    assert rows[3].reason == "image URI is a JSON object"
    assert [row.label for row in rows if isinstance(row, ManifestRow)] == ["cat", "3"]


def test_a_multi_label_list_may_hold_strings_and_numbers_only(tmp_path):
    rows = _parse(tmp_path, [{"image_uri": "a.jpg", "label": ["cat", 2]},
                             {"image_uri": "b.jpg", "label": ["cat", {"x": 1}]}],
                  ManifestFormat(task="multi_label"))
    assert isinstance(rows[0], ManifestRow) and rows[0].annotation.labels == ("2", "cat")
    assert isinstance(rows[1], ErrorRow) and rows[1].reason == "label list holds a JSON object"


def _not_found(uri: str, label: str = "cat") -> ErrorRow:
    return ErrorRow("/data/lists/m.csv", 2, uri, "train", label, "lookup", "file not found", f"/data/lists/{uri}")


def test_windows_paths_get_the_backslash_hint():
    text = explain([_not_found("images\\x.jpg")])
    assert ("Hint: backslashes (\\) are not path separators here: write the manifest's paths with '/' "
            "(images/x.jpg)") in text
    assert "--path_map" not in text


def test_swapped_columns_get_their_hint_after_the_build_too():
    text = explain([_not_found("texture", label="images/x.jpg")])
    assert "Hint: the image URI column holds 'texture' and the label column 'images/x.jpg': the columns look " \
           "swapped" in text


def test_a_manifest_cut_mid_line_is_named_as_such_not_as_a_missing_header(version_rows, shardsmith, tmp_path):
    rows = version_rows()[:20]
    text = "split,image_uri,label\n" + "".join(f"{s},{u},{label}\n" for s, u, label in rows)
    manifest = tmp_path / "m.csv"
    manifest.write_text(text[:-12])  # copied while it was written: the last line ends in the middle of its URI
    result, _ = _build(shardsmith, tmp_path, manifest, "--max_error_fraction", "0.5")
    assert result.code == 0, result.err
    assert "line 21 has another number of fields" in result.out and "is it the file's last?" in result.out
    assert "add a header" not in result.out
