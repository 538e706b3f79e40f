"""A build that fails its error budget says why in its one line: the top reasons with counts and an example
each, and the fix when one reason explains nearly every failure (shardsmith/rows/failures.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from shardsmith.rows import ErrorRow
from shardsmith.rows.failures import explain


def _manifest(root: Path, image_set, text: str) -> Path:
    path = root / "lists" / "m.csv"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def images(tmp_path_factory, image_set_factory):
    return image_set_factory(tmp_path_factory.mktemp("explained"), {"cat": {"train": 6}, "dog": {"train": 6}})


@pytest.mark.parametrize("header, message", [
    ("split,image_uri,class", "with no 'label' column (--label_column); try --label_column class"),
    ("filepath,class,set", "with no 'image_uri' column (--uri_column) and no 'label' column (--label_column); try "
                           "--uri_column filepath --label_column class --split_column set"),
    ("set,path,label", "with no 'image_uri' column (--uri_column); try --uri_column path --split_column set"),
])
def test_a_header_without_the_needed_columns_stops_before_the_build(images, tmp_path, shardsmith, header, message):
    """Today's failure: such a header became 100% failed rows (or, for set,path,label, a build that reported the
    header as a bad row); now one usage line names the header and the flags, and nothing is written."""
    columns = header.split(",")
    lines = [header] + [",".join({"split": s, "set": s, "image_uri": str(images.root / u), "filepath":
                                  str(images.root / u), "path": str(images.root / u), "class": label,
                                  "label": label}[c] for c in columns) for s, u, label in images.rows]
    manifest = _manifest(tmp_path, images, "\n".join(lines) + "\n")
    result = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "x")
    assert result.code == 2, result.err
    assert f"has the header '{header}' {message}" in result.err
    assert not (tmp_path / "out").exists()


def test_the_suggested_flags_build_it(images, tmp_path, shardsmith):
    lines = ["filepath,class,set"] + [f"{images.root / u},{label},{s}" for s, u, label in images.rows]
    manifest = _manifest(tmp_path, images, "\n".join(lines) + "\n")
    result = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "x",
                        "--uri_column", "filepath", "--label_column", "class", "--split_column", "set")
    assert result.code == 0, result.err


def test_a_headerless_manifest_stays_headerless(images, tmp_path, shardsmith):
    lines = [f"{s},{images.root / u},{label}" for s, u, label in images.rows]
    manifest = _manifest(tmp_path, images, "\n".join(lines) + "\n")
    result = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "x")
    assert result.code == 0, result.err


def test_paths_relative_to_another_folder_get_the_path_map_hint(images, tmp_path, shardsmith):
    lines = ["split,image_uri,label"] + [f"{s},{u},{label}" for s, u, label in images.rows]  # relative to root
    manifest = _manifest(tmp_path, images, "\n".join(lines) + "\n")  # ... but the manifest is in lists/
    result = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "x")
    assert result.code == 1
    first = images.rows[0][1]
    assert f"{len(images.rows)} × lookup: file not found" in result.err
    assert f"e.g. {first} (m.csv line 2)" in result.err
    assert f"Hint: relative image paths are resolved against the manifest's folder ({manifest.parent})" in result.err
    assert "--path_map OLD=NEW" in result.err
    assert len(result.err.strip().splitlines()[-1]) > 0 and result.err.count("shardsmith check failed") == 1


@pytest.mark.parametrize("delimiter, shown", [(";", "';'"), ("\t", "tab"), ("|", "'|'")])
def test_a_manifest_with_another_delimiter_is_named_and_the_hints_command_converts_it(images, tmp_path, shardsmith,
                                                                                      delimiter, shown):
    lines = [delimiter.join(("split", "image_uri", "label"))] + [
        delimiter.join((s, str(images.root / u), label)) for s, u, label in images.rows]
    manifest = _manifest(tmp_path, images, "\n".join(lines) + "\n")
    result = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "x")
    assert result.code == 1
    hint = result.err.split("Hint: ", 1)[1]
    assert hint.startswith(f"the line is one field holding {shown} and no comma: a manifest is comma-separated "
                           "(CSV) or JSON Lines; save it with commas, e.g. python -c ")
    command = re.search(r'python -c (".*?") < IN > OUT.csv', hint).group(1)
    converted = tmp_path / "converted.csv"
    with manifest.open("rb") as source, converted.open("wb") as target:
        subprocess.run([sys.executable, "-c", command[1:-1]], stdin=source, stdout=target, check=True)
    done = shardsmith("build", "--manifest", converted, "--output_dir", tmp_path / "out2", "--name", "x")
    assert done.code == 0, done.err


def test_top_reasons_are_ordered_by_count_and_limited():
    def row(line, stage, reason, uri=""):
        return ErrorRow("/d/m.csv", line, uri, "", "", stage, reason)

    errors = ([row(i, "load", "not an image file", f"a{i}.jpg") for i in range(5)]
              + [row(10 + i, "lookup", "file not found", f"b{i}.jpg") for i in range(3)]
              + [row(20, "manifest", "empty label"), row(21, "label", "x"), row(22, "duplicate", "dropped")])
    text = explain(errors, ignore_stage="duplicate")
    assert text == ("5 × load: not an image file, e.g. a0.jpg (m.csv line 0); "
                    "3 × lookup: file not found, e.g. b0.jpg (m.csv line 10); "
                    "1 × label: x, e.g. m.csv line 21")
    assert explain([row(1, "duplicate", "dropped")], ignore_stage="duplicate") == ""


def test_a_successful_build_with_failed_rows_explains_them_in_its_summary_and_log(images, tmp_path, shardsmith,
                                                                                  image_writer):
    lines = ["split,image_uri,label"] + [f"{s},{images.root / u},{label}" for s, u, label in images.rows]
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    lines += [f"train,{tmp_path / 'broken.jpg'},cat", f"train,{tmp_path / 'gone.jpg'},dog",
              f"train,{tmp_path / 'gone2.jpg'},dog"]
    manifest = _manifest(tmp_path, images, "\n".join(lines) + "\n")
    result = shardsmith("build", "--manifest", manifest, "--output_dir", tmp_path / "out", "--name", "x",
                        "--max_error_fraction", "0.5")
    assert result.code == 0, result.err
    summary = result.out.splitlines()
    at = summary.index(next(line for line in summary if line.startswith("  errors")))
    assert summary[at + 1].split() == ["2", "lookup:", "file", "not", "found"]  # most common first
    assert summary[at + 2].strip() == f"e.g. {tmp_path / 'gone.jpg'} (m.csv line 15): {tmp_path / 'gone.jpg'}"
    assert summary[at + 3].split()[:4] == ["1", "load:", "not", "an"]
    assert summary[at + 4].strip().startswith(f"e.g. {tmp_path / 'broken.jpg'} (m.csv line 14)")
    # the report stage's log line, which a Dataflow job's log shows too
    assert "built x with 3 of 15 rows failed: 2 × lookup: file not found" in result.err


def _sections_both_reports_share(report: str) -> list[str]:
    """The lines from the errors row up to (not including) the build's speed row or inspect's end."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(r"\s*errors[: ]+\d", line))
    end = next((i for i, line in enumerate(lines) if line.startswith("  speed")), len(lines))
    return lines[start:end]


