"""Beam metrics (transforms/metrics.py): a real build's committed counters and image size distribution equal the
numbers metadata.json and errors.jsonl publish, whether shards are written by writer processes or in the DoFn,
with duplicates dropped, and for detection (an error stands for every box line of its image)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from transforms.metrics import (
    BYTES_WRITTEN,
    ERRORS_OF,
    IMAGE_BYTES,
    RECORDS_WRITTEN,
    ROWS_READ,
    BuildMetrics,
    bytes_written,
    query,
    records_written,
)


@pytest.fixture
def build_with_metrics(monkeypatch, shardsmith):
    """Runs `shardsmith build ARGS...` in this process and returns (what it logged, the run's BuildMetrics), read
    from the PipelineResult of the pipeline the CLI made."""
    from pipeline.running import runner

    made = []
    real_make_pipeline = runner.make_pipeline

    def recording(options):
        made.append(real_make_pipeline(options))
        return made[-1]

    monkeypatch.setattr(runner, "make_pipeline", recording)

    def run(*args) -> tuple[str, BuildMetrics]:
        result = shardsmith("build", *args)
        assert result.code == 0, result.err
        (pipeline,) = made
        return result.err, query(pipeline.result)

    return run


@pytest.fixture
def bad_rows_manifest(tmp_path, image_set_factory) -> Path:
    """20 good rows, one repeated (a duplicate image), and bad rows for the manifest, lookup, load and label
    stages."""
    good = image_set_factory(tmp_path, {"a": {"train": 8, "test": 2}, "b": {"train": 8, "validation": 2}})
    (tmp_path / "img" / "truncated.jpg").write_bytes(good.path_of(good.rows[0][1]).read_bytes()[:-400])
    (tmp_path / "img" / "text.jpg").write_text("not an image at all\n")
    (tmp_path / "img" / "empty.png").write_bytes(b"")
    more = [
        f"train,{good.rows[3][1]},a",  # the same image again
        "train,img/missing.jpg,a",  # lookup
        "train,img/empty.png,b",  # lookup
        "train,img/truncated.jpg,a",  # load
        "train,img/text.jpg,b",  # load
        "holdout,img/a/train_0000.jpg,a",  # manifest: unknown split
        "train,,a",  # manifest: empty uri
        "train",  # manifest: too few columns
        "test,img/a/test_0000.jpg,zebra",  # label not in train
    ]
    good.manifest.write_text(good.manifest.read_text() + "\n".join(more) + "\n")
    return good.manifest


def assert_metrics_match_the_build(metrics: BuildMetrics, out: Path, metadata_of, files_of_build, read_records):
    metadata = metadata_of(out)
    assert metrics.get(ROWS_READ) == metadata["num_input_rows"]
    splits = metadata["splits"]
    assert set(metrics.by_prefix(RECORDS_WRITTEN)) <= set(splits)
    assert set(metrics.by_prefix(BYTES_WRITTEN)) <= set(splits)
    for split, info in splits.items():
        assert metrics.get(records_written(split)) == info["num_examples"], split
        assert metrics.get(bytes_written(split)) == sum(s["num_bytes"] for s in info["shards"]) == info["num_bytes"]
    lines = (files_of_build(out) / "errors.jsonl").read_text().splitlines()
    assert metrics.by_prefix(ERRORS_OF) == dict(Counter(json.loads(line)["stage"] for line in lines))
    assert sum(metrics.by_prefix(ERRORS_OF).values()) == metadata["num_errors"]
    # Without re-encoding, a record's image/encoded holds its source file's bytes.
    sizes = [len(record["image/encoded"]) for split in splits for shard in read_records(out, split) for record in shard]
    assert metrics.image_bytes is not None
    assert metrics.image_bytes.count == metadata["num_examples"] == len(sizes)
    assert metrics.image_bytes.sum == sum(sizes)
    assert (metrics.image_bytes.min, metrics.image_bytes.max) == (min(sizes), max(sizes))


@pytest.mark.parametrize("extra", [[], ["--writer_processes", "0"], ["--on_duplicate", "drop"]],
                         ids=["writer-processes", "in-process-writer", "drop-duplicates"])
def test_counters_equal_metadata_and_errors_jsonl(extra, bad_rows_manifest, build_with_metrics, tmp_path,
                                                  metadata_of, files_of_build, read_records):
    out = tmp_path / "out"
    logged, metrics = build_with_metrics("--manifest", bad_rows_manifest, "--output_dir", out, "--name", "ds",
                                          "--max_error_fraction", "0.5", *extra)
    assert_metrics_match_the_build(metrics, out, metadata_of, files_of_build, read_records)
    stages = metrics.by_prefix(ERRORS_OF)
    # With drop, the zebra row's image is also a good row's: dropped as a copy before its label is looked at.
    expected = {"duplicate": 2} if "drop" in extra else {"label": 1}
    assert stages == {"manifest": 3, "lookup": 2, "load": 2, **expected}
    assert metrics.get(ROWS_READ) == 21 + 8
    assert "INFO metrics: " in logged and f" {ROWS_READ} 29, " in logged
    assert f"{IMAGE_BYTES} count {metadata_of(out)['num_examples']} " in logged


def test_detection_counts_an_image_error_once_per_box_line(tmp_path, build_with_metrics, image_writer, metadata_of,
                                                           files_of_build, read_records):
    from PIL import Image

    for i in range(8):
        image_writer(tmp_path / f"img/{i}.jpg", Image.new("RGB", (64 + 8 * i, 48), (30 * i, 90, 200)), "jpeg")
    splits = ["TRAIN"] * 6 + ["VALIDATION", "TEST"]
    lines = [f"{split},img/{i}.jpg,{'car' if i % 2 else 'bike'},0.1,0.1,,,0.6,0.7,," for i, split in enumerate(splits)]
    lines += [
        "TRAIN,img/0.jpg,car,0.2,0.2,,,0.5,0.5,,",  # a second box on image 0
        "TRAIN,img/1.jpg,car,0.7,0.2,,,0.4,0.6,,",  # min > max: both lines of image 1 are rejected (manifest)
        "TRAIN,img/gone.jpg,car,0.1,0.2,,,0.3,0.6,,",  # no such file, three boxes: three lookup lines
        "TRAIN,img/gone.jpg,bike,0.2,0.2,,,0.3,0.6,,",
        "TRAIN,img/gone.jpg,car,0.3,0.2,,,0.4,0.6,,",
    ]
    manifest = tmp_path / "boxes.csv"
    manifest.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    _, metrics = build_with_metrics("--manifest", manifest, "--output_dir", out, "--name", "boxes", "--task",
                                    "detection", "--max_error_fraction", "0.5")
    assert_metrics_match_the_build(metrics, out, metadata_of, files_of_build, read_records)
    assert metrics.get(ROWS_READ) == len(lines)
    assert metrics.by_prefix(ERRORS_OF) == {"manifest": 2, "lookup": 3}
    assert sum(metrics.by_prefix(RECORDS_WRITTEN).values()) == 7
