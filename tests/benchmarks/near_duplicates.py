"""How well --near_duplicates finds copies, and what it costs: recall per transform, false pairs among distinct
images per threshold, and the extra CPU per image of the signature in --validate header and decode mode.

    pip install -e '.[bench]'   # scikit-image, for its bundled photos (no download)
    python tests/benchmarks/near_duplicates.py [--gcompris gcompris-qt-data_*.deb] [--seed 1] [--cpu_only]

Photos: the photos scikit-image ships (skimage.data's files; line drawings, binary and tiny ones left out, and
motorcycle_right, the other eye of the motorcycle_left stereo pair), matplotlib's grace_hopper.jpg and the
tensorflow-recorder photos in tests/data/tfrecorder; with --gcompris, the 244 photographs of Debian's
gcompris-qt-data (tests/benchmarks/photo_sets.py says how to get the .deb and which photos are read).

Distinct images, two sets:
- whole photos: every pair of different photos;
- tiles cut from the photos, to have many more images: for each tile side of 256, 192, 160, 128, 112, 96, 80 and
  64 pixels, a grid of non-overlapping tiles and a second grid shifted by half a tile; tiles whose grey standard
  deviation is below MIN_TILE_STD (flat sky, black background) are left out, and --max_distinct of the rest are
  drawn at random (--seed). Distinct pairs are tiles that share no pixel of a photo: overlapping tiles (a 128-pixel
  tile and the 112-pixel tile at the same corner are a 12% crop of each other) are not distinct pictures, and are
  not counted either way. Tiles are a harder set than photos: a 64-pixel patch of sky or wall with an edge in
  one corner looks like many others. False pairs are also given apart for pairs of two tiles with detail (both
  with at least LOW_DETAIL_BLOCKS textured blocks: what the build does not flag `low_detail`), and for tiles of
  different photos.
Each image is saved as a JPEG (quality 90). Copies of --copies_of tiles (those of 128 pixels or more) and of every
whole photo are made under each transform and compared with their original, through the same test the build
applies (pHash distance, then the confirmation).

The signature is shardsmith's own (shardsmith.near_duplicates.perceptual_hash), computed from the encoded bytes as the
writer does. CPU figures are time.process_time per image, on this machine's shared cores: compare within a run.
"""

from __future__ import annotations

import argparse
import io
import random
import time
from pathlib import Path

import matplotlib
import numpy as np
from PIL import Image, ImageEnhance, ImageOps

import shardsmith.near_duplicates.near_duplicate_search as near_duplicates_core
from shardsmith.images.load_images import inspect_image
from shardsmith.near_duplicates.near_duplicate_search import LOW_DETAIL_BLOCKS, confirmed
from shardsmith.near_duplicates.perceptual_hash import MIN_REDUCED_SIDE, signature_of_bytes, signature_of_image
from shardsmith.settings import DEFAULT_MAX_DISTANCE

ROOT = Path(__file__).resolve().parents[2]
TILE_SIDES = (256, 192, 160, 128, 112, 96, 80, 64)
MIN_TILE_STD = 12.0
THRESHOLDS = (4, 6, 8, 10, 12)
SKIPPED = {"horse.png", "logo.png", "phantom.png", "chessboard_GRAY.png", "chessboard_RGB.png", "binary_blobs",
           "no_time_for_that_tiny.gif", "color.png", "clock_motion.png",
           "motorcycle_right.png"}  # the same scene as motorcycle_left.png, seen from a few centimetres away
DRAWN_SIDE = 128
SET_SIZE = 10_000  # false pairs are also given as the number expected among this many such images


