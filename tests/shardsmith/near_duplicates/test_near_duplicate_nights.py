"""--near_duplicates with --incremental: a night compares its new images with each other and with the published
version's records, whose signatures the row lists keep; never two published records again. Planted near copies
of the tensorflow-recorder photos (resized, re-encoded, slightly cropped), end to end on Beam's FnApiRunner:
`report` lists a new copy of a published image with the side that is published, `drop` takes the new copy out
and keeps the published record, records without a signature are counted, and two nights find what one full
build of the same rows finds (the corpus of tests/benchmarks/near_duplicate_nights.py, at a small size)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from PIL import Image

from shardsmith.format.metadata import parse_near_duplicates
from shardsmith.format.naming import BUILDS_DIR
from shardsmith.format.row_list import ListedRow, RowListError, parse_row_list, row_list_bytes
from shardsmith.near_duplicates.near_duplicate_search import MAX_BUCKET_CANDIDATES, HashedImage, leaked_copy, pair_of
from shardsmith.near_duplicates.perceptual_hash import (
    ImageSignature,
    signature_from_text,
    signature_of_bytes,
    signature_text,
)
from shardsmith.output_folder.layout import published_dir

ROOT = Path(__file__).resolve().parents[3]
PHOTOS = ROOT / "tests" / "data" / "tfrecorder" / "images"
CAT = PHOTOS / "TRAIN" / "cat" / "cat-640x853-1.jpg"
CAT_ON_FLOOR = PHOTOS / "TEST" / "cat" / "cat-800x600-3.jpg"
GOATS = PHOTOS / "TEST" / "goat" / "goat-640x427-3.jpg"
GOAT = PHOTOS / "TRAIN" / "goat" / "goat-640x640-1.jpg"
OTHER_CAT = PHOTOS / "VALIDATION" / "cat" / "cat-800x600-2.jpg"
SMALL_GOAT = PHOTOS / "VALIDATION" / "goat" / "goat-320x320-2.jpg"

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _save(source: Path, target: Path, change=lambda im: im, quality: int = 90) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with Image.open(source) as photo:
        change(photo.convert("RGB")).save(target, "JPEG", quality=quality)


def _cropped(fraction: float):
    def crop(image: Image.Image) -> Image.Image:
        dx, dy = round(image.width * fraction / 2), round(image.height * fraction / 2)
        return image.crop((dx, dy, image.width - dx, image.height - dy))
    return crop


def _resized(factor: float):
    return lambda image: image.resize((round(image.width * factor), round(image.height * factor)), Image.LANCZOS)


class Nights:
    """Night 1: six photos and a carried pair (a test copy of a training photo, both published). Night 2 adds a
    test copy of a published training photo, a training copy of a published test photo, and a new pair."""

    NIGHT1 = [("train", "img/cat.jpg", "cat"), ("test", "img/goats.jpg", "goat"), ("train", "img/goat.jpg", "goat"),
              ("train", "img/floor_cat.jpg", "cat"), ("test", "img/floor_cat_small.jpg", "cat"),
              ("train", "img/small_goat.jpg", "goat")]
    NIGHT2 = [("test", "img/cat_cropped.jpg", "cat"), ("train", "img/goats_larger.jpg", "goat"),
              ("train", "img/other_cat.jpg", "cat"), ("test", "img/other_cat_q50.jpg", "cat")]

    def __init__(self, root: Path):
        self.root = root
        for source, name, change, quality in (
                (CAT, "cat", None, 90), (GOATS, "goats", None, 90), (GOAT, "goat", None, 90),
                (CAT_ON_FLOOR, "floor_cat", None, 90), (CAT_ON_FLOOR, "floor_cat_small", _resized(0.5), 80),
                (SMALL_GOAT, "small_goat", None, 90), (CAT, "cat_cropped", _cropped(0.04), 75),
                (GOATS, "goats_larger", _resized(1.5), 85), (OTHER_CAT, "other_cat", None, 90),
                (OTHER_CAT, "other_cat_q50", None, 50)):
            _save(source, root / "img" / f"{name}.jpg", change or (lambda im: im), quality)

    def manifest(self, name: str, rows) -> Path:
        path = self.root / f"{name}.csv"
        path.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{label}\n" for s, u, label in rows))
        return path


@pytest.fixture
def nights(tmp_path) -> Nights:
    return Nights(tmp_path / "images")


def build(shardsmith, manifest: Path, out: Path, *extra: str):
    return shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "pets",
                      "--num_shards", "train=2,test=1", *extra)


def metadata(out: Path) -> dict:
    return json.loads((out / "metadata.json").read_text())


def listed_pairs(out: Path) -> dict[frozenset, dict]:
    pairs = parse_near_duplicates((Path(published_dir(out)) / "near_duplicates.jsonl").read_bytes())
    return {frozenset((p["first"]["uri"], p["second"]["uri"])): p for p in pairs}


def errors(out: Path) -> dict[str, dict]:
    lines = (Path(published_dir(out)) / "errors.jsonl").read_text().splitlines()
    return {e["uri"]: e for e in map(json.loads, lines)}


def version_uris(out: Path, split: str) -> set[str]:
    from shardsmith import records

    return {r["image/filename"].decode() for r in records(out, split)}


def row_list_lines(out: Path, build_id: str) -> list[list]:
    return [json.loads(line) for path in sorted((out / BUILDS_DIR / build_id / "rows").glob("*.jsonl"))
            for line in path.read_text().splitlines()]


def _night1(shardsmith, nights: Nights, out: Path, *extra: str) -> str:
    done = build(shardsmith, nights.manifest("night1", Nights.NIGHT1), out, *extra)
    assert done.code == 0, done.err
    return metadata(out)["build_id"]


def test_a_night_reports_new_copies_of_published_images_and_never_a_published_pair_again(nights, shardsmith,
                                                                                          tmp_path):
    out = tmp_path / "out"
    v1 = _night1(shardsmith, nights, out, "--near_duplicates", "report")  # a plain build starts the schedule
    assert set(listed_pairs(out)) == {frozenset({"img/floor_cat.jpg", "img/floor_cat_small.jpg"})}
    assert {len(line) for line in row_list_lines(out, v1)} == {7}  # each record's signature is listed
    night2 = build(shardsmith, nights.manifest("night2", Nights.NIGHT1 + Nights.NIGHT2), out, "--incremental",
                   "--near_duplicates", "report")
    assert night2.code == 0, night2.err
    pairs = listed_pairs(out)
    assert set(pairs) == {frozenset({"img/cat.jpg", "img/cat_cropped.jpg"}),
                          frozenset({"img/goats.jpg", "img/goats_larger.jpg"}),
                          frozenset({"img/other_cat.jpg", "img/other_cat_q50.jpg"})}  # not the carried pair
    cropped = pairs[frozenset({"img/cat.jpg", "img/cat_cropped.jpg"})]
    assert (cropped["first"]["uri"], cropped["first"]["split"], cropped["second"]["split"]) == (
        "img/cat.jpg", "train", "test")
    assert cropped["first"]["published"] == {"build": v1, "generation": 1} and "published" not in cropped["second"]
    larger = pairs[frozenset({"img/goats.jpg", "img/goats_larger.jpg"})]
    assert (larger["first"]["uri"], larger["splits"]) == ("img/goats_larger.jpg", "train-test")
    assert larger["second"]["published"] == {"build": v1, "generation": 1} and "published" not in larger["first"]
    new_pair = pairs[frozenset({"img/other_cat.jpg", "img/other_cat_q50.jpg"})]
    assert "published" not in new_pair["first"] and "published" not in new_pair["second"]
    near = metadata(out)["near_duplicates"]
    assert (near["published_version"], near["num_published_compared"], near["num_published_not_compared"],
            near["num_published_pairs"], near["num_pairs"], near["num_dropped"]) == (v1, 6, 0, 2, 3, 0)
    assert near["split_pairs"]["train-test"] == 3
    assert f"new images compared with 6 records of version {v1}, 2 pairs with them" in night2.out
    assert {"img/cat_cropped.jpg", "img/goats.jpg"} <= version_uris(out, "test")  # report drops nothing
    assert {len(line) for line in row_list_lines(out, metadata(out)["build_id"])} == {7}  # night 3 can compare
    inspected = shardsmith("inspect", out, "--near_duplicates", tmp_path / "pairs.png")
    assert inspected.code == 0 and "closest pairs" in inspected.out, inspected.err
    with Image.open(tmp_path / "pairs.png") as drawn:
        assert drawn.height >= 2.8 * 100 * 3  # the three pairs, the published sides read from earlier shards


def test_drop_takes_the_new_copy_out_of_the_night_and_keeps_the_published_record(nights, shardsmith, tmp_path):
    out = tmp_path / "out"
    v1 = _night1(shardsmith, nights, out, "--near_duplicates", "drop")
    assert {len(line) for line in row_list_lines(out, v1)} == {7}  # drop's writer signs what it writes too
    night2 = build(shardsmith, nights.manifest("night2", Nights.NIGHT1 + Nights.NIGHT2), out, "--incremental",
                   "--near_duplicates", "drop")
    assert night2.code == 0, night2.err
    dropped = {uri: e["detail"] for uri, e in errors(out).items() if e["stage"] == "duplicate"}
    assert set(dropped) == {"img/cat_cropped.jpg", "img/goats_larger.jpg", "img/other_cat_q50.jpg",
                            "img/floor_cat_small.jpg"}  # night 1 dropped it too; read again, a copy again
    assert dropped["img/floor_cat_small.jpg"].startswith(
        f"near duplicate of img/floor_cat.jpg in train, published in build {v1} (distance ")
    assert dropped["img/cat_cropped.jpg"].startswith(
        f"near duplicate of img/cat.jpg in train, published in build {v1} (distance ")
    # A new training copy of a published test image: the new one goes, whatever its split.
    assert dropped["img/goats_larger.jpg"].startswith(
        f"near duplicate of img/goats.jpg in test, published in build {v1} (distance ")
    assert dropped["img/other_cat_q50.jpg"].startswith("near duplicate of img/other_cat.jpg in train (distance ")
    assert version_uris(out, "train") == {"img/cat.jpg", "img/goat.jpg", "img/floor_cat.jpg", "img/small_goat.jpg",
                                          "img/other_cat.jpg"}
    assert version_uris(out, "test") == {"img/goats.jpg"}  # the published record stays
    meta = metadata(out)
    assert meta["near_duplicates"]["num_dropped"] == 4 and meta["incremental"]["num_carried_rows"] == 5
    assert "4 new copies dropped" in night2.out


def test_records_without_a_signature_are_counted_and_left_out(nights, shardsmith, tmp_path):
    """Row lists from a build without --near_duplicates, and a lost row list rebuilt from its shard's records,
    hold no signature: their records are not compared, and the summary says how many."""
    unsigned, rebuilt = tmp_path / "unsigned", tmp_path / "rebuilt"
    _night1(shardsmith, nights, unsigned)
    assert {len(line) for line in row_list_lines(unsigned, metadata(unsigned)["build_id"])} == {6}
    v1 = _night1(shardsmith, nights, rebuilt, "--near_duplicates", "report")
    test_list = next((rebuilt / BUILDS_DIR / v1 / "rows").glob("pets-test.*.jsonl"))
    num_lost = len(test_list.read_text().splitlines())
    test_list.unlink()
    manifest = nights.manifest("night2", Nights.NIGHT1 + Nights.NIGHT2)
    for out, not_compared in ((unsigned, 6), (rebuilt, num_lost)):
        night2 = build(shardsmith, manifest, out, "--incremental", "--near_duplicates", "report")
        assert night2.code == 0, night2.err
        near = metadata(out)["near_duplicates"]
        assert (near["num_published_compared"], near["num_published_not_compared"]) == (6 - not_compared,
                                                                                        not_compared)
        assert f"{not_compared} of its records not compared" in night2.out
        pairs = set(listed_pairs(out))
        assert frozenset({"img/other_cat.jpg", "img/other_cat_q50.jpg"}) in pairs  # the night's own still are
        assert (frozenset({"img/cat.jpg", "img/cat_cropped.jpg"}) in pairs) == (out == rebuilt)
        assert frozenset({"img/goats.jpg", "img/goats_larger.jpg"}) not in pairs  # in the lost list's shard
    # The rebuilt list went with its shard into night 2's folder, its lines without a signature.
    relisted = rebuilt / BUILDS_DIR / metadata(rebuilt)["build_id"] / "rows" / test_list.name
    assert {len(json.loads(line)) for line in relisted.read_text().splitlines()} == {6}


def test_a_signature_that_is_not_one_fails_the_night_naming_the_line(nights, shardsmith, tmp_path):
    out = tmp_path / "out"
    v1 = _night1(shardsmith, nights, out, "--near_duplicates", "report")
    path = next((out / BUILDS_DIR / v1 / "rows").glob("pets-train.*.jsonl"))
    lines = path.read_text().splitlines()
    broken = json.loads(lines[1])
    broken[6] = "not a signature"
    path.write_text("\n".join([lines[0], json.dumps(broken), *lines[2:]]) + "\n")
    night2 = build(shardsmith, nights.manifest("night2", Nights.NIGHT1 + Nights.NIGHT2), out, "--incremental",
                   "--near_duplicates", "report")
    assert night2.code == 1 and f"{path.name} line 2 holds not a perceptual signature" in night2.err
    assert "nothing was published" in night2.err and "Traceback" not in night2.err
    assert metadata(out)["build_id"] == v1


def test_rewritten_and_compacted_shards_keep_their_records_signatures(nights, shardsmith, tmp_path):
    out = tmp_path / "out"
    _night1(shardsmith, nights, out, "--near_duplicates", "report")
    night2_rows = Nights.NIGHT1[1:] + Nights.NIGHT2  # img/cat.jpg removed: its shard is rewritten
    night2 = build(shardsmith, nights.manifest("night2", night2_rows), out, "--incremental", "--near_duplicates",
                   "report", "--max_removed_fraction", "0.5")
    assert night2.code == 0, night2.err
    assert metadata(out)["incremental"]["num_rewritten_shards"] == 1
    assert {len(line) for line in row_list_lines(out, metadata(out)["build_id"])} == {7}
    pairs_before, entry_before = listed_pairs(out), metadata(out)["near_duplicates"]
    compacted = shardsmith("compact", out)
    assert compacted.code == 0 and "compacted version" in compacted.out, compacted.err
    lines = row_list_lines(out, metadata(out)["build_id"])
    assert len(lines) == len(night2_rows) and {len(line) for line in lines} == {7}
    # Compaction finds no pair and drops none: the version keeps its near-duplicate entry and list.
    assert metadata(out)["near_duplicates"] == entry_before and listed_pairs(out) == pairs_before
    assert shardsmith("verify", out).code == 0


def test_blank_images_a_night_adds_pair_with_the_published_groups_representative(tmp_path, shardsmith):
    """20 identical-looking published images are one group, compared through its representative; three new ones
    pair with it (not 60 pairs), and the published group is not summarised again. (One new image is in train:
    a night whose new rows are all dropped adds no record, and publishes nothing.)"""
    rows = []
    for i in range(23):
        Image.new("L", (16, 16), 0).save(tmp_path / f"black_{i}.png", pnginfo=_text_chunk(i))
        rows.append(("train" if i < 20 or i == 22 else "test", f"black_{i}.png", "a"))
    out = tmp_path / "out"
    manifest = tmp_path / "m.csv"
    manifest.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{label}\n" for s, u, label in rows[:20]))
    assert build(shardsmith, manifest, out, "--near_duplicates", "report").code == 0
    assert metadata(out)["near_duplicates"]["num_identical_groups"] == 1
    manifest.write_text("split,image_uri,label\n" + "".join(f"{s},{u},{label}\n" for s, u, label in rows))
    night2 = build(shardsmith, manifest, out, "--incremental", "--near_duplicates", "drop")
    assert night2.code == 0, night2.err
    near = metadata(out)["near_duplicates"]
    assert (near["num_pairs"], near["num_published_pairs"], near["num_identical_groups"], near["num_dropped"]) == (
        6, 3, 0, 2)  # and the three new ones with each other
    published = [p["first"] for p in listed_pairs(out).values() if "published" in p["first"]]
    assert [side["identical_images"] for side in published] == [20, 20, 20]
    assert set(errors(out)) == {"black_20.png", "black_21.png"}


def _text_chunk(i: int):
    from PIL import PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text("n", str(i))  # distinct bytes: not exact duplicates, one picture
    return info


def _nights_benchmark():
    spec = importlib.util.spec_from_file_location("near_duplicate_nights",
                                                  ROOT / "tests" / "benchmarks" / "near_duplicate_nights.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_two_nights_find_the_pairs_one_full_build_finds(tmp_path, capsys):
    """The benchmark's corpus at a small size: planted copies within night 1, across the nights and within night
    2; the two nights' recall and false pairs are at least as good as one full build's of the same rows."""
    bench = _nights_benchmark()
    corpus = bench.planted_corpus(tmp_path / "corpus", side=160, copies=0.5, seed=1)
    assert {kind for kind, _ in corpus.planted.values()} == set(bench.KINDS)
    nights = bench.two_nights(corpus, tmp_path / "nights")
    full = bench.one_full_build(corpus, tmp_path / "full")
    capsys.readouterr()
    by_nights, by_full = bench.scores(corpus, nights.pairs), bench.scores(corpus, full.pairs)
    found, planted = by_nights.recall["all"]
    assert found >= by_full.recall["all"][0] and found >= 0.9 * planted
    assert by_nights.recall["across"][0] == by_full.recall["across"][0] > 0
    assert by_nights.false_pairs <= by_full.false_pairs
    assert nights.pairs == full.pairs
    assert nights.published_pairs >= by_nights.recall["across"][0] and nights.both_published == 0


def test_row_lists_of_five_six_and_seven_fields_read_back():
    signature = signature_text(signature_of_bytes(CAT.read_bytes()))
    rows = [ListedRow("ab" * 16, 1, "cat", 12, "a.jpg"), ListedRow("cd" * 16, 1, "cat", 12, "b.jpg", "f" * 64),
            ListedRow("ef" * 16, 1, "cat", 12, "c.jpg", "f" * 64, signature),
            ListedRow("01" * 16, 1, "cat", 12, "d.jpg", "", signature)]
    data = row_list_bytes(rows)
    assert [len(json.loads(line)) for line in data.decode().splitlines()] == [5, 6, 7, 7]
    assert parse_row_list(data, "r.jsonl") == rows
    for bad in (b'["x", 1, "cat", 1, "u", "", "s", "more"]\n', b'["x", 1, "cat", 1, "u", "", 7]\n'):
        with pytest.raises(RowListError, match="r.jsonl line 1 is not"):
            parse_row_list(bad, "r.jsonl")


def test_a_signature_as_text_reads_back_exactly_and_anything_else_is_refused():
    signature = signature_of_bytes(GOATS.read_bytes())
    assert signature_from_text(signature_text(signature)) == signature
    assert len(signature_text(signature)) == 108
    assert signature_from_text(signature_text(ImageSignature(0, bytes(63), bytes(8), 0))).phash == 0
    for text in ("", "not base64!", signature_text(signature)[:-8], "é" * 108,
                 signature_text(ImageSignature(1, bytes(63), bytes(8), 17))):
        with pytest.raises(ValueError, match="not a perceptual signature"):
            signature_from_text(text)


SIGNATURE = ImageSignature(0, bytes(range(1, 64)), bytes(8), 16)


def _hashed(phash: int, split: str, line: int, build: str = "") -> HashedImage:
    return HashedImage(ImageSignature(phash, SIGNATURE.structure, SIGNATURE.colour, 16), split, "a",
                       f"img/{line}.jpg", 0, line, build=build, generation=1 if build else 0)


def test_drop_never_chooses_a_published_record():
    published_train, new_test = _hashed(1, "train", 1, "v1"), _hashed(1, "test", 2)
    assert leaked_copy(pair_of(published_train, new_test, 0)) is new_test
    new_train, published_test = _hashed(1, "train", 3), _hashed(1, "test", 4, "v1")
    assert leaked_copy(pair_of(new_train, published_test, 0)) is new_train
    assert leaked_copy(pair_of(new_train, new_test, 0)) is new_test  # two new images: as a full build
    assert leaked_copy(pair_of(published_train, _hashed(1, "train", 5), 0)) is None  # within a split


def _night_pairs(members: list[HashedImage], max_distance: int = 4) -> tuple[list, list]:
    from transforms.near_duplicates import CAPPED, _night_bucket_pairs

    pairs, capped = [], []
    for out in _night_bucket_pairs(((0, 0), members), max_distance):
        (capped if getattr(out, "tag", None) == CAPPED else pairs).append(getattr(out, "value", out))
    return [(p.first.line, p.second.line) for _, p in pairs], capped


def test_a_nights_bucket_pairs_new_images_only_and_streams_its_published_records(monkeypatch):
    import shardsmith.versions.published_pairs as published_pairs

    members = [_hashed(0b1, "train", 1, "v1"), _hashed(0b11, "test", 2, "v1"),  # a published pair: not again
               _hashed(0b111, "test", 3), _hashed(0b1111, "train", 4), _hashed(0xFFFF_0000, "test", 5, "v1")]
    expected = [(1, 3), (1, 4), (2, 3), (4, 2), (4, 3)]
    pairs, capped = _night_pairs(members)
    assert sorted(pairs) == sorted(expected) and capped == []
    monkeypatch.setattr(published_pairs, "PUBLISHED_AT_ONCE", 1)  # one published record at a time: the same
    assert sorted(_night_pairs(list(reversed(members)))[0]) == sorted(expected)
    assert _night_pairs([m for m in members if m.published]) == ([], [])  # nothing new: nothing to look for


def test_a_nights_bucket_over_its_comparisons_or_candidates_is_capped_not_expanded(monkeypatch):
    import transforms.near_duplicates

    members = [_hashed(0b1, "train", i, "v1") for i in range(1, 31)] + [_hashed(0b11, "test", 40)]
    monkeypatch.setattr(transforms.near_duplicates, "MAX_BUCKET_COMPARISONS", 29)
    pairs, capped = _night_pairs(members)
    assert pairs == [] and [(c.size, c.published, c.examples) for c in capped] == [(31, 30, ("img/40.jpg",))]
    monkeypatch.setattr(transforms.near_duplicates, "MAX_BUCKET_COMPARISONS", 30)
    assert len(_night_pairs(members)[0]) == 30
    monkeypatch.setattr(transforms.near_duplicates, "MAX_BUCKET_CANDIDATES", 29)
    pairs, capped = _night_pairs(members)
    assert pairs == [] and capped[0].candidates == 30 and capped[0].to_dict()["published"] == 30
    assert MAX_BUCKET_CANDIDATES > 30


def test_a_groups_followers_inherit_its_representatives_drop_on_its_side_of_the_pair():
    """A new training image dropped as a copy of a published test record passes the drop to the new training
    images of its signature; a validation image dropped as a copy of a training one, to its validation and test
    followers (as a full build does)."""
    from transforms.identical_groups import _inherited_decisions

    decision = (2, (0, 1, "img/1.jpg"), "img/1.jpg", "test", "v1")
    train_followers = [((0, 5, "a"), "train", "train", "img/r.jpg"), ((0, 6, "b"), "test", "train", "img/r.jpg")]
    inherited = list(_inherited_decisions(("r", {"decisions": [decision], "followers": train_followers})))
    assert inherited == [((0, 5, "a"), decision)]
    validation_followers = [((0, 7, "c"), "test", "validation", "img/v.jpg")]
    inherited = list(_inherited_decisions(("v", {"decisions": [decision], "followers": validation_followers})))
    assert inherited == [((0, 7, "c"), decision)]
