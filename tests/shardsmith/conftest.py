"""Fixtures of the readers' tests (load, records, torch, grain, verify, index files, TFDS: in this folder and its
torch/, read/ and format/): every kind of image a reader decodes, a build's gzip-compressed copy, two builds whose
shards are of equal sizes with other images inside, and a fresh interpreter's imports. The suite's shared fixtures (real
builds, metadata helpers) are in tests/conftest.py; these take them as fixtures, since pytest's importlib mode
makes no conftest importable.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import google_crc32c
import pytest
from PIL import Image

from pipeline import cli

ROOT = Path(__file__).resolve().parents[2]


def _encoded(image: Image.Image, kind: str) -> bytes:
    out = io.BytesIO()
    image.save(out, kind, **({"quality": 90} if kind == "JPEG" else {}))
    return out.getvalue()


@pytest.fixture(scope="session")
def every_kind_of_image(tfrecorder_data: Path) -> dict[str, tuple[bytes, int, int]]:
    """name -> (file bytes, height, width as the header says and a build stores them): TFRecorder's real photos
    as they are, and re-encoded as a user's files would be: a 12-megapixel frame, a panorama, grayscale, tiny,
    just above 224, PNG, RGBA and grayscale PNG. The readers' decode tests run over all of them."""
    photos = sorted((tfrecorder_data / "images").rglob("*.jpg"))
    cat, goat = Image.open(photos[0]).convert("RGB"), Image.open(photos[-1]).convert("RGB")
    made = {
        **{f"photo_as_stored_{path.stem}": path.read_bytes() for path in photos},
        "jpeg_12mp": _encoded(cat.resize((4000, 3000), Image.Resampling.BICUBIC), "JPEG"),
        "jpeg_panorama": _encoded(goat.resize((3000, 300), Image.Resampling.BICUBIC), "JPEG"),
        "jpeg_grayscale": _encoded(cat.convert("L"), "JPEG"),
        "jpeg_tiny": _encoded(goat.resize((12, 9), Image.Resampling.BICUBIC), "JPEG"),
        "jpeg_just_above_target": _encoded(cat.resize((250, 230), Image.Resampling.BICUBIC), "JPEG"),
        "png_photo": _encoded(cat, "PNG"),
        "png_rgba": _encoded(goat.convert("RGBA"), "PNG"),
        "png_grayscale": _encoded(goat.convert("L"), "PNG"),
    }
    sized = {}
    for name, data in made.items():
        with Image.open(io.BytesIO(data)) as image:
            sized[name] = (data, image.height, image.width)
    return sized


@pytest.fixture
def gzip_copy(files_of_build: Callable[[Path], Path], metadata_writer: Callable[[Path, dict], None]):
    """copy_with_gzip_shards(built, target) -> target."""

    def copy_with_gzip_shards(built: Path, target: Path) -> Path:
        """The built dataset with every shard gzip-compressed and metadata.json saying so, as --compression gzip
        writes it (same names with .gz, num_bytes and sha256 of the compressed file, no index files, no TFDS
        files: TFDS cannot read them)."""
        shutil.copytree(built, target)
        metadata = json.loads((target / "metadata.json").read_text())
        metadata["compression"] = "gzip"
        folder = files_of_build(target)
        for info in metadata["splits"].values():
            for shard in info["shards"]:
                raw = folder / shard["file"]
                packed = folder / (shard["file"] + ".gz")
                packed.write_bytes(gzip.compress(raw.read_bytes(), mtime=0))
                raw.unlink()
                (folder / (shard["file"] + ".idx")).unlink(missing_ok=True)  # gzip shards have no index
                shard["index"] = None
                shard["file"], shard["num_bytes"] = packed.name, packed.stat().st_size
                shard["crc32c"] = f"{google_crc32c.value(packed.read_bytes()):08x}"
            info["num_bytes"] = sum(s["num_bytes"] for s in info["shards"])
        for name in ("dataset_info.json", "features.json", "image.class.label.labels.txt"):
            (folder / name).unlink(missing_ok=True)
        metadata_writer(target, metadata)
        return target

    return copy_with_gzip_shards


def imports_without(statements: str, *modules: str) -> None:
    """Runs `statements` in a fresh interpreter and asserts none of `modules` got imported by them."""
    code = (f"import sys\n{statements}\nloaded = {{{', '.join(map(repr, modules))}}} & set(sys.modules)\n"
            "assert not loaded, loaded\nprint('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


@pytest.fixture
def assert_imports_without():
    """imports_without(statements, *modules): the statements, run fresh, import none of the modules."""
    return imports_without


LABELS = ("cat", "dog", "emu")  # equal lengths: records of equal size whichever images a shard holds


def _same_size_images(root: Path, per_label: int) -> Path:
    """Uncompressed BMPs of one size with names of one length, so two builds' shards that hold as many records
    are as many bytes; the manifest puts 3/4 of each label in train, the rest in test."""
    rng = random.Random(5)
    rows = []
    for label in LABELS:
        for i in range(per_label):
            image = Image.frombytes("RGB", (16, 12), bytes(rng.randrange(256) for _ in range(16 * 12 * 3)))
            out = io.BytesIO()
            image.save(out, "BMP")
            uri = f"img/{label}/{i:03d}.bmp"
            (root / uri).parent.mkdir(parents=True, exist_ok=True)
            (root / uri).write_bytes(out.getvalue())
            rows.append(("train" if i < per_label * 3 // 4 else "test", uri, label))
    manifest = root / "manifest.csv"
    with manifest.open("w", newline="") as f:
        csv.writer(f).writerows([("split", "image_uri", "label"), *rows])
    return manifest


@pytest.fixture(scope="session")
def same_size_images() -> Callable[[Path, int], Path]:
    """same_size_images(root, per_label) -> manifest: BMPs of one size under root/img/, 3 labels (cat, dog,
    emu), 3/4 of each label in train and the rest in test."""
    return _same_size_images


def _build(manifest: Path, out: Path, *flags: str) -> Path:
    code = cli.main(["build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "same",
                     "--num_shards", "train=2,test=1", *flags])
    assert code == 0
    return out


@pytest.fixture(scope="session")
def two_builds(tmp_path_factory) -> tuple[Path, Path]:
    """The same 48 images built with two seeds: shards of equal record counts and bytes, other images inside."""
    root = tmp_path_factory.mktemp("same_size")
    manifest = _same_size_images(root, 16)
    return _build(manifest, root / "one", "--seed", "1"), _build(manifest, root / "two", "--seed", "2")
