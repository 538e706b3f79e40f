"""The corpora compare.py measures on, each N distinct JPEGs and a label-sorted CSV manifest with relative paths
(plus a manifest of the first quarter of each label's rows), cached in the work folder. Not run by CI.

    synthetic  photo-like 720x540 JPEGs made from blurred noise and shapes (65-100 KB), img/<label>/, 10 labels
    photos     crops of real photographs (the tensorflow-recorder photos in tests/data/tfrecorder), each a
               random crop resized to 0.3-0.5 MP and saved at JPEG quality 80-92 (about 40-90 KB), in folders
               of 1,000 (photos/00/, photos/01/, ...), 7 labels assigned in manifest order, as a user's export
               of a photo library would be laid out
    a manifest any CSV manifest with a header (split,image_uri,label): its own images, untouched

What differs between them and why it matters: docs/performance.md ("Against a plain loop").
"""

from __future__ import annotations

import csv
import io
import json
import math
import multiprocessing
import os
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS_VERSION = 1
SYNTHETIC_LABELS = 10
WIDTH, HEIGHT = 720, 540  # synthetic: 0.39 MP
JPEG_QUALITY = 89
PHOTO_SOURCES = REPO / "tests" / "data" / "tfrecorder" / "images"
PHOTO_LABELS = 7
PHOTOS_PER_FOLDER = 1000
PHOTO_PIXELS = (300_000, 500_000)
PHOTO_QUALITY = (80, 92)
IMAGES_PER_JOB = 100
# A build or a writer measured by a benchmark here takes seconds to a minute; one that takes this long is stuck.
BUILD_DEADLINE_S = 1800


@dataclass
class Corpus:
    root: Path
    full: Path  # manifest of N images
    quarter: Path  # the first quarter of each label's rows
    full_images: int
    quarter_images: int
    full_bytes: int
    quarter_bytes: int
    kb_min: float
    kb_median: float
    kb_max: float
    kind: str = "synthetic"


def describe(corpus) -> str:
    """One line about a Corpus (or the same fields read back from a results file)."""
    return (f"{corpus.full_images} JPEGs ({getattr(corpus, 'kind', 'synthetic')}), {corpus.full_bytes / 1e6:.0f} MB, "
            f"{corpus.kb_min:.0f} / {corpus.kb_median:.0f} / {corpus.kb_max:.0f} KB min / median / max")


# ------------------------------------------------------------------------------------------------ synthetic

_BASES: list = []


def _init_synthetic() -> None:
    """Four noise textures per worker: RGB noise, blurred so JPEG sizes are photo-like rather than noise-like."""
    from PIL import Image, ImageFilter

    _BASES.clear()
    for _ in range(4):
        channels = [Image.effect_noise((WIDTH + 160, HEIGHT + 120), 63).filter(ImageFilter.GaussianBlur(1.1))
                    for _ in range(3)]
        _BASES.append(Image.merge("RGB", channels))


def _synthetic_image(i: int, rng: random.Random) -> bytes:
    from PIL import Image, ImageDraw, ImageFilter

    x, y = rng.randrange(160), rng.randrange(120)
    image = _BASES[i % len(_BASES)].crop((x, y, x + WIDTH, y + HEIGHT))
    image = Image.blend(image, Image.new("RGB", (WIDTH, HEIGHT), _color(rng)), 0.3)
    draw = ImageDraw.Draw(image)
    for _ in range(rng.randrange(4, 9)):
        x0, y0 = rng.randrange(WIDTH), rng.randrange(HEIGHT)
        box = (x0, y0, x0 + rng.randrange(20, 140), y0 + rng.randrange(20, 140))
        shape = rng.random()
        if shape < 0.4:
            draw.ellipse(box, fill=_color(rng))
        elif shape < 0.8:
            draw.rectangle(box, fill=_color(rng))
        else:
            draw.polygon([(rng.randrange(WIDTH), rng.randrange(HEIGHT)) for _ in range(3)], fill=_color(rng))
    image = image.filter(ImageFilter.GaussianBlur(0.5))
    ImageDraw.Draw(image).text((10, 10), f"{i}", fill=(255, 255, 255))  # distinct even if all else matched
    out = io.BytesIO()
    image.save(out, "JPEG", quality=JPEG_QUALITY)
    return out.getvalue()


def _color(rng: random.Random) -> tuple[int, int, int]:
    return rng.randrange(256), rng.randrange(256), rng.randrange(256)


def _synthetic_rows(count: int) -> list[tuple[str, str, str]]:
    rows = []
    for i in range(count):
        label = f"class_{i * SYNTHETIC_LABELS // count:02d}"
        rows.append(("test" if i % 10 == 0 else "train", f"img/{label}/{i:07d}.jpg", label))
    return rows


# --------------------------------------------------------------------------------------------------- photos

_PHOTOS: list = []


def _init_photos() -> None:
    from PIL import Image

    _PHOTOS.clear()
    for path in sorted(PHOTO_SOURCES.rglob("*.jpg")):
        with Image.open(path) as photo:
            _PHOTOS.append(photo.convert("RGB"))


def _photo_crop(i: int, rng: random.Random) -> bytes:
    """A random crop (50-100% of each side) of one of the photos, resized to 0.3-0.5 MP, mirrored half the time."""
    from PIL import Image

    photo = _PHOTOS[i % len(_PHOTOS)]
    width, height = (max(1, round(side * rng.uniform(0.5, 1.0))) for side in photo.size)
    x, y = rng.randrange(photo.width - width + 1), rng.randrange(photo.height - height + 1)
    scale = math.sqrt(rng.uniform(*PHOTO_PIXELS) / (width * height))
    crop = photo.resize((round(width * scale), round(height * scale)), Image.Resampling.BICUBIC,
                        box=(x, y, x + width, y + height))
    if rng.random() < 0.5:
        crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    out = io.BytesIO()
    crop.save(out, "JPEG", quality=rng.randint(*PHOTO_QUALITY))
    return out.getvalue()


