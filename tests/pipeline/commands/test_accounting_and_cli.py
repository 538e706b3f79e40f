"""Every input row ends as a record or an error line, and a build whose records and errors do not add up to its
input rows publishes nothing; user mistakes get one line, not a traceback."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from shardsmith.format.metadata import read_metadata
from shardsmith.output_folder.layout import published_dir
from shardsmith.output_folder.lock import acquire_lock, release_lock
from shardsmith.output_folder.target import BuildTarget
from shardsmith.rows import ShardResult
from shardsmith.settings import CheckSettings, RecordSettings
from transforms.duplicates import DuplicateSummary
from transforms.error_parts import ErrorSummary
from transforms.labels import Vocabulary
from transforms.place import ShardPlan, SplitPlan
from transforms.report import DatasetCheckFailed, ReportConfig, build_metadata, check_and_write_metadata

ERROR_FIELDS = {"source", "line", "uri", "split", "label", "stage", "reason"}


@pytest.fixture
def bad_rows_manifest(tmp_path, image_set_factory):
    """20 good rows and 14 bad ones of every kind the build must survive."""
    good = image_set_factory(tmp_path, {"a": {"train": 8, "test": 2}, "b": {"train": 8, "test": 2}})
    (tmp_path / "img" / "truncated.jpg").write_bytes(good.path_of(good.rows[0][1]).read_bytes()[:-400])
    (tmp_path / "img" / "text.jpg").write_text("not an image at all\n")
    (tmp_path / "img" / "empty.png").write_bytes(b"")
    (tmp_path / "img" / "picture.tiff").write_bytes(b"II*\x00" + b"\x00" * 100)
    bad = [
        "train,img/missing.jpg,a",
        "train,img/truncated.jpg,a",
        "train,img/text.jpg,b",
        "train,img/empty.png,b",
        "train,img/picture.tiff,b",
        "holdout,img/a/train_0000.jpg,a",  # unknown split
        "train,,a",  # empty uri
        "train,img/a/train_0001.jpg,",  # empty label
        "train,img/a/train_0002.jpg,a,extra",  # too many columns
        "train",  # too few
        "test,img/a/test_0000.jpg,zebra",  # label not in train
        '"train,img/a/train_0003.jpg,a',  # unclosed quote swallows the line
        "validation,img/a/train_0004.jpg",  # two columns after a 3-column header
        "train,img/../../nowhere/x.jpg,a",
    ]
    text = good.manifest.read_text() + "\n".join(bad) + "\n"
    good.manifest.write_text(text)
    return good.manifest, len(good.rows), len(bad)


def test_every_row_is_a_record_or_an_error_line(bad_rows_manifest, shardsmith, tmp_path, metadata_of):
    manifest, num_good, num_bad = bad_rows_manifest
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "ds",
                        "--max_error_fraction", "0.5")
    assert result.code == 0, result.err
    metadata = metadata_of(out)
    errors_file = Path(published_dir(out)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    assert metadata["num_input_rows"] == num_good + num_bad
    assert metadata["num_examples"] + len(errors) == metadata["num_input_rows"]
    assert metadata["num_errors"] == len(errors)
    for error in errors:
        assert set(error) >= ERROR_FIELDS, error
        assert error["source"] == str(manifest)
        assert error["reason"]
    lines = [e["line"] for e in errors]
    assert len(lines) == len(set(lines)), "one error line per manifest line"
    # Line numbers point into the manifest: header is line 1, good rows 2..21.
    assert all(line > num_good + 1 for line in lines)
    stages = Counter(e["stage"] for e in errors)
    assert stages["manifest"] >= 4 and stages["lookup"] >= 2 and stages["load"] >= 2 and stages["label"] == 1
    by_uri = {e["uri"]: e for e in errors}
    assert by_uri["img/missing.jpg"]["reason"] == "file not found"
    assert "truncated" in by_uri["img/truncated.jpg"]["reason"]
    assert "not an image" in by_uri["img/text.jpg"]["reason"]
    assert by_uri["img/empty.png"]["reason"] == "file is empty"
    assert "zebra" in by_uri["img/a/test_0000.jpg"]["reason"]
    assert sum(metadata["errors_by_reason"].values()) == len(errors)


def test_error_budget_fails_with_one_line_after_writing_the_report(bad_rows_manifest, shardsmith, tmp_path):
    manifest, _, num_bad = bad_rows_manifest
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "ds")
    assert result.code == 1
    message = result.err.strip().splitlines()[-1]
    assert message.startswith("shardsmith check failed:") and "--max_error_fraction=0.05" in message
    assert "Traceback" not in result.err
    errors_file = Path(message.rsplit("see ", 1)[1])  # in the unpublished build's folder
    assert errors_file.parent.parent == out / "builds" and errors_file.name == "errors.jsonl"
    assert len(errors_file.read_text().splitlines()) == num_bad
    assert not (out / "metadata.json").exists(), "a failed dataset must not look finished"


def test_refuses_to_overwrite_a_dataset_unless_asked(label_sorted_set, shardsmith, tmp_path):
    out = tmp_path / "out"
    args = ["build", "--manifest", label_sorted_set.manifest, "--output_dir", out, "--name", "pets"]
    assert shardsmith(*args).code == 0
    refused = shardsmith(*args)
    assert refused.code == 2
    assert "already holds a shardsmith dataset" in refused.err and "--overwrite" in refused.err
    assert len(refused.err.strip().splitlines()) == 1
    before = (out / "metadata.json").read_bytes()
    (out / "notes.txt").write_text("mine")
    shared = shardsmith(*args, "--overwrite")
    assert shared.code == 2 and "holds files that no shardsmith build wrote (notes.txt)" in shared.err
    assert (out / "notes.txt").read_text() == "mine" and (out / "metadata.json").read_bytes() == before
    (out / "notes.txt").unlink()
    replaced = shardsmith(*args, "--overwrite", "--num_shards", "2")
    assert replaced.code == 0, replaced.err
    assert (out / "metadata.json").read_bytes() != before
    assert not list(Path(published_dir(out)).glob("pets-train.tfrecord-*-of-00001")), "the new build has 2 shards"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--manifest", "/nonexistent/m.csv"], "manifest not found"),
        (["--manifest", "/nonexistent/*.csv"], "no manifest matches"),
        (["--name", "../escape"], "--name"),
        (["--split_ratios", "0.8,0.2"], "--split_ratios"),
        (["--num_shards", "holdout=3"], "unknown split"),
        (["--output_dir", "/proc/not-writable"], "not writable"),
    ],
)
def test_usage_errors_are_one_line(args, expected, label_sorted_set, shardsmith, tmp_path):
    base = {"--manifest": str(label_sorted_set.manifest), "--output_dir": str(tmp_path / "o"), "--name": "x"}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = ["build"] + [item for pair in base.items() for item in pair]
    result = shardsmith(*argv)
    assert result.code == 2
    assert result.err.startswith("shardsmith: error:") and expected in result.err
    assert len(result.err.strip().splitlines()) == 1


def test_python_dash_m_pipeline_is_the_same_command(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "pipeline", "sample", str(tmp_path / "s"), "--per_label", "2"],
                          capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "s" / "manifest.csv").exists()


def test_errors_jsonl_written_in_parts_is_the_same_sorted_file(bad_rows_manifest, shardsmith, tmp_path,
                                                               monkeypatch):
    """errors.jsonl is written in bounded sorted parts (transforms/error_parts.py) and merged: with parts of 3
    lines over two manifests, merged two at a time in rounds, the file is byte-identical to the one written in a
    single part, sorted by source and line, and no part file is left in the build's folder."""
    from transforms import error_parts

    manifest, _, num_bad = bad_rows_manifest
    second = manifest.with_name("again.csv")
    second.write_text(manifest.read_text())
    written = {}
    defaults = (error_parts.ERROR_LINES_PER_PART, error_parts.PARTS_MERGED_AT_ONCE)
    for lines_per_part, merged_at_once in (defaults, (3, 2)):
        monkeypatch.setattr(error_parts, "ERROR_LINES_PER_PART", lines_per_part)
        monkeypatch.setattr(error_parts, "PARTS_MERGED_AT_ONCE", merged_at_once)
        out = tmp_path / f"out{lines_per_part}"
        result = shardsmith("build", "--manifest", manifest, "--manifest", second, "--output_dir", out,
                            "--name", "ds", "--max_error_fraction", "0.5")
        assert result.code == 0, result.err
        files = Path(published_dir(out))
        assert not [p.name for p in files.iterdir() if error_parts.ERROR_PART_PREFIX in p.name]
        written[lines_per_part] = (files / "errors.jsonl").read_bytes()
    single, parted = written.values()
    assert parted == single
    errors = [json.loads(line) for line in parted.decode().splitlines()]
    assert len(errors) == 2 * num_bad
    keys = [(e["source"], e["line"], e["uri"], e["stage"], e["reason"]) for e in errors]
    assert keys == sorted(keys) and {e["source"] for e in errors} == {str(manifest), str(second)}


