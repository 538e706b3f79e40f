"""--min_side N: an image whose shorter side is below N pixels is an error row that says so, counted in the error
budget like any rejected image; the other images are records that tf.data reads back. The flag was added by
declaring it on RecordSettings (shardsmith/settings/__init__.py) and checking it in the shard writer."""

from __future__ import annotations

import csv
import json

import pytest
from PIL import Image

from shardsmith import load
from shardsmith.images.load_images import ImageInfo, ImageRejected, check_min_side

COUNTS = {"cat": {"train": 8, "validation": 2, "test": 2}, "dog": {"train": 8, "validation": 2, "test": 2}}
TINY = "img/cat/tiny.png"


@pytest.fixture(scope="module")
def with_tiny_image(tmp_path_factory, image_set_factory):
    """24 normal images (each side 40 pixels or more) and one of 12x40 pixels, in train."""
    images = image_set_factory(tmp_path_factory.mktemp("min_side"), COUNTS)
    Image.new("RGB", (12, 40), (200, 30, 30)).save(images.root / TINY)
    with images.manifest.open("a", newline="") as f:
        csv.writer(f).writerow(["train", TINY, "cat"])
    return images


def _build(shardsmith, images, out, *extra):
    return shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "pets",
                      "--num_shards", "1", "--writer_processes", "0", *extra)


def test_a_too_small_image_is_an_error_row_and_the_rest_read_back(shardsmith, with_tiny_image, tmp_path,
                                                                  metadata_of, files_of_build):
    out = tmp_path / "out"
    result = _build(shardsmith, with_tiny_image, out, "--min_side", "32")
    assert result.code == 0, result.err
    errors = [json.loads(line) for line in (files_of_build(out) / "errors.jsonl").read_text().splitlines()]
    assert [(e["uri"].endswith(TINY), e["reason"], e["detail"]) for e in errors] == [
        (True, "too small: shorter side below --min_side 32", "12x40 pixels")]
    metadata = metadata_of(out)
    assert metadata["options"]["min_side"] == 32
    assert list(metadata["options"])[-1] == "min_side", "a new recorded option follows the earlier ones"
    names = [example["image/filename"].numpy().decode()
             for example in load(str(out), "train", batch_size=None, shuffle_buffer=0, shuffle_files=False,
                                 features=True)]
    assert len(names) == 16 and not any("tiny" in name for name in names)


def test_too_small_images_count_in_the_error_budget(shardsmith, with_tiny_image, tmp_path):
    """Four normal images have a 40-pixel side: with the tiny one, 5 of 25 rows fail, over the 5% budget."""
    result = _build(shardsmith, with_tiny_image, tmp_path / "out", "--min_side", "41")
    assert result.code == 1
    assert "more than --max_error_fraction=0.05: 5 × load: too small: shorter side below --min_side 41" in result.err


def test_without_min_side_any_size_is_kept_and_nothing_is_recorded():
    check_min_side(ImageInfo("png", 1, 1, 3), 0)
    with pytest.raises(ImageRejected, match="--min_side 2"):
        check_min_side(ImageInfo("png", 1, 5, 3), 2)


def test_a_negative_min_side_is_a_usage_error(shardsmith, with_tiny_image, tmp_path):
    result = _build(shardsmith, with_tiny_image, tmp_path / "out", "--min_side", "-1")
    assert result.code == 2
    assert "--min_side must be 0 (any size) or a number of pixels" in result.err
    assert not (tmp_path / "out").exists()
