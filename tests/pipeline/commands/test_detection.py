"""--task detection: AutoML Vision object-detection CSV (one line per box, with or without a header) and
JSON Lines (one line per image) become records with the TF Object Detection API keys; bad boxes reject
every line of their image; load() returns the boxes; placement stays balanced and deterministic."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

from shardsmith import load
from shardsmith.output_folder.layout import published_dir

LABELS = ("bike", "car", "person")


def _make_images(root: Path, count: int, seed: int = 1) -> dict[str, list[tuple[str, tuple]]]:
    """`count` images, each with 1-3 boxes drawn on it; returns uri -> [(label, (xmin, ymin, xmax, ymax))]."""
    rng = random.Random(seed)
    objects = {}
    for i in range(count):
        width, height = rng.randrange(60, 121, 4), rng.randrange(50, 101, 2)
        image = Image.new("RGB", (width, height), (rng.randrange(256), rng.randrange(256), rng.randrange(256)))
        draw = ImageDraw.Draw(image)
        boxes = []
        for _ in range(1 + rng.randrange(3)):
            x0, y0 = round(rng.uniform(0, 0.5), 3), round(rng.uniform(0, 0.5), 3)
            x1, y1 = round(x0 + rng.uniform(0.1, 0.45), 3), round(y0 + rng.uniform(0.1, 0.45), 3)
            label = LABELS[(i + len(boxes)) % 3] if i % 4 else "person"
            boxes.append((label, (x0, y0, x1, y1)))
            draw.rectangle((x0 * width, y0 * height, x1 * width, y1 * height), outline=(255, 255, 0))
        uri = f"img/{i:03d}.jpg"
        (root / "img").mkdir(parents=True, exist_ok=True)
        image.save(root / uri, "JPEG", quality=90)
        objects[uri] = boxes
    return objects


def _split(i: int) -> str:
    return "TRAIN" if i % 10 < 7 else ("VALIDATION" if i % 10 < 9 else "TEST")


@pytest.fixture(scope="module")
def detection_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("detection")
    objects = _make_images(root, 60)
    lines = []
    for i, (uri, boxes) in enumerate(objects.items()):
        for label, (x0, y0, x1, y1) in boxes:
            if i % 2:  # the two-vertex form
                lines.append(f"{_split(i)},{uri},{label},{x0},{y0},,,{x1},{y1},,")
            else:  # all four corners, clockwise from top left
                lines.append(f"{_split(i)},{uri},{label},{x0},{y0},{x1},{y0},{x1},{y1},{x0},{y1}")
    random.Random(3).shuffle(lines)  # the lines of one image need not be next to each other
    bad = [
        "TRAIN,img/000.jpg,car,0.5,0.2,,,0.4,0.6,,",  # min > max: image 000 is rejected whole
        "TRAIN,img/001.jpg,car,0.1,0.2,,,1.3,0.6,,",  # outside [0, 1]: image 001 too
        "TRAIN,img/002.jpg,car,0.1,zero,,,0.3,0.6,,",  # not a number: image 002 too
        "TRAIN,img/404.jpg,car,0.1,0.2,,,0.3,0.6,,",  # no such file: a load error
    ]
    manifest = root / "boxes.csv"
    manifest.write_text("\n".join(lines + bad) + "\n")
    return root, manifest, objects, len(lines) + len(bad)


@pytest.fixture(scope="module")
def detection_built(detection_set, tmp_path_factory):
    from pipeline import cli

    root, manifest, _, _ = detection_set
    out = tmp_path_factory.mktemp("detection_out") / "out"
    assert cli.main(["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "boxes",
                     "--task", "detection", "--num_shards", "train=3,validation=1,test=1",
                     "--max_error_fraction", "0.2"]) == 0
    return out


def test_records_hold_every_box_of_their_image(detection_set, detection_built, read_records, metadata_of):
    _, _, objects, _ = detection_set
    metadata = metadata_of(detection_built)
    assert metadata["task"] == "detection" and metadata["labels"] == list(LABELS)
    assert metadata["features"]["image/object/bbox/xmin"] == "float_list"
    assert "image/class/label" not in metadata["features"]
    seen = set()
    for split in metadata["splits"]:
        for shard in read_records(detection_built, split):
            for record in shard:
                uri = record["image/filename"]
                seen.add(uri)
                # Boxes follow the manifest's line order (shuffled here): compare as (label, box) pairs.
                boxes = zip(*(record[f"image/object/bbox/{k}"] for k in ("xmin", "ymin", "xmax", "ymax")), strict=True)
                got = sorted(zip(record["image/object/class/text"], boxes, strict=True))
                expected = sorted(objects[uri])
                assert [label for label, _ in got] == [label for label, _ in expected]
                np.testing.assert_allclose([box for _, box in got], [box for _, box in expected], rtol=1e-6)
                ids = record["image/object/class/label"]
                assert [LABELS[i] for i in ids] == record["image/object/class/text"]
    assert seen == set(objects) - {"img/000.jpg", "img/001.jpg", "img/002.jpg"}


def test_every_line_is_accounted_for_and_bad_boxes_reject_their_image(detection_set, detection_built,
                                                                      metadata_of):
    _, _, objects, num_lines = detection_set
    metadata = metadata_of(detection_built)
    errors_file = Path(published_dir(detection_built)) / "errors.jsonl"
    errors = [json.loads(line) for line in errors_file.read_text().splitlines()]
    assert metadata["num_input_rows"] == num_lines
    assert metadata["num_example_rows"] + len(errors) == num_lines == metadata["num_example_rows"] + \
        metadata["num_errors"]
    by_uri = {}
    for error in errors:
        by_uri.setdefault(error["uri"], []).append(error["reason"])
    for uri, own in (("img/000.jpg", "box has min >= max"), ("img/001.jpg", "box coordinate outside [0, 1]"),
                     ("img/002.jpg", "box ymin is not a number")):
        reasons = by_uri[uri]
        assert len(reasons) == len(objects[uri]) + 1 and reasons.count(own) == 1, reasons
        assert all(r == own or r.startswith("another box line of this image is invalid") for r in reasons)
    assert by_uri["img/404.jpg"] == ["file not found"]


def test_load_returns_boxes_and_classes(detection_set, detection_built):
    _, _, objects, _ = detection_set
    dataset = load(str(detection_built), "train", batch_size=None, shuffle_buffer=0, shuffle_files=False)
    count = 0
    for image, target in dataset:
        count += 1
        assert image.shape[-1] == 3 and target["boxes"].shape[-1] == 4
        assert target["boxes"].shape[0] == target["classes"].shape[0] >= 1
        ymin, xmin, ymax, xmax = (target["boxes"].numpy()[:, k] for k in range(4))
        assert (xmin < xmax).all() and (ymin < ymax).all()
    batched = next(iter(load(str(detection_built), "train", batch_size=8, image_size=32)))
    assert batched[0].shape == (8, 32, 32, 3) and batched[1]["boxes"].shape[0] == 8
    assert count == sum(1 for uri in objects if _split(int(uri[4:7])) == "TRAIN") - 3


def test_placement_is_balanced_by_the_rarest_label_and_deterministic(detection_set, detection_built, shardsmith,
                                                                     tmp_path, read_records, metadata_of, checks):
    metadata = metadata_of(detection_built)
    for split in metadata["splits"]:
        shards = [[checks.placed_by(r["image/object/class/label"], metadata) for r in shard]
                  for shard in read_records(detection_built, split)]
        checks.assert_balanced(shards, split)
        assert metadata["splits"][split]["label_counts"] == dict(sorted(
            {label: sum(s.count(label) for s in shards) for label in LABELS if any(label in s for s in shards)}
            .items()))
    _, manifest, _, _ = detection_set
    again = tmp_path / "again"
    assert shardsmith("build", "--manifest", manifest, "--output_dir", again, "--name", "boxes", "--task",
                      "detection", "--num_shards", "train=3,validation=1,test=1", "--writer_processes", "0",
                      "--max_error_fraction", "0.2").code == 0
    assert checks.shard_bytes(again) == checks.shard_bytes(detection_built)
    assert shardsmith("verify", detection_built).code == 0


def test_header_csv_and_jsonl_give_the_same_records(detection_set, detection_built, shardsmith, tmp_path,
                                                    checks):
    root, _, objects, _ = detection_set
    good = {uri: boxes for uri, boxes in objects.items() if uri not in ("img/000.jpg", "img/001.jpg", "img/002.jpg")}
    with_header = root / "boxes_header.csv"
    lines = ["split,image_uri,label,xmin,ymin,xmax,ymax"]
    jsonl = []
    for uri, boxes in good.items():
        split = _split(int(uri[4:7]))
        lines += [f"{split},{uri},{label},{x0},{y0},{x1},{y1}" for label, (x0, y0, x1, y1) in boxes]
        jsonl.append(json.dumps({"split": split, "image_uri": uri, "boxes": [
            {"label": label, "xmin": x0, "ymin": y0, "xmax": x1, "ymax": y1} for label, (x0, y0, x1, y1) in boxes]}))
    with_header.write_text("\n".join(lines) + "\n")
    (root / "boxes.jsonl").write_text("\n".join(jsonl) + "\n")
    outputs = []
    for manifest in (with_header, root / "boxes.jsonl"):
        out = tmp_path / manifest.suffix[1:]
        assert shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "boxes", "--task",
                          "detection", "--num_shards", "train=3,validation=1,test=1").code == 0
        outputs.append(out)
    # Placement hashes the URI as written, so the three manifests place every image alike; the records differ
    # only in nothing: same keys, same values.
    first, second = (checks.shard_bytes(out) for out in outputs)
    assert first == second
    assert set(first) == set(checks.shard_bytes(detection_built))


def test_inspect_draws_the_boxes_on_its_contact_sheet(detection_built, shardsmith, tmp_path):
    sheet = tmp_path / "sheet.png"
    result = shardsmith("inspect", detection_built, "--contact_sheet", sheet, "--per_label", 3)
    assert result.code == 0, result.err
    pixels = np.asarray(Image.open(sheet).convert("RGB")).reshape(-1, 3).astype(int)
    first_box_colour = (0xE6, 0x19, 0x4B)  # every image has a first box, outlined in this colour
    assert (np.abs(pixels - first_box_colour).sum(axis=1) < 40).sum() > 100