def _photo_rows(count: int) -> list[tuple[str, str, str]]:
    width = len(str((count - 1) // PHOTOS_PER_FOLDER))
    return [("test" if i % 10 == 0 else "train", f"photos/{i // PHOTOS_PER_FOLDER:0{width}d}/{i:07d}.jpg",
             f"label_{i * PHOTO_LABELS // count}") for i in range(count)]


KINDS: dict[str, tuple[Callable[[int], list], Callable[[], None], Callable[[int, random.Random], bytes]]] = {
    "synthetic": (_synthetic_rows, _init_synthetic, _synthetic_image),
    "photos": (_photo_rows, _init_photos, _photo_crop),
}


def _make_images(job: tuple[str, Path, int, list[tuple[int, str]]]) -> list[tuple[int, int]]:
    """Writes the images of one chunk; returns (index, bytes) for each."""
    kind, root, seed, items = job
    sizes = []
    for i, uri in items:
        data = KINDS[kind][2](i, random.Random(seed * 1_000_003 + i))
        path = root / uri
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        sizes.append((i, len(data)))
    return sizes


# ------------------------------------------------------------------------------------------------- corpora

def _root(workdir: Path, kind: str, count: int) -> Path:
    return workdir / (f"corpus-n{count}" if kind == "synthetic" else f"corpus-{kind}-n{count}")


def make_corpus(workdir: Path, count: int, kind: str = "synthetic", seed: int = 0) -> Corpus:
    """N distinct JPEGs of `kind` under <workdir>/corpus[-kind]-n<N>/ and two label-sorted manifests; reused
    when corpus.json (written last) says the corpus is complete."""
    root = _root(workdir, kind, count)
    marker = root / "corpus.json"
    if marker.exists():
        info = json.loads(marker.read_text())
        if info.get("version") == CORPUS_VERSION and info.get("images") == count:
            print(f"corpus: reusing {root}")
            return Corpus(root=root, **{k: (Path(v) if k in ("full", "quarter") else v)
                                        for k, v in info["corpus"].items()})
    started = time.monotonic()
    make_rows, init, _ = KINDS[kind]
    rows = make_rows(count)
    jobs = [(kind, root, seed, [(i, rows[i][1]) for i in range(start, min(start + IMAGES_PER_JOB, count))])
            for start in range(0, count, IMAGES_PER_JOB)]
    sizes = [0] * count
    with multiprocessing.Pool(os.cpu_count(), initializer=init) as pool:
        for done in pool.imap_unordered(_make_images, jobs):
            for i, size in done:
                sizes[i] = size
    corpus = _with_manifests(root, rows, sizes, kind)
    info = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(corpus).items() if k != "root"}
    marker.write_text(json.dumps({"version": CORPUS_VERSION, "images": count, "corpus": info}, indent=1))
    print(f"corpus: made {count} images in {time.monotonic() - started:.0f} s under {root}")
    return corpus


def corpus_of_manifest(manifest: Path, workdir: Path) -> Corpus:
    """A user's CSV manifest (header split,image_uri,label) as a corpus: its rows and images as they are, and a
    quarter manifest written beside the work folder's outputs (relative URIs made absolute)."""
    with manifest.open(newline="") as f:
        rows = [(r["split"], r["image_uri"], r["label"]) for r in csv.DictReader(f)]
    folder = manifest.resolve().parent
    absolute = [(split, str(folder / uri), label) for split, uri, label in rows]
    sizes = [os.path.getsize(uri) for _, uri, _ in absolute]
    root = workdir / f"manifest-{manifest.stem}"
    root.mkdir(parents=True, exist_ok=True)
    return _with_manifests(root, absolute, sizes, f"manifest {manifest}")


def _with_manifests(root: Path, rows: list[tuple[str, str, str]], sizes: list[int], kind: str) -> Corpus:
    quarter_rows = []
    for label in sorted({r[2] for r in rows}):
        indices = [i for i, r in enumerate(rows) if r[2] == label]
        quarter_rows += indices[: len(indices) // 4]
    root.mkdir(parents=True, exist_ok=True)
    full, quarter = root / "manifest.csv", root / "manifest-quarter.csv"
    for path, indices in ((full, range(len(rows))), (quarter, quarter_rows)):
        with path.open("w", newline="") as f:
            csv.writer(f).writerows([("split", "image_uri", "label"), *(rows[i] for i in indices)])
    return Corpus(root, full, quarter, len(rows), len(quarter_rows), sum(sizes),
                  sum(sizes[i] for i in quarter_rows), min(sizes) / 1e3, statistics.median(sizes) / 1e3,
                  max(sizes) / 1e3, kind)


def manifest_rows(manifest: Path) -> int:
    """Data rows of a CSV manifest with a header: its non-blank lines but the first."""
    with manifest.open() as f:
        return sum(1 for line in f if line.strip()) - 1


def warm_page_cache(manifest: Path) -> None:
    """Reads every image once, so that the first configuration measured does not pay for the disk alone."""
    started, total = time.monotonic(), 0
    with manifest.open(newline="") as f:
        for row in csv.DictReader(f):
            total += len((manifest.parent / row["image_uri"]).read_bytes())
    print(f"page cache: read {total / 1e9:.2f} GB in {time.monotonic() - started:.1f} s")