def source_photos(gcompris: Path | None) -> list[tuple[str, Image.Image]]:
    import skimage.data

    folder = Path(skimage.data.__file__).parent
    paths = sorted(p for p in folder.iterdir() if p.suffix in (".png", ".jpg") and p.name not in SKIPPED)
    paths.append(Path(matplotlib.get_data_path()) / "sample_data" / "grace_hopper.jpg")
    paths += sorted((ROOT / "tests/data/tfrecorder/images").rglob("*.jpg"))
    photos = []
    for path in paths:
        with Image.open(path) as image:
            photos.append((path.name, image.convert("RGB")))
    if gcompris is not None:
        from photo_sets import gcompris_photos

        photos += gcompris_photos(gcompris)
    return photos


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=quality)
    return out.getvalue()


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def distinct_tiles(photos, max_distinct: int, seed: int) -> tuple[list[Image.Image], list[tuple[int, int, int, int]]]:
    """The tiles, and where each was cut: (photo index, left, top, side)."""
    tiles = []
    for index, (_, photo) in enumerate(photos):
        width, height = photo.size
        for side in TILE_SIDES:
            for offset in (0, side // 2):
                for top in range(offset, height - side + 1, side):
                    for left in range(offset, width - side + 1, side):
                        tile = photo.crop((left, top, left + side, top + side))
                        if np.asarray(tile.convert("L"), dtype=np.float32).std() >= MIN_TILE_STD:
                            tiles.append((tile, (index, left, top, side)))
    random.Random(seed).shuffle(tiles)
    tiles = tiles[:max_distinct]
    return [tile for tile, _ in tiles], [place for _, place in tiles]


def _overlap(a: tuple[int, int, int, int], b: tuple[int, int, int, int]) -> bool:
    (photo_a, left_a, top_a, side_a), (photo_b, left_b, top_b, side_b) = a, b
    return (photo_a == photo_b and min(left_a + side_a, left_b + side_b) > max(left_a, left_b)
            and min(top_a + side_a, top_b + side_b) > max(top_a, top_b))


def _crop(image: Image.Image, fraction: float) -> Image.Image:
    width, height = image.size
    dx, dy = round(width * fraction / 2), round(height * fraction / 2)
    return image.crop((dx, dy, width - dx, height - dy))


def _border(image: Image.Image) -> Image.Image:
    return ImageOps.expand(image, border=max(2, image.width // 25), fill=(255, 255, 255))


TRANSFORMS = {
    "resize 0.5x": lambda im: jpeg(im.resize((im.width // 2, im.height // 2), Image.LANCZOS)),
    "resize 2x": lambda im: jpeg(im.resize((im.width * 2, im.height * 2), Image.LANCZOS)),
    "jpeg q30": lambda im: jpeg(im, 30),
    "jpeg q50": lambda im: jpeg(im, 50),
    "jpeg q75": lambda im: jpeg(im, 75),
    "jpeg q95": lambda im: jpeg(im, 95),
    "png -> jpeg": lambda im: jpeg(im, 85),  # original stored as PNG (see measure_recall)
    "crop 5%": lambda im: jpeg(_crop(im, 0.05)),
    "crop 10%": lambda im: jpeg(_crop(im, 0.10)),
    "brightness +20%": lambda im: jpeg(ImageEnhance.Brightness(im).enhance(1.2)),
    "brightness -20%": lambda im: jpeg(ImageEnhance.Brightness(im).enhance(0.8)),
    "contrast x0.7": lambda im: jpeg(ImageEnhance.Contrast(im).enhance(0.7)),
    "contrast x1.3": lambda im: jpeg(ImageEnhance.Contrast(im).enhance(1.3)),
    "border 4%": lambda im: jpeg(_border(im)),
    "rotate 5 deg": lambda im: jpeg(im.rotate(5, resample=Image.BICUBIC)),
    "rotate 90 deg": lambda im: jpeg(im.transpose(Image.ROTATE_90)),
    "flip left-right": lambda im: jpeg(im.transpose(Image.FLIP_LEFT_RIGHT)),
}


NOT_CONFIRMED = 99  # the distance recorded for a copy the confirmation rejects: found at no threshold


def measure_recall(originals: list[Image.Image]) -> dict[str, list[tuple[int, int]]]:
    """Per transform, (pHash distance, distance or NOT_CONFIRMED after the confirmation) of each copy."""
    distances: dict[str, list[tuple[int, int]]] = {name: [] for name in TRANSFORMS}
    for image in originals:
        base = signature_of_bytes(jpeg(image))
        base_png = signature_of_bytes(png(image))
        for name, make in TRANSFORMS.items():
            reference = base_png if name == "png -> jpeg" else base
            copy = signature_of_bytes(make(image))
            distance = (reference.phash ^ copy.phash).bit_count()
            distances[name].append((distance, distance if confirmed(reference, copy)[0] else NOT_CONFIRMED))
    return distances


def false_pairs(signatures, places, thresholds) -> tuple[dict, int, int, int, list]:
    """Per threshold, counts of false pairs among distinct tiles: pHash alone, confirmed, confirmed between tiles
    with detail, confirmed between tiles of different photos; how many distinct pairs (all, with detail, across
    photos) were looked at; and the confirmed false pairs at the default distance: (distance, i, j, both with
    detail)."""
    hashes = np.array([s.phash for s in signatures], dtype=np.uint64)
    detailed = np.array([s.detail >= LOW_DETAIL_BLOCKS for s in signatures])
    photo = np.array([p[0] for p in places])
    counts = {d: dict.fromkeys(("phash", "confirmed", "detailed", "across"), 0) for d in thresholds}
    pairs = detailed_pairs = across_pairs = 0
    default_false = []
    for i in range(len(hashes) - 1):
        distances = np.bitwise_count(hashes[i + 1:] ^ hashes[i])
        overlapping = [j for j in np.flatnonzero(photo[i + 1:] == photo[i]) if _overlap(places[i], places[i + 1 + j])]
        keep = np.ones(len(distances), dtype=bool)
        keep[overlapping] = False
        pairs += int(keep.sum())
        if detailed[i]:
            detailed_pairs += int((keep & detailed[i + 1:]).sum())
        across_pairs += int((keep & (photo[i + 1:] != photo[i])).sum())
        for j in np.flatnonzero(keep & (distances <= max(thresholds))):
            other = i + 1 + int(j)
            ok = confirmed(signatures[i], signatures[other])[0]
            if ok and distances[j] <= DEFAULT_MAX_DISTANCE:
                default_false.append((int(distances[j]), i, other, bool(detailed[i] and detailed[other])))
            for d in thresholds:
                if distances[j] <= d:
                    counts[d]["phash"] += 1
                    counts[d]["confirmed"] += ok
                    counts[d]["detailed"] += ok and detailed[i] and detailed[other]
                    counts[d]["across"] += ok and photo[i] != photo[other]
    return counts, pairs, detailed_pairs, across_pairs, sorted(default_false)


TIMING_RUNS = 5  # CPU figures are the best of this many runs: this machine's cores are shared


def _process_ms(work, repeats: int, n: int) -> float:
    """Process time per image of `work` (which handles n images), the best of TIMING_RUNS runs of `repeats`."""
    best = float("inf")
    for _ in range(TIMING_RUNS):
        start = time.process_time()
        for _ in range(repeats):
            work()
        best = min(best, time.process_time() - start)
    return best / repeats / n * 1e3


def cpu_per_image(photos, repeats: int) -> tuple[float, float, float, float]:
    """In ms per image, on full-size photos as JPEG, through the writer's own calls
    (shardsmith/shard_writer/shard_file.py):
    header mode's extra (the signature decodes on its own), and decode mode's two extras: the signature of the
    pixels the validating decode made, and that decode made at MIN_REDUCED_SIDE pixels or more instead of 1/8
    scale (small photos); then the validating decode itself with the flag off."""
    encoded = [jpeg(photo) for _, photo in photos]
    decoded = []
    for data in encoded:
        inspect_image(data, "decode", min_decoded_side=MIN_REDUCED_SIDE, on_pixels=lambda im: decoded.append(im.copy()))
    signature_of_bytes(encoded[0])  # imports
    n = len(encoded)
    header = _process_ms(lambda: [signature_of_bytes(data) for data in encoded], repeats, n)
    signature = _process_ms(lambda: [signature_of_image(image) for image in decoded], repeats, n)
    flag_off = _process_ms(lambda: [inspect_image(data, "decode") for data in encoded], repeats, n)
    flag_on = _process_ms(lambda: [inspect_image(data, "decode", min_decoded_side=MIN_REDUCED_SIDE)
                                   for data in encoded], repeats, n)
    return header, signature, flag_on - flag_off, flag_off


def _print_cpu(photos, repeats: int) -> None:
    header, signature, larger_decode, decode = cpu_per_image(photos, repeats)
    print(f"\nextra CPU per image over {len(photos)} full-size photos (JPEG q90), best of {TIMING_RUNS} runs: "
          f"header mode {header:.2f} ms (own reduced decode + signature); decode mode {signature + larger_decode:.2f} "
          f"ms (signature of the decoded pixels {signature:.2f}, validating decode kept at {MIN_REDUCED_SIDE} px or "
          f"more {larger_decode:+.2f}); the validating decode alone costs {decode:.2f} ms")


def whole_photo_pairs(signatures, thresholds) -> tuple[dict[int, int], list[tuple[int, int, int]]]:
    """Per threshold, confirmed pairs among whole photos (every pair is of two different pictures), and the
    pairs themselves at the largest threshold: (distance, index, index)."""
    hashes = np.array([s.phash for s in signatures], dtype=np.uint64)
    found = []
    for i in range(len(hashes) - 1):
        distances = np.bitwise_count(hashes[i + 1:] ^ hashes[i])
        for j in np.flatnonzero(distances <= max(thresholds)):
            if confirmed(signatures[i], signatures[i + 1 + int(j)])[0]:
                found.append((int(distances[j]), i, i + 1 + int(j)))
    return {d: sum(distance <= d for distance, _, _ in found) for d in thresholds}, sorted(found)


def draw_pairs(tiles, found, path: Path) -> None:
    """The pairs side by side, one pair per row, each tile scaled to DRAWN_SIDE: to look at what was paired."""
    step = DRAWN_SIDE + 8
    sheet = Image.new("RGB", (2 * step, max(1, len(found)) * step), "white")
    for row, (_, i, j, _) in enumerate(found):
        for column, index in enumerate((i, j)):
            sheet.paste(tiles[index].resize((DRAWN_SIDE, DRAWN_SIDE)), (column * step, row * step))
    sheet.save(path)


def _print_false_pairs(photos, tiles, places, draw: Path | None) -> None:
    signatures = [signature_of_bytes(jpeg(tile)) for tile in tiles]
    counts, pairs, detailed_pairs, across_pairs, default_false = false_pairs(signatures, places, THRESHOLDS)
    num_detailed = sum(s.detail >= LOW_DETAIL_BLOCKS for s in signatures)
    print(f"\nfalse pairs among {len(tiles)} tiles: {pairs} distinct pairs (tiles sharing no pixel), "
          f"{detailed_pairs} of them between the {num_detailed} tiles with detail, {across_pairs} across photos")
    print(f"per 10k: false pairs x 10,000 / tiles; in a set of {SET_SIZE:,}: expected among "
          f"{SET_SIZE * (SET_SIZE - 1) // 2:,} pairs at the measured rate per pair")

    def rate(n: int, of_pairs: int, of_images: int) -> str:
        return f"{n} | {n * 10_000 / of_images:.2f} | {n / of_pairs * SET_SIZE * (SET_SIZE - 1) / 2:.1f}"

    print("| threshold | pHash alone: pairs / per 10k / in a set of 10k | confirmed | confirmed, both with detail "
          "| confirmed, across photos |\n|---|---|---|---|---|")
    for d in THRESHOLDS:
        c = counts[d]
        print(f"| {d}{' (default)' if d == DEFAULT_MAX_DISTANCE else ''} | {rate(c['phash'], pairs, len(tiles))} "
              f"| {rate(c['confirmed'], pairs, len(tiles))} | {rate(c['detailed'], detailed_pairs, num_detailed)} "
              f"| {rate(c['across'], across_pairs, len(tiles))} |")
    print(f"confirmed false pairs at distance <= {DEFAULT_MAX_DISTANCE}" + (f", drawn in {draw}" if draw else "")
          + ": (left, top, side) of each tile")
    for distance, i, j, both_detailed in default_false:
        a, b = places[i], places[j]
        print(f"  {distance:>2}  {'detail     ' if both_detailed else 'low detail '} {photos[a[0]][0]} at {a[1:]}, "
              f"{photos[b[0]][0]} at {b[1:]}")
    if draw:
        draw_pairs(tiles, default_false, draw)


def _print_whole_photo_pairs(photos) -> None:
    signatures = [signature_of_bytes(jpeg(photo)) for _, photo in photos]
    counts, found = whole_photo_pairs(signatures, THRESHOLDS)
    num_pairs = len(photos) * (len(photos) - 1) // 2
    print(f"\nfalse pairs among {len(photos)} whole photos ({num_pairs} pairs of different pictures), confirmed: "
          + ", ".join(f"d<={d}: {n}" for d, n in counts.items()))
    for distance, a, b in found:
        print(f"  at distance {distance}: {photos[a][0]} and {photos[b][0]}")


def _print_recall(kind: str, originals) -> None:
    distances = measure_recall(originals)
    print(f"\nrecall over {len(originals)} {kind} per transform and threshold, confirmed (pHash alone in brackets)")
    print("| transform | median distance | " + " | ".join(f"d<={d}" for d in THRESHOLDS) + " |")
    print("|---|---|" + "---|" * len(THRESHOLDS))
    for name, found in distances.items():
        phash_only, after = (np.array(column) for column in zip(*found, strict=True))
        cells = " | ".join(f"{(after <= d).mean():.3f} ({(phash_only <= d).mean():.3f})" for d in THRESHOLDS)
        print(f"| {name} | {int(np.median(phash_only))} | {cells} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gcompris", type=Path, metavar="DEB_OR_FOLDER",
                        help="add the photos of gcompris-qt-data (its .deb, or a folder it was unpacked into)")
    parser.add_argument("--copies_of", type=int, default=300)
    parser.add_argument("--max_distinct", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=0, help="which tiles are drawn")
    parser.add_argument("--cpu_repeats", type=int, default=5)
    parser.add_argument("--cpu_only", action="store_true", help="only the extra CPU per image")
    parser.add_argument("--draw_false_pairs", type=Path, metavar="PNG",
                        help="draw the confirmed false pairs between tiles at the default distance, side by side")
    parser.add_argument("--min_structure_similarity", type=float,
                        default=near_duplicates_core.MIN_STRUCTURE_SIMILARITY,
                        help="try another confirmation threshold (default: the build's)")
    parser.add_argument("--low_detail_min_structure_similarity", type=float,
                        default=near_duplicates_core.LOW_DETAIL_MIN_STRUCTURE_SIMILARITY,
                        help="try another threshold for low-detail pairs (default: the build's; 0.9: none stricter)")
    args = parser.parse_args()
    near_duplicates_core.MIN_STRUCTURE_SIMILARITY = args.min_structure_similarity
    near_duplicates_core.LOW_DETAIL_MIN_STRUCTURE_SIMILARITY = args.low_detail_min_structure_similarity
    print(f"confirmation: structure cosine >= {args.min_structure_similarity} "
          f"({near_duplicates_core.LOW_DETAIL_MIN_STRUCTURE_SIMILARITY} for low-detail pairs), colours agree")
    photos = source_photos(args.gcompris)
    sizes = [p.size for _, p in photos]
    print(f"{len(photos)} source photos, {min(w * h for w, h in sizes) / 1e6:.2f}-"
          f"{max(w * h for w, h in sizes) / 1e6:.2f} MP")
    if args.cpu_only:
        _print_cpu(photos, args.cpu_repeats)
        return
    _print_whole_photo_pairs(photos)
    tiles, places = distinct_tiles(photos, args.max_distinct, args.seed)
    _print_false_pairs(photos, tiles, places, args.draw_false_pairs)
    _print_recall("tiles of 128-256 px", [t for t in tiles if t.width >= 128][:args.copies_of])
    _print_recall("whole photos", [photo for _, photo in photos])
    _print_cpu(photos, args.cpu_repeats)


if __name__ == "__main__":
    main()
