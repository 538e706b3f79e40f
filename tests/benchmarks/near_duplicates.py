"""How well --near_duplicates finds copies, and what it costs: recall per transform, false pairs among distinct
images per threshold, and the extra CPU per image of the hash in --validate header and decode mode.

    pip install -e '.[bench]'   # scikit-image, for its bundled photos (no download)
    python tests/benchmarks/near_duplicates.py [--copies_of 300] [--max_distinct 12000]

Images: the photos scikit-image ships (skimage.data's files; line drawings, binary and tiny ones left out) and
the tensorflow-recorder photos in tests/data/tfrecorder. Distinct images are tiles of those photos: for each
tile side of 256, 192, 160, 128, 112, 96, 80 and 64 pixels, a grid of non-overlapping tiles, and a second grid
shifted by half a tile (so tiles of one grid overlap the other's by half: a hard case for false pairs); tiles
whose grey standard deviation is below MIN_TILE_STD (flat sky, black background) are left out, since copies of
nothing are not distinct pictures. Each is saved as a JPEG (quality 90). Copies of `--copies_of` of them
(those of 128 pixels or more) are made under each transform and compared with their original.

The hash is shardsmith's own (shardsmith.core.perceptual_hash), computed from the encoded bytes as the writer
does. CPU figures are time.process_time per image, on this machine's shared cores: compare within a run.
"""

from __future__ import annotations

import argparse
import io
import random
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance, ImageOps

from shardsmith.core.perceptual_hash import hash_bytes, hash_image

ROOT = Path(__file__).resolve().parents[2]
TILE_SIDES = (256, 192, 160, 128, 112, 96, 80, 64)
MIN_TILE_STD = 12.0
THRESHOLDS = (4, 6, 8, 10, 12)
SKIPPED = {"horse.png", "logo.png", "phantom.png", "chessboard_GRAY.png", "chessboard_RGB.png", "binary_blobs",
           "no_time_for_that_tiny.gif", "color.png", "clock_motion.png"}


def source_photos() -> list[tuple[str, Image.Image]]:
    import skimage.data

    folder = Path(skimage.data.__file__).parent
    paths = sorted(p for p in folder.iterdir() if p.suffix in (".png", ".jpg") and p.name not in SKIPPED)
    paths += sorted((ROOT / "tests/data/tfrecorder/images").rglob("*.jpg"))
    photos = []
    for path in paths:
        with Image.open(path) as image:
            photos.append((path.name, image.convert("RGB")))
    return photos


def jpeg(image: Image.Image, quality: int = 90) -> bytes:
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=quality)
    return out.getvalue()


def png(image: Image.Image) -> bytes:
    out = io.BytesIO()
    image.save(out, "PNG")
    return out.getvalue()


def distinct_tiles(photos, max_distinct: int) -> list[Image.Image]:
    tiles = []
    for _, photo in photos:
        width, height = photo.size
        for side in TILE_SIDES:
            for offset in (0, side // 2):
                for top in range(offset, height - side + 1, side):
                    for left in range(offset, width - side + 1, side):
                        tile = photo.crop((left, top, left + side, top + side))
                        if np.asarray(tile.convert("L"), dtype=np.float32).std() >= MIN_TILE_STD:
                            tiles.append(tile)
    random.Random(0).shuffle(tiles)
    return tiles[:max_distinct]


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


def measure_recall(originals: list[Image.Image]) -> dict[str, list[int]]:
    distances: dict[str, list[int]] = {name: [] for name in TRANSFORMS}
    for image in originals:
        base = hash_bytes(jpeg(image))
        base_png = hash_bytes(png(image))
        for name, make in TRANSFORMS.items():
            reference = base_png if name == "png -> jpeg" else base
            distances[name].append((reference ^ hash_bytes(make(image))).bit_count())
    return distances


def false_pairs(hashes: np.ndarray, thresholds) -> dict[int, int]:
    counts = dict.fromkeys(thresholds, 0)
    for i in range(len(hashes) - 1):
        distances = np.bitwise_count(hashes[i + 1:] ^ hashes[i])
        for d in thresholds:
            counts[d] += int((distances <= d).sum())
    return counts


def cpu_per_image(photos, repeats: int) -> tuple[float, float, float]:
    """(header-mode extra, decode-mode extra, full decode) in ms per image, on full-size photos as JPEG."""
    encoded = [jpeg(photo) for _, photo in photos]
    hash_bytes(encoded[0])  # imports
    start = time.process_time()
    for _ in range(repeats):
        for data in encoded:
            hash_bytes(data)
    header = time.process_time() - start
    decoded = []
    start = time.process_time()
    for data in encoded:
        image = Image.open(io.BytesIO(data))
        image.load()
        decoded.append(image)
    decode = time.process_time() - start
    start = time.process_time()
    for _ in range(repeats):
        for image in decoded:
            hash_image(image)
    in_decode = time.process_time() - start
    n = len(encoded)
    return header / n / repeats * 1e3, in_decode / n / repeats * 1e3, decode / n * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies_of", type=int, default=300)
    parser.add_argument("--max_distinct", type=int, default=12000)
    parser.add_argument("--cpu_repeats", type=int, default=5)
    args = parser.parse_args()
    photos = source_photos()
    sizes = [p.size for _, p in photos]
    print(f"{len(photos)} source photos, {min(w * h for w, h in sizes) / 1e6:.2f}-"
          f"{max(w * h for w, h in sizes) / 1e6:.2f} MP")
    tiles = distinct_tiles(photos, args.max_distinct)
    hashes = np.array([hash_bytes(jpeg(tile)) for tile in tiles], dtype=np.uint64)
    pairs = false_pairs(hashes, THRESHOLDS)
    print(f"\nfalse pairs among {len(tiles)} distinct tiles ({len(tiles) * (len(tiles) - 1) // 2} pairs)")
    print("| threshold | false pairs | per 10,000 images |\n|---|---|---|")
    for d in THRESHOLDS:
        print(f"| {d} | {pairs[d]} | {pairs[d] * 10_000 / len(tiles):.2f} |")
    originals = [t for t in tiles if t.width >= 128][:args.copies_of]
    distances = measure_recall(originals)
    print(f"\nrecall over {len(originals)} originals (tiles of 128-256 px) per transform and threshold")
    print("| transform | median distance | " + " | ".join(f"d<={d}" for d in THRESHOLDS) + " |")
    print("|---|---|" + "---|" * len(THRESHOLDS))
    for name, found in distances.items():
        found_array = np.array(found)
        cells = " | ".join(f"{(found_array <= d).mean():.3f}" for d in THRESHOLDS)
        print(f"| {name} | {int(np.median(found_array))} | {cells} |")
    header, in_decode, decode = cpu_per_image(photos, args.cpu_repeats)
    print(f"\nextra CPU per image over {len(photos)} full-size photos (JPEG q90): header mode {header:.2f} ms "
          f"(own reduced decode + pHash), decode mode {in_decode:.2f} ms (reduce + pHash of the decoded "
          f"pixels); a full decode alone costs {decode:.2f} ms")


if __name__ == "__main__":
    main()