def test_the_build_summary_and_inspect_show_errors_and_duplicates_in_the_same_lines(images, tmp_path, shardsmith):
    """One renderer for both reports: on one build, the errors (every reason, its count and an example), duplicates
    and near-duplicates lines of the build's console summary and of `inspect` are the same lines."""
    lines = ["split,image_uri,label"] + [f"{s},{images.root / u},{label}" for s, u, label in images.rows]
    (tmp_path / "broken.jpg").write_bytes(b"not an image")
    copy = tmp_path / "copy.jpg"
    copy.write_bytes((images.root / images.rows[0][1]).read_bytes())
    lines += [f"train,{tmp_path / 'broken.jpg'},cat", f"train,{tmp_path / 'gone.jpg'},dog", f"train,{copy},cat",
              "train,one,two,three"]
    manifest = _manifest(tmp_path, images, "\n".join(lines) + "\n")
    out = tmp_path / "out"
    built = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "x",
                       "--max_error_fraction", "0.5", "--near_duplicates", "report")
    assert built.code == 0, built.err
    inspected = shardsmith("inspect", out)
    assert inspected.code == 0, inspected.err
    shared = _sections_both_reports_share(built.out)
    assert shared == _sections_both_reports_share(inspected.out)
    assert shared[0].split()[:3] == ["errors", "3", "rows"] and "(18.8% of 16 input rows)" in shared[0]
    reasons = [line.split(None, 1)[1] for line in shared[1:7:2]]
    assert reasons == ["load: not an image file (no known image format)", "lookup: file not found",
                       "manifest: wrong number of columns"]
    assert all(line.lstrip().startswith("e.g. ") for line in shared[2:7:2]), shared
    assert shared[7].split()[:2] == ["duplicates", "1"] and "near dups" in shared[8]


@pytest.mark.parametrize("command", ["verify", "inspect"])
def test_verify_and_inspect_explain_a_build_that_did_not_finish(images, tmp_path, shardsmith, command):
    lines = ["split,image_uri,label"] + [f"{s},{u},{label}" for s, u, label in images.rows]
    manifest = _manifest(tmp_path, images, "\n".join(lines) + "\n")  # paths relative to the wrong folder
    out = tmp_path / "out"
    assert shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "x").code == 1
    build = next((out / "builds").iterdir())
    for folder in (out, build):
        result = shardsmith(command, folder)
        assert result.code == 2 and result.out == ""
        assert result.err.count("\n") == 1 and "Traceback" not in result.err
        assert result.err.startswith(f"shardsmith: error: {folder} holds no metadata.json: the build did not "
                                     f"finish (it failed its checks or was stopped); {len(images.rows)} rows failed: "
                                     f"{len(images.rows)} × lookup: file not found")
        assert f"see {build / 'errors.jsonl'}" in result.err
