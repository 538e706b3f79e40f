"""`shardsmith inspect`: the report's figures on a real build, and its PNGs opened with Pillow."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from PIL import Image, ImageStat

from shardsmith.output_folder.layout import published_dir


def _png(path, min_size=(300, 200)) -> Image.Image:
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.load()
        assert image.width >= min_size[0] and image.height >= min_size[1], image.size
        assert image.width <= 6000 and image.height <= 6000, image.size
        rgb = image.convert("RGB")
    assert max(ImageStat.Stat(rgb).stddev) > 10, "the picture is not blank"
    return rgb


def test_report_tables_come_from_the_build(built, shardsmith):
    result = shardsmith("inspect", built)
    assert result.code == 0, result.err
    out = result.out
    assert "dataset 'pets': 285 examples, 3 labels, 8 shards" in out
    train = re.search(r"^train\s+(\d+)\s+[\d.]+\s+(\d+)\s+(\d+)-(\d+)", out, re.M)
    assert train and train.groups() == ("225", "4", "56", "57")
    assert re.search(r"^\s+0\s+cat\s+90\s+12\s+11\s+113\s", out, re.M)
    assert re.search(r"^\s+2\s+emu\s+75\s+11\s+10\s+96\s", out, re.M)
    mix = re.search(r"^  train\s+max\s+([\d.]+) pp .*at most ([\d.]+) records from the exact", out, re.M)
    assert mix, out
    assert float(mix.group(2)) < 1.0, "each shard holds the floor or ceiling of each label's proportional count"
    assert re.search(r"^  errors\s+0 rows \(0\.0% of 285 input rows\)$", out, re.M)
    assert re.search(r"^  duplicates\s+0 images occur more than once$", out, re.M)


def test_errors_by_reason_with_an_example_each(built, tmp_path, shardsmith):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    row = {"source": "/d/m.csv", "split": "train", "label": "cat", "detail": ""}
    rows = [
        {**row, "line": 9, "uri": "", "stage": "manifest", "reason": "wrong number of columns"},
        {**row, "line": 2, "uri": "img/a.jpg", "stage": "load", "reason": "image data is truncated"},
        {**row, "line": 3, "uri": "img/b.jpg", "stage": "load", "reason": "image data is truncated",
         "detail": "OSError"},
    ]
    errors = Path(published_dir(copy)) / "errors.jsonl"
    errors.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = shardsmith("inspect", copy).out.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("  errors"))
    assert out[at].split()[:3] == ["errors", "3", "rows"] and out[at].endswith(f"listed in {errors}:")
    assert [line.strip() for line in out[at + 1:at + 5]] == [
        "2  load: image data is truncated", "e.g. img/a.jpg (m.csv line 2)",  # most common first, its first line
        "1  manifest: wrong number of columns", "e.g. m.csv line 9"]
    errors.write_text("not json\n")  # unreadable: the counts metadata.json keeps
    out = shardsmith("inspect", copy).out
    assert f"{errors} cannot be read (Expecting value" in out and "by reason from metadata.json:" in out


def test_pngs_are_written_and_the_shuffle_plot_measures_the_mix(built, tmp_path, shardsmith):
    sheet, heat, shuffle = tmp_path / "sheet.png", tmp_path / "heat.png", tmp_path / "shuffle.png"
    result = shardsmith("inspect", built, "--contact_sheet", sheet, "--per_label", 4, "--heatmap", heat,
                        "--shuffle_plot", shuffle, "--buffer", 8, "--cycle_length", 1)
    assert result.code == 0, result.err
    contact = _png(sheet)
    assert contact.height > contact.width / 4 * 2, "three rows of four images"
    _png(heat)
    plot = _png(shuffle, (800, 300))
    assert plot.width > plot.height, "two panels side by side"
    line = re.search(r"this dataset ([\d.]+), (manifest order) ([\d.]+), ideal ([\d.]+)", result.out)
    assert line, result.out
    ours, naive, ideal = float(line.group(1)), float(line.group(3)), float(line.group(4))
    assert abs(ours - ideal) < 0.25, "stratified shuffled shards give nearly ideal batches"
    assert naive < ours - 0.75, "manifest-ordered files read one at a time give one or two labels per batch"


def test_without_the_manifest_the_plot_falls_back_to_label_order(built, tmp_path, shardsmith):
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    metadata = json.loads((copy / "metadata.json").read_text())
    metadata["options"]["manifests"] = [str(tmp_path / "gone.csv")]
    (copy / "metadata.json").write_text(json.dumps(metadata))
    result = shardsmith("inspect", copy, "--shuffle_plot", tmp_path / "p.png", "--buffer", 8)
    assert result.code == 0
    assert "label-sorted order (manifest not available)" in result.out
    _png(tmp_path / "p.png")


def test_usage_errors_are_one_line(built, tmp_path, shardsmith):
    result = shardsmith("inspect", built, "--contact_sheet", tmp_path / "no" / "such" / "x.png")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1 and "folder does not exist" in result.err
    result = shardsmith("inspect", built, "--shuffle_plot", tmp_path / "x.png", "--split", "dev")
    assert result.code == 2 and "split 'dev' is not in this dataset" in result.err