def _report_inputs(out: Path) -> dict:
    """The report's inputs as a finished build handed them over, rebuilt from its metadata.json: each shard's
    result, the plan, the vocabulary, the error summary and the input row count."""
    metadata = read_metadata(str(out))
    shards = [ShardResult(split, index, len(entry.shards), shard.file, shard.num_examples, shard.num_bytes,
                          dict(shard.label_counts), crc32c=shard.crc32c, first_key=shard.first_key,
                          index_file=shard.index)
              for split, entry in metadata.splits.items() for index, shard in enumerate(entry.shards)]
    plan = ShardPlan({split: SplitPlan(entry.num_placed, entry.source_bytes, entry.num_shards)
                      for split, entry in metadata.splits.items()}, {})
    config = ReportConfig(target=BuildTarget(str(out), metadata.build_id), name=metadata.name, seed=metadata.seed,
                          checks=CheckSettings(max_error_fraction=0.5),
                          records=RecordSettings(compression=metadata.compression_or_default),
                          recorded_options=metadata.options)
    return {"config": config, "shards": shards, "plan": plan,
            "vocabulary": Vocabulary(tuple(metadata.labels), metadata.labels_taken_from,
                                     tuple(metadata.label_image_counts)),
            "errors": ErrorSummary(metadata.num_errors, dict(metadata.errors_by_reason)),
            "num_input_rows": metadata.num_input_rows, "duplicates": DuplicateSummary()}


