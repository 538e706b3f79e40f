"""--near_duplicates: resized copies of training images found in test (report) and taken out of it (drop),
end to end on Beam's FnApiRunner with real image files; the banding, distance, confirmation and pair logic
underneath; and the signature against imagehash's pHash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from shardsmith.format.metadata import parse_near_duplicates
from shardsmith.format.metadata_schema import Metadata, NearDuplicatesEntry
from shardsmith.near_duplicates.near_duplicate_search import (
    LOW_DETAIL_BLOCKS,
    LOW_DETAIL_MIN_STRUCTURE_SIMILARITY,
    MAX_BUCKET_MEMBERS,
    MIN_STRUCTURE_SIMILARITY,
    HashedImage,
    band_edges,
    bands,
    colours_agree,
    confirmed,
    hamming,
    leaked_copy,
    pair_of,
    pairs_in_bucket,
    structure_similarity,
    take_bucket,
)
from shardsmith.near_duplicates.perceptual_hash import MIN_REDUCED_SIDE, ImageSignature, signature_of_bytes
from shardsmith.output_folder.layout import published_dir

PHOTOS = Path(__file__).parents[1] / "data" / "tfrecorder" / "images"
PHOTO = PHOTOS / "TRAIN" / "cat" / "cat-640x853-1.jpg"
CAT_ON_FLOOR = PHOTOS / "TEST" / "cat" / "cat-800x600-3.jpg"
GOATS = PHOTOS / "TEST" / "goat" / "goat-640x427-3.jpg"
# Two tiles of different photos whose pHashes are 6 bits apart (a pair at the default distance): a beige floor
# with a black edge (the cat photo) and a pale wall with a dark edge (the goats). Their structure agrees; their
# colour does not. Found by tests/benchmarks/near_duplicates.py's tile set.
FLOOR_TILE = (CAT_ON_FLOOR, (0, 448, 112))
WALL_TILE = (GOATS, (0, 160, 80))


def _tile(tmp_path: Path, source: tuple[Path, tuple[int, int, int]], name: str) -> Path:
    path, (left, top, side) = source
    with Image.open(path) as photo:
        photo.crop((left, top, left + side, top + side)).save(tmp_path / name, "JPEG", quality=90)
    return tmp_path / name


@pytest.fixture
def leaky_set(tmp_path, image_set_factory):
    """Synthetic images in train and test, plus a real photo in train and its half-size copy in test."""
    images = image_set_factory(tmp_path, {"a": {"train": 10, "test": 3}, "b": {"train": 10, "test": 3}})
    shutil.copy(PHOTO, tmp_path / "img" / "photo.jpg")
    with Image.open(PHOTO) as photo:
        photo.resize((photo.width // 2, photo.height // 2)).save(tmp_path / "img" / "photo_small.jpg", quality=80)
    _tile(tmp_path / "img", FLOOR_TILE, "floor.jpg")
    _tile(tmp_path / "img", WALL_TILE, "wall.jpg")
    with images.manifest.open("a") as f:
        f.write("train,img/photo.jpg,a\ntest,img/photo_small.jpg,a\ntrain,img/floor.jpg,a\ntest,img/wall.jpg,a\n")
    return images


def build(shardsmith, images, out, *extra):
    return shardsmith("build", "--manifest", images.manifest, "--output_dir", out, "--name", "d",
                      "--num_shards", "2", *extra)


def _pairs(out: Path) -> list[dict]:
    return parse_near_duplicates((Path(published_dir(out)) / "near_duplicates.jsonl").read_bytes())


def _photo_pair(pairs: list[dict]) -> dict:
    return next(p for p in pairs if {p["first"]["uri"], p["second"]["uri"]} == {"img/photo.jpg", "img/photo_small.jpg"})


def test_report_lists_the_resized_copy_and_changes_no_shard_byte(leaky_set, shardsmith, tmp_path, metadata_of,
                                                                  checks):
    off, report, again = tmp_path / "off", tmp_path / "report", tmp_path / "again"
    assert build(shardsmith, leaky_set, off).code == 0
    result = build(shardsmith, leaky_set, report, "--near_duplicates", "report")
    assert result.code == 0, result.err
    pair = _photo_pair(_pairs(report))
    assert pair["first"]["split"] == "train" and pair["second"]["split"] == "test" and pair["splits"] == "train-test"
    assert pair["distance"] <= 6 and pair["similarity"] >= MIN_STRUCTURE_SIMILARITY and not pair["labels_differ"]
    assert not pair["low_detail"]
    pictures = {"img/floor.jpg", "img/wall.jpg"}
    assert not [p for p in _pairs(report) if pictures & {p["first"]["uri"], p["second"]["uri"]}]
    near = metadata_of(report)["near_duplicates"]
    assert near["mode"] == "report" and near["split_pairs"]["train-test"] >= 1 and near["num_dropped"] == 0
    assert Metadata.from_json(metadata_of(report)).near_duplicates.to_json() == near
    assert "near dups" in result.out and "train-test" in result.out
    assert "near_duplicates" not in metadata_of(off)
    assert not (Path(published_dir(off)) / "near_duplicates.jsonl").exists()
    assert checks.shard_bytes(report) == checks.shard_bytes(off)
    assert build(shardsmith, leaky_set, again, "--near_duplicates", "report").code == 0
    assert checks.shard_bytes(again) == checks.shard_bytes(report)
    assert _pairs(again) == _pairs(report)
    drawn = tmp_path / "pairs.png"
    result = shardsmith("inspect", report, "--near_duplicates", drawn)
    assert result.code == 0, result.err
    assert "near dups" in result.out and "closest pairs" in result.out
    with Image.open(drawn) as png:
        assert png.format == "PNG" and png.height >= 2.8 * 100 * len(_pairs(report)[:12])  # one pair per row
    result = shardsmith("inspect", off, "--near_duplicates", drawn)
    assert result.code == 2 and "without --near_duplicates" in result.err


def test_drop_turns_the_test_copy_into_an_error_row(leaky_set, shardsmith, tmp_path, metadata_of, read_records):
    out, again = tmp_path / "out", tmp_path / "again"
    result = build(shardsmith, leaky_set, out, "--near_duplicates", "drop")
    assert result.code == 0, result.err
    metadata = metadata_of(out)
    errors = [json.loads(line) for line in (Path(published_dir(out)) / "errors.jsonl").read_text().splitlines()]
    dropped = {e["uri"]: e for e in errors if e["stage"] == "duplicate"}
    assert "img/photo_small.jpg" in dropped and "img/photo.jpg" not in dropped
    assert dropped["img/photo_small.jpg"]["detail"].startswith("near duplicate of img/photo.jpg in train (distance ")
    assert metadata["near_duplicates"]["num_dropped"] == len(dropped)
    assert "img/wall.jpg" not in dropped  # it only hashes like the floor
    assert metadata["num_examples"] + metadata["num_errors"] == metadata["num_input_rows"] == 30
    written = {r["image/filename"] for split in ("train", "test") for shard in read_records(out, split)
               for r in shard}
    assert "img/photo.jpg" in written and "img/photo_small.jpg" not in written
    assert build(shardsmith, leaky_set, again, "--near_duplicates", "drop").code == 0
    assert (Path(published_dir(again)) / "errors.jsonl").read_bytes() == \
        (Path(published_dir(out)) / "errors.jsonl").read_bytes()


def test_uniform_images_are_one_group_compared_once_not_a_capped_bucket(tmp_path, shardsmith, metadata_of,
                                                                        monkeypatch):
    """Identical signatures are grouped before the bands: a full bucket is never made of them (the bounds on
    1,000 of them under a memory cap: tests/stages/test_near_duplicate_bounds.py)."""
    import transforms.near_duplicates

    cap = 200
    assert cap < MAX_BUCKET_MEMBERS
    monkeypatch.setattr(transforms.near_duplicates, "MAX_BUCKET_MEMBERS", cap)
    rows = ["split,image_uri,label"]
    for i in range(cap + 5):
        Image.new("L", (16, 16), 0).save(tmp_path / f"black_{i}.png")
        rows.append(f"{('train', 'test')[i % 2]},black_{i}.png,{'ab'[i // 2 % 2]}")
    (tmp_path / "manifest.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "out"
    result = shardsmith("build", "--manifest", tmp_path / "manifest.csv", "--output_dir", out, "--name", "d",
                        "--near_duplicates", "report")
    assert result.code == 0, result.err
    near = metadata_of(out)["near_duplicates"]
    assert near["num_capped_buckets"] == 0 and near["num_pairs"] == 0
    assert near["num_identical_groups"] == 1 and near["identical_groups"][0]["size"] == cap + 5
    assert near["identical_groups"][0]["splits"] == {"train": 103, "test": 102}
    assert "1 group of 205 identical-looking images" in result.out


SOME_STRUCTURE = bytes(range(1, 64))
GREY = bytes(8)


def _signature(phash: int, structure: bytes = SOME_STRUCTURE, colour: bytes = GREY, detail: int = 16):
    return ImageSignature(phash, structure, colour, detail)


def _image(phash: int, split: str = "train", line: int = 1, label: str = "a", **signature) -> HashedImage:
    return HashedImage(_signature(phash, **signature), split, label, f"img/{line}.jpg", 0, line)


def test_an_entry_from_before_the_confirmation_still_reads():
    entry = {"mode": "report", "max_distance": 8, "hash": "pHash", "num_pairs": 3,
             "num_listed": 3, "file": "near_duplicates.jsonl", "split_pairs": {"train-test": 2, "validation-test": 0,
             "test": 1}, "num_label_mismatches": 0, "num_dropped": 0, "num_capped_buckets": 0}
    near = NearDuplicatesEntry.from_json(entry)
    assert near.num_low_detail_pairs == 0 and near.low_detail_min_structure_similarity is None
    assert near.min_structure_similarity is None  # the first version reported pHash distances alone
    assert near.split_pairs_text() == "train-test 2, test 1"
    assert near.to_json() == entry  # read and written back as it was: no key added
    assert Metadata.from_json({"name": "off", "labels": [], "features": {}, "splits": {}}).near_duplicates is None


def test_bands_cover_every_bit_and_pigeonhole_holds():
    for num_bands in (1, 5, 9, 11, 64):
        edges = band_edges(num_bands)
        assert sum(width for _, width in edges) == 64 and edges[0][0] == 0
    a = 0x0123_4567_89AB_CDEF
    flipped = a ^ (1 << 0) ^ (1 << 9) ^ (1 << 20) ^ (1 << 33) ^ (1 << 47) ^ (1 << 50) ^ (1 << 58) ^ (1 << 63)
    assert hamming(a, flipped) == 8
    assert set(bands(a, 9)) & set(bands(flipped, 9))  # 8 bits apart: a band of 9 is shared
    with pytest.raises(ValueError):
        band_edges(0)


def test_pairs_in_a_bucket_are_within_the_distance_ordered_and_deterministic():
    members = [_image(0b1111, "test", 3), _image(0b0111, "train", 2), _image(0xFFFF_0000, "train", 1)]
    pairs = list(pairs_in_bucket(members, 2))
    assert len(pairs) == 1
    pair = pairs[0]
    assert (pair.first.line, pair.second.line, pair.distance, pair.splits) == (2, 3, 1, "train-test")
    assert list(pairs_in_bucket(list(reversed(members)), 2)) == pairs
    assert pair_of(members[0], members[1], 1) == pair_of(members[1], members[0], 1)
    assert leaked_copy(pair) == members[0]
    assert leaked_copy(pair_of(_image(1, "validation", 1), _image(1, "test", 2), 0)) is None
    assert pair_of(_image(1, label="a"), _image(1, line=2, label="b"), 0).labels_differ


def test_a_candidate_is_a_pair_only_when_structure_and_colour_agree():
    other_structure = bytes(b if i % 2 else 256 - b for i, b in enumerate(SOME_STRUCTURE))
    reddish = bytes([40, 0] * 4)  # red-green 40/64 of the mean brightness in each quarter
    members = [_image(0xF0F0, "train", 1), _image(0xF0F0, "test", 2, structure=other_structure),
               _image(0xF0F0, "test", 3, colour=reddish), _image(0xF0F1, "test", 4, detail=LOW_DETAIL_BLOCKS - 1)]
    pairs = list(pairs_in_bucket(members, 2))
    assert [(p.first.line, p.second.line) for p in pairs] == [(1, 4)]
    assert pairs[0].low_detail and pairs[0].to_dict()["low_detail"] is True
    assert structure_similarity(members[0].signature, members[1].signature) < MIN_STRUCTURE_SIMILARITY
    assert not colours_agree(members[0].signature, members[2].signature)
    brighter_contrast = bytes([52, 0] * 4)  # the same colour scaled by x1.3, as a contrast change does
    assert colours_agree(_signature(0, colour=reddish), _signature(0, colour=brighter_contrast))
    flat = _signature(0, structure=bytes(63))
    assert structure_similarity(flat, flat) == 1.0 and structure_similarity(flat, members[0].signature) == 0.0


def test_low_detail_pairs_must_agree_more_closely():
    """Patches of sky or wall with an edge in one corner hash alike and share their low frequencies: a pair with
    a low-detail image needs a closer structure than a pair of textured pictures."""
    looser_structure = bytes(30) + SOME_STRUCTURE[30:]
    textured, low = _signature(0), _signature(0, detail=LOW_DETAIL_BLOCKS - 1)
    similarity = structure_similarity(textured, _signature(0, structure=looser_structure))
    assert MIN_STRUCTURE_SIMILARITY <= similarity < LOW_DETAIL_MIN_STRUCTURE_SIMILARITY
    assert confirmed(textured, _signature(0, structure=looser_structure))[0]
    assert not confirmed(low, _signature(0, structure=looser_structure))[0]
    assert not confirmed(textured, _signature(0, structure=looser_structure, detail=LOW_DETAIL_BLOCKS - 1))[0]
    assert confirmed(low, _signature(0))[0]  # a copy of a low-detail image is still found


def test_tiles_that_only_hash_alike_are_not_confirmed(tmp_path):
    floor = signature_of_bytes(_tile(tmp_path, FLOOR_TILE, "floor.jpg").read_bytes())
    wall = signature_of_bytes(_tile(tmp_path, WALL_TILE, "wall.jpg").read_bytes())
    assert hamming(floor.phash, wall.phash) <= 10  # a candidate at the default distance
    assert structure_similarity(floor, wall) >= MIN_STRUCTURE_SIMILARITY
    assert not colours_agree(floor, wall) and not confirmed(floor, wall)[0]


def test_phash_is_imagehash_phash_bit_for_bit():
    import io

    import imagehash

    for path in sorted(PHOTOS.rglob("*.jpg")):
        data = path.read_bytes()
        with Image.open(io.BytesIO(data)) as image:
            scale = max(1, min(image.size) // MIN_REDUCED_SIDE)
            image.draft("RGB", (image.width // scale, image.height // scale))
            image.load()
            factor = min(image.size) // MIN_REDUCED_SIDE
            reduced = image.reduce(factor) if factor >= 2 else image
            expected = int(str(imagehash.phash(reduced.convert("L"))), 16)
        assert signature_of_bytes(data).phash == expected, path.name


def test_take_bucket_holds_no_more_than_the_cap():
    held, size = take_bucket((_image(0, line=i) for i in range(10_000)), cap=50)
    assert size == 10_000 and len(held) <= 3
    held, size = take_bucket((_image(0, line=i) for i in range(50)), cap=50)
    assert size == 50 and len(held) == 50


def test_a_resized_photo_is_confirmed_and_another_photo_is_far():
    original = PHOTO.read_bytes()
    with Image.open(PHOTO) as photo:
        import io
        small = io.BytesIO()
        photo.resize((photo.width // 2, photo.height // 2)).save(small, "JPEG", quality=60)
    other = (PHOTOS / "TRAIN" / "goat" / "goat-640x640-1.jpg").read_bytes()
    original, small, other = (signature_of_bytes(data) for data in (original, small.getvalue(), other))
    assert hamming(original.phash, small.phash) <= 6 and confirmed(original, small)[0]
    assert original.detail >= LOW_DETAIL_BLOCKS
    assert hamming(original.phash, other.phash) >= 16 and not confirmed(original, other)[0]
    assert signature_of_bytes(b"not an image") is None


@pytest.mark.parametrize("validate", ["decode", "header"])
def test_the_writer_hashes_only_when_asked_and_the_same_bytes_either_way(tmp_path, validate):
    from shardsmith.rows import ManifestRow, PlacedRow
    from shardsmith.settings import RecordSettings
    from shardsmith.shard_writer.shard_file import write_shard_file
    from shardsmith.shard_writer.writer_config import UnlockedFolder, WriterConfig

    row = ManifestRow(str(tmp_path / "m.csv"), 0, 2, "photo.jpg", str(PHOTO), "train", "cat", -1, 0)
    placed = [PlacedRow(row, 0, 1, (0, 0, 2))]
    outcomes = {}
    for on in (False, True):
        out = tmp_path / str(on)
        out.mkdir()
        settings = RecordSettings(validate=validate, perceptual_hash=on)
        outcomes[on] = write_shard_file(WriterConfig(UnlockedFolder(str(out)), "d", settings), "train", 0, [placed])
        outcomes[on, "bytes"] = (out / outcomes[on].result.file).read_bytes()
    assert outcomes[False].signatures == []
    assert [(h.uri, h.split, h.label) for h in outcomes[True].signatures] == [("photo.jpg", "train", "cat")]
    signature = outcomes[True].signatures[0].signature
    assert hamming(signature.phash, signature_of_bytes(PHOTO.read_bytes()).phash) <= 4
    assert confirmed(signature, signature_of_bytes(PHOTO.read_bytes()))[0]
    assert outcomes[True, "bytes"] == outcomes[False, "bytes"]
