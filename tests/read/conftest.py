"""Fixtures of the read side's tests: every kind of image a reader decodes, a build's gzip-compressed copy, and a
fresh interpreter's imports. The suite's shared fixtures (real builds, metadata helpers) are in tests/conftest.py;
these take them as fixtures, since pytest's importlib mode makes no conftest importable.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import google_crc32c
import pytest
from PIL import Image

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