@pytest.mark.parametrize("lost", ["a shard's result", "a shard's result twice"])
def test_records_and_errors_that_do_not_add_up_to_the_rows_fail_before_publishing(lost, bad_rows_manifest,
                                                                                   shardsmith, tmp_path):
    """The accounting check's failure branch, with a real build's counts: the report is handed every shard's
    result but one (rows lost on the way), or one of them twice (rows duplicated). It must refuse in one line and
    publish nothing, even while the build holds the folder's lock and would otherwise publish."""
    manifest, num_good, num_bad = bad_rows_manifest
    out = tmp_path / "out"
    assert shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "ds",
                      "--max_error_fraction", "0.5").code == 0
    inputs = _report_inputs(out)
    config, shards = inputs["config"], inputs["shards"]
    whole = build_metadata(config, shards, inputs["plan"], inputs["vocabulary"], inputs["errors"],
                           inputs["num_input_rows"])
    assert whole.num_example_rows + inputs["errors"].num_errors == inputs["num_input_rows"] == num_good + num_bad
    handed = shards[1:] if lost == "a shard's result" else shards + shards[:1]
    published = (out / "metadata.json").read_bytes()
    acquire_lock(str(out), config.target.build_id)
    try:
        with pytest.raises(DatasetCheckFailed) as failed:
            check_and_write_metadata(None, config, handed, inputs["plan"], inputs["vocabulary"], inputs["errors"],
                                     inputs["num_input_rows"], inputs["duplicates"], ())
    finally:
        release_lock(str(out), config.target.build_id)
    records = sum(shard.num_examples for shard in handed)
    assert str(failed.value) == (
        f"shardsmith check failed: {num_good + num_bad} input rows but {records} in records + {num_bad} errors = "
        f"{records + num_bad}; rows were lost or duplicated, do not use this output")
    assert (out / "metadata.json").read_bytes() == published
