"""Do two --incremental nights find the near copies one full build finds? Makes a corpus of distinct images with
planted near copies, builds it as two nights (a first build, then an --incremental night adding the rest, both
with `--near_duplicates report`) and as one full build of the same rows, and prints, for each, the recall of the
planted copies and the pairs found that were not planted (false pairs); then the signature's CPU per image.

    python tests/benchmarks/near_duplicate_nights.py [--side 128] [--copies 0.4] [--seed 0] [--workdir DIR]

Corpus (`planted_corpus`): tiles of `--side` pixels cut on a grid from the tensorflow-recorder photos in
tests/data/tfrecorder (no two share a pixel; flat ones, grey standard deviation under 12, left out), saved as
JPEG q90, labelled by the photo's animal, 70% train and 30% test. A `--copies` share of them gets a copy under one
of PLANTED's transforms (in turn), in the other side of the split (a test copy of a training tile, a training copy
of a test tile): the leak --near_duplicates is for. Night 1 holds half of the tiles, with the copies of half of
those (`carried`: pairs night 1 reports); night 2 adds the other tiles, the other copies of night 1's tiles
(`across`: a new copy of a published record) and the copies of its own tiles (`new`).

A pair is found by the two nights when night 1's near_duplicates.jsonl or night 2's lists it; night 2 lists
only pairs with a new image (`published` marks the other side), so the carried pairs count from night 1.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PHOTOS = ROOT / "tests" / "data" / "tfrecorder" / "images"
MIN_TILE_STD = 12.0
TRAIN_SHARE = 0.7
TIMING_RUNS = 5


def _jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=quality)
    return out.getvalue()


def _crop(image: Image.Image, fraction: float) -> Image.Image:
    width, height = image.size
    dx, dy = round(width * fraction / 2), round(height * fraction / 2)
    return image.crop((dx, dy, width - dx, height - dy))


PLANTED = {
    "resize 0.5x": lambda im: _jpeg(im.resize((im.width // 2, im.height // 2), Image.LANCZOS)),
    "resize 1.5x": lambda im: _jpeg(im.resize((im.width * 3 // 2, im.height * 3 // 2), Image.LANCZOS)),
    "jpeg q40": lambda im: _jpeg(im, 40),
    "crop 5%": lambda im: _jpeg(_crop(im, 0.05)),
    "brightness +15%": lambda im: _jpeg(ImageEnhance.Brightness(im).enhance(1.15)),
}
KINDS = ("carried", "across", "new")  # a pair of two night-1 images, a night-2 copy of a night-1 image, two night-2


@dataclass
class Corpus:
    night1: Path  # manifest of night 1's rows
    night2: Path  # night 1's rows and night 2's
    planted: dict[frozenset, tuple[str, str]] = field(default_factory=dict)  # {uri, uri} -> (kind, transform)
    num_images: int = 0


def _tiles(side: int) -> list[tuple[str, str, Image.Image]]:
    """(photo stem, label, tile) for each tile of `side` pixels on a grid of each photo, flat tiles left out."""
    tiles = []
    for path in sorted(PHOTOS.rglob("*.jpg")):
        with Image.open(path) as opened:
            photo = opened.convert("RGB")
        for top in range(0, photo.height - side + 1, side):
            for left in range(0, photo.width - side + 1, side):
                tile = photo.crop((left, top, left + side, top + side))
                if np.asarray(tile.convert("L"), dtype=np.float32).std() >= MIN_TILE_STD:
                    tiles.append((f"{path.stem}-{left}-{top}", path.parent.name, tile))
    return tiles


def planted_corpus(root: Path, side: int = 128, copies: float = 0.4, seed: int = 0) -> Corpus:
    """Writes the corpus (the module says what it holds) under `root`; returns its manifests and planted pairs."""
    rng = random.Random(seed)
    tiles = _tiles(side)
    rng.shuffle(tiles)
    half = len(tiles) // 2
    transforms = list(PLANTED.items())
    rows1, rows2, corpus = [], [], Corpus(root / "night1.csv", root / "night2.csv")
    copied = 0
    for index, (stem, label, tile) in enumerate(tiles):
        split = "train" if rng.random() < TRAIN_SHARE else "test"
        uri = f"img/{stem}.jpg"
        (root / uri).parent.mkdir(parents=True, exist_ok=True)
        (root / uri).write_bytes(_jpeg(tile))
        first_night = index < half
        (rows1 if first_night else rows2).append((split, uri, label))
        if rng.random() >= copies:
            continue
        name, make = transforms[copied % len(transforms)]
        copied += 1
        copy_uri = f"img/{stem}-copy.jpg"
        (root / copy_uri).write_bytes(make(tile))
        kind = "new" if not first_night else KINDS[copied % 2]  # night 1's tiles: carried and across in turn
        (rows1 if kind == "carried" else rows2).append(("test" if split == "train" else "train", copy_uri, label))
        corpus.planted[frozenset((uri, copy_uri))] = (kind, name)
    _write_manifest(corpus.night1, rows1)
    _write_manifest(corpus.night2, rows1 + rows2)
    corpus.num_images = len(rows1) + len(rows2)
    return corpus


def _write_manifest(path: Path, rows: list[tuple[str, str, str]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows(rows)


def build(manifest: Path, out: Path, *extra: str) -> float:
    """One build in this process (as the test suite runs them); its wall time."""
    from pipeline import cli

    start = time.perf_counter()
    code = cli.main([str(a) for a in ("build", "--manifest", manifest, "--output_dir", out, "--name", "bench",
                                      "--near_duplicates", "report", *extra)])
    if code != 0:
        raise SystemExit(f"the build of {manifest} into {out} exited {code}")
    return time.perf_counter() - start


def listed_pairs(out: Path) -> list[dict]:
    """The pairs of the published build's near_duplicates.jsonl."""
    from shardsmith.format.metadata import parse_near_duplicates
    from shardsmith.output_folder.layout import published_dir

    return parse_near_duplicates((Path(published_dir(out)) / "near_duplicates.jsonl").read_bytes())


