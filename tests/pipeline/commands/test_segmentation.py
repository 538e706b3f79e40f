"""--task segmentation: a mask_uri column adds image/segmentation/class/encoded (a greyscale PNG of class ids)
and image/segmentation/class/format; a mask of another size, with colour channels, or missing is an error
row; load() returns the mask beside the image, resized with it."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shardsmith import load
from shardsmith.output_folder.layout import published_dir


def _mask_for(size: tuple[int, int], seed: int) -> Image.Image:
    """Class ids 0..3 in blocks, as a segmentation label would hold them."""
    rng = random.Random(seed)
    width, height = size
    ids = np.zeros((height, width), dtype=np.uint8)
    for class_id in (1, 2, 3):
        x, y = rng.randrange(width // 2), rng.randrange(height // 2)
        ids[y:y + height // 3, x:x + width // 3] = class_id
    return Image.fromarray(ids, mode="L")


@pytest.fixture(scope="module")
def segmentation_set(tmp_path_factory, image_set_factory):
    base = image_set_factory(tmp_path_factory.mktemp("segmentation"),
                             {"indoor": {"train": 30, "validation": 6, "test": 6},
                              "outdoor": {"train": 20, "validation": 4, "test": 4}})
    expected, lines = {}, ["split,image_uri,label,mask_uri"]
    for index, (split, uri, label) in enumerate(base.rows):
        with Image.open(base.path_of(uri)) as image:
            size = image.size
        mask = _mask_for(size, index)
        mask_uri = f"masks/{index:03d}.png"
        (base.root / "masks").mkdir(exist_ok=True)
        if index % 3 == 1:  # a palette PNG: its indices are the class ids, whatever the colours
            paletted = mask.convert("P")
            paletted.putpalette([v for i in range(256) for v in (i * 40 % 256, 255 - i, i * 7 % 256)])
            paletted.save(base.root / mask_uri)
        else:
            mask.save(base.root / mask_uri)
        expected[uri] = np.asarray(mask)
        lines.append(f"{split},{uri},{label},{mask_uri}")
    bad = {5: "mask size differs from its image", 6: "mask is not single-channel class ids",
           7: "mask file cannot be read"}
    Image.new("L", (7, 5)).save(base.root / "masks/005.png")
    Image.new("RGB", Image.open(base.root / "masks/006.png").size).save(base.root / "masks/006.png")
    (base.root / "masks/007.png").unlink()
    manifest = base.root / "segmentation.csv"
    manifest.write_text("\n".join(lines) + "\ntrain,img/indoor/train_0001.jpg,indoor,\n")  # no mask: an error
    # Masks are checked when the shards are written, after placement: a rejected one leaves its shard a record
    # short. Balance is checked on the good rows alone.
    (base.root / "good.csv").write_text("\n".join(line for i, line in enumerate(lines) if i - 1 not in bad) + "\n")
    return base, manifest, expected, {base.rows[i][1]: reason for i, reason in bad.items()}


@pytest.fixture(scope="module")
def segmentation_built(segmentation_set, tmp_path_factory):
    from pipeline import cli

    _, manifest, _, _ = segmentation_set
    out = tmp_path_factory.mktemp("segmentation_out") / "out"
    assert cli.main(["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "scenes",
                     "--task", "segmentation", "--num_shards", "train=3,validation=1,test=1",
                     "--max_error_fraction", "0.1"]) == 0
    return out


def test_records_hold_each_mask_as_class_ids(segmentation_set, segmentation_built, read_records, metadata_of):
    _, _, expected, bad = segmentation_set
    metadata = metadata_of(segmentation_built)
    assert metadata["features"]["image/segmentation/class/encoded"] == "bytes"
    seen = set()
    for split in metadata["splits"]:
        for shard in read_records(segmentation_built, split):
            for record in shard:
                uri = record["image/filename"]
                seen.add(uri)
                assert record["image/segmentation/class/format"] == "png"
                with Image.open(io.BytesIO(record["image/segmentation/class/encoded"])) as mask:
                    assert mask.format == "PNG" and mask.mode == "L"
                    np.testing.assert_array_equal(np.asarray(mask), expected[uri])
                assert (record["image/height"], record["image/width"]) == expected[uri].shape
    assert seen == set(expected) - set(bad)


def test_bad_masks_are_error_rows_and_every_row_is_accounted_for(segmentation_set, segmentation_built,
                                                                 metadata_of):
    _, _, expected, bad = segmentation_set
    errors_file = Path(published_dir(segmentation_built)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    assert {e["uri"]: e["reason"] for e in errors if e["stage"] == "load"} == bad
    assert [e["reason"] for e in errors if e["stage"] == "manifest"] == ["empty mask URI (column 'mask_uri')"]
    metadata = metadata_of(segmentation_built)
    assert metadata["num_input_rows"] == len(expected) + 1 == metadata["num_examples"] + metadata["num_errors"]


def test_load_returns_masks_resized_with_their_images(segmentation_set, segmentation_built, tf):
    _, _, expected, _ = segmentation_set
    for example in load(str(segmentation_built), "validation", batch_size=None, features=True, shuffle_buffer=0):
        np.testing.assert_array_equal(example["mask"].numpy()[:, :, 0],
                                      expected[example["image/filename"].numpy().decode()])
    images, masks = next(iter(load(str(segmentation_built), "train", batch_size=4, image_size=(20, 30))))
    assert images.shape == (4, 20, 30, 3) and masks.shape == (4, 20, 30, 1) and masks.dtype == tf.uint8
    assert set(np.unique(masks.numpy())) <= {0, 1, 2, 3}


@pytest.fixture(scope="module")
def good_built(segmentation_set, tmp_path_factory) -> Path:
    """The good rows (no bad mask) built with --task segmentation by two writer processes: built once, for the
    tests below that compare it with other builds of the same rows."""
    from pipeline import cli

    base = segmentation_set[0]
    out = tmp_path_factory.mktemp("good_out") / "out"
    assert cli.main(["build", "--manifest", str(base.root / "good.csv"), "--output_dir", str(out), "--name", "scenes",
                     "--task", "segmentation", "--num_shards", "train=3,validation=1,test=1",
                     "--writer_processes", "2"]) == 0
    return out


def test_placement_is_balanced_and_deterministic(segmentation_set, good_built, read_records, metadata_of, checks,
                                                 shardsmith, tmp_path):
    base = segmentation_set[0]
    out = tmp_path / "0"
    assert shardsmith("build", "--manifest", base.root / "good.csv", "--output_dir", out, "--name", "scenes",
                      "--task", "segmentation", "--num_shards", "train=3,validation=1,test=1",
                      "--writer_processes", "0").code == 0
    metadata = metadata_of(out)
    assert metadata["num_errors"] == 0
    for split in metadata["splits"]:
        checks.assert_balanced([[r["image/class/text"] for r in shard] for shard in read_records(out, split)], split)
    assert checks.shard_bytes(out) == checks.shard_bytes(good_built)
    assert shardsmith("verify", out).code == 0


def test_inspect_overlays_the_masks_on_its_contact_sheet(segmentation_set, good_built, shardsmith, tmp_path):
    base = segmentation_set[0]
    classified = tmp_path / "classification"  # the same images, placed alike; masks only in good_built
    assert shardsmith("build", "--manifest", base.root / "good.csv", "--output_dir", classified, "--name", "scenes",
                      "--task", "classification", "--num_shards", "train=3,validation=1,test=1").code == 0
    sheets = []
    for i, out in enumerate((good_built, classified)):
        sheet = tmp_path / f"sheet{i}.png"
        assert shardsmith("inspect", out, "--contact_sheet", sheet, "--per_label", 3).code == 0
        sheets.append(np.asarray(Image.open(sheet).convert("RGB")).astype(int))
    assert sheets[0].shape == sheets[1].shape
    changed = (np.abs(sheets[0] - sheets[1]).sum(axis=2) > 30).mean()
    assert changed > 0.05, f"the overlay changed only {changed:.1%} of the sheet"
