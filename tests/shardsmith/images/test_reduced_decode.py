"""`--validate decode` decodes JPEGs at 1/8 scale: it must reject every damaged file that a full decode rejects.
The corpus and the counting are tests/benchmarks/decode_agreement.py's (its full run is the documented table);
here a smaller corpus of the same real photos, damaged the same ways."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from shardsmith.images.load_images import JPEG_VALIDATION_SCALE, ImageRejected, inspect_image

BENCHMARK = Path(__file__).parents[2] / "benchmarks" / "decode_agreement.py"


@pytest.fixture(scope="module")
def agreement_module():
    spec = importlib.util.spec_from_file_location("decode_agreement", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table(agreement_module, tfrecorder_data):
    files = agreement_module.source_files(tfrecorder_data / "images")
    return agreement_module.agreement(files, seed=1, truncations=6, flips=25, markers=6)


def test_the_reduced_decode_rejects_whatever_the_full_decode_rejects(table):
    assert JPEG_VALIDATION_SCALE == 8
    rejected_in_full = sum(row["rejected at 1/1"] for row in table.values())
    missed = {key: row[f"missed at 1/{JPEG_VALIDATION_SCALE}"] for key, row in table.items()}
    assert sum(missed.values()) == 0, missed
    # The corpus does damage what it should: every truncated file is rejected, by both decodes.
    for (kind, how), row in table.items():
        if how == "truncated":
            assert row["rejected at 1/1"] == row[f"rejected at 1/{JPEG_VALIDATION_SCALE}"] == row["files"], kind
    assert rejected_in_full > 100


def test_the_reduced_decode_rejects_no_file_that_a_full_decode_accepts(table):
    extra = {key: row[f"extra at 1/{JPEG_VALIDATION_SCALE}"] for key, row in table.items()}
    assert sum(extra.values()) == 0, extra


def test_the_reduced_decode_keeps_the_full_size_in_what_it_reports(tfrecorder_data):
    photo = next((tfrecorder_data / "images").rglob("*.jpg")).read_bytes()
    full = inspect_image(photo, "decode", jpeg_scale=1)
    reduced = inspect_image(photo, "decode")
    assert reduced == full and full.width >= 320


def test_a_truncated_photo_is_rejected_by_the_reduced_decode(tfrecorder_data):
    photo = next((tfrecorder_data / "images").rglob("*.jpg")).read_bytes()
    with pytest.raises(ImageRejected, match="truncated or corrupt"):
        inspect_image(photo[: len(photo) * 9 // 10], "decode")