def uri_pairs(pairs: list[dict]) -> set[frozenset]:
    return {frozenset((p["first"]["uri"], p["second"]["uri"])) for p in pairs}


@dataclass(frozen=True)
class Found:
    pairs: set[frozenset]
    wall_s: float
    published_pairs: int = 0  # of night 2's pairs, those with a published side
    both_published: int = 0  # of night 2's pairs, those with two published sides (never: not compared again)


def two_nights(corpus: Corpus, out: Path) -> Found:
    first = build(corpus.night1, out)
    night1 = listed_pairs(out)
    second = build(corpus.night2, out, "--incremental")
    night2 = listed_pairs(out)
    sides = [("published" in p["first"]) + ("published" in p["second"]) for p in night2]
    return Found(uri_pairs(night1) | uri_pairs(night2), first + second, sum(s >= 1 for s in sides),
                 sum(s == 2 for s in sides))


def one_full_build(corpus: Corpus, out: Path) -> Found:
    wall = build(corpus.night2, out)
    return Found(uri_pairs(listed_pairs(out)), wall)


@dataclass(frozen=True)
class Scores:
    recall: dict[str, tuple[int, int]]  # kind or transform -> (found, planted)
    false_pairs: int


def scores(corpus: Corpus, found: set[frozenset]) -> Scores:
    planted, hit = Counter(), Counter()
    for pair, (kind, transform) in corpus.planted.items():
        for key in ("all", kind, transform):
            planted[key] += 1
            hit[key] += pair in found
    return Scores({key: (hit[key], planted[key]) for key in planted}, len(found - corpus.planted.keys()))


def signature_cpu_ms() -> tuple[float, float, float]:
    """ms of CPU per image over the photos as JPEG q90, best of TIMING_RUNS: the signature in header mode (its own
    reduced decode), in decode mode (from the pixels validation decoded), and what a header-mode writer does to
    each image anyway (header parse and SHA-256), for scale."""
    from shardsmith.images.load_images import inspect_image
    from shardsmith.near_duplicates.perceptual_hash import MIN_REDUCED_SIDE, signature_of_bytes, signature_of_image

    encoded = []
    for path in sorted(PHOTOS.rglob("*.jpg")):
        with Image.open(path) as photo:
            encoded.append(_jpeg(photo))
    decoded = []
    for data in encoded:
        inspect_image(data, "decode", min_decoded_side=MIN_REDUCED_SIDE, on_pixels=lambda im: decoded.append(im.copy()))

    def best(work) -> float:
        runs = []
        for _ in range(TIMING_RUNS):
            start = time.process_time()
            work()
            runs.append(time.process_time() - start)
        return min(runs) / len(encoded) * 1e3

    signature_of_bytes(encoded[0])  # imports
    header = best(lambda: [signature_of_bytes(data) for data in encoded])
    decode = best(lambda: [signature_of_image(image) for image in decoded])
    plain = best(lambda: [(inspect_image(data, "header"), hashlib.sha256(data).hexdigest()) for data in encoded])
    return header, decode, plain


def _cell(found: int, planted: int) -> str:
    return f"{found}/{planted} = {found / planted:.3f}" if planted else "-"


def report(corpus: Corpus, nights: Found, full: Found) -> list[str]:
    by_nights, by_full = scores(corpus, nights.pairs), scores(corpus, full.pairs)
    lines = [f"{corpus.num_images} images, {len(corpus.planted)} planted copies "
             f"({', '.join(f'{k} {by_full.recall.get(k, (0, 0))[1]}' for k in KINDS)})", "",
             "| recall | two nights | one full build |", "|---|---|---|"]
    for key in ("all", *KINDS, *PLANTED):
        if key in by_full.recall:
            lines.append(f"| {key} | {_cell(*by_nights.recall[key])} | {_cell(*by_full.recall[key])} |")
    lines += ["", "| | two nights | one full build |", "|---|---|---|",
              f"| false pairs (found, not planted) | {by_nights.false_pairs} | {by_full.false_pairs} |",
              f"| pairs found | {len(nights.pairs)} | {len(full.pairs)} |",
              f"| wall s (both nights; the full build) | {nights.wall_s:.1f} | {full.wall_s:.1f} |", "",
              f"the two nights found {'the same pairs as' if nights.pairs == full.pairs else 'other pairs than'} "
              f"the full build; night 2 listed {nights.published_pairs} pairs with a published record, "
              f"{nights.both_published} between two published records"]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", type=int, default=128, help="tile side in pixels (smaller: more images)")
    parser.add_argument("--copies", type=float, default=0.4, help="share of tiles given a planted copy")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="shardsmith-nights-"))
    corpus = planted_corpus(workdir / "corpus", args.side, args.copies, args.seed)
    nights = two_nights(corpus, workdir / "nights")
    full = one_full_build(corpus, workdir / "full")
    print("\n".join(report(corpus, nights, full)))
    header, decode, plain = signature_cpu_ms()
    print(f"\nsignature CPU per image (the 6 photos, JPEG q90, best of {TIMING_RUNS}): header mode {header:.2f} ms "
          f"(its own reduced decode), decode mode {decode:.2f} ms (from the validated pixels); a header-mode "
          f"writer's header parse and SHA-256 of the same image {plain:.3f} ms")
    print(json.dumps({"side": args.side, "copies": args.copies, "seed": args.seed}))


if __name__ == "__main__":
    main()
