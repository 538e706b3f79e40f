"""--max_side / --reencode / --jpeg_quality: resize keeping aspect ratio, EXIF orientation applied, re-encoded
bytes and shapes in the records (checked by TensorFlow's decoder), the source file's SHA-256 kept, TIFF made
usable; end to end through a build and load()."""

from __future__ import annotations

import hashlib
import io
import random
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shardsmith import load
from shardsmith.images.load_images import ImageInfo, ImageRejected
from shardsmith.images.reencode import reencode
from shardsmith.output_folder.layout import published_dir
from shardsmith.settings import Reencoding


def _photo(size: tuple[int, int], mode: str = "RGB", seed: int = 0) -> Image.Image:
    rng = random.Random(seed)
    small = Image.frombytes("RGB", (8, 6), rng.randbytes(8 * 6 * 3)).resize(size, Image.Resampling.BILINEAR)
    return small.convert(mode)


def _save(image: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kwargs)
    return out.getvalue()


def _rotated_jpeg(size: tuple[int, int]) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: rotate 90 degrees clockwise to view
    return _save(_photo(size), "JPEG", exif=exif.tobytes())


def _decoded_shape(tf, data: bytes) -> tuple[int, int, int]:
    return tuple(int(d) for d in tf.io.decode_image(data, expand_animations=False).shape)


@pytest.mark.parametrize("source, settings, expected", [
    (lambda: _save(_photo((400, 300)), "JPEG"), Reencoding(max_side=100), ImageInfo("jpeg", 75, 100, 3)),
    (lambda: _save(_photo((300, 400), "L"), "PNG"), Reencoding(max_side=100), ImageInfo("png", 100, 75, 1)),
    (lambda: _save(_photo((40, 30), "RGBA"), "PNG"), Reencoding(format="jpeg"), ImageInfo("jpeg", 30, 40, 3)),
    (lambda: _save(_photo((40, 30), "RGBA"), "PNG"), Reencoding(format="png"), ImageInfo("png", 30, 40, 4)),
    (lambda: _save(_photo((40, 30)), "TIFF"), Reencoding(max_side=1000), ImageInfo("png", 30, 40, 3)),
    (lambda: _rotated_jpeg((40, 30)), Reencoding(max_side=1000), ImageInfo("jpeg", 40, 30, 3)),
    (lambda: _save(_photo((40, 30), "I;16"), "PNG"), Reencoding(format="png"), ImageInfo("png", 30, 40, 1)),
])
def test_reencoded_bytes_decode_to_the_reported_shape(source, settings, expected, tf):
    data, info = reencode(source(), settings)
    assert info == expected
    assert _decoded_shape(tf, data) == (info.height, info.width, info.channels)
    assert data.startswith(b"\xff\xd8" if info.format == "jpeg" else b"\x89PNG")


def test_an_image_that_needs_nothing_is_left_alone():
    data = _save(_photo((40, 30)), "JPEG")
    assert reencode(data, Reencoding(max_side=40)) is None
    assert reencode(data, Reencoding(max_side=39)) is not None


def test_reencoding_is_deterministic_and_honours_quality():
    data = _save(_photo((300, 200), seed=3), "PNG")
    first, _ = reencode(data, Reencoding(format="jpeg", jpeg_quality=90))
    assert reencode(data, Reencoding(format="jpeg", jpeg_quality=90))[0] == first
    assert len(reencode(data, Reencoding(format="jpeg", jpeg_quality=20))[0]) < len(first)


def test_undecodable_input_is_rejected_with_a_reason():
    data = _save(_photo((64, 64), seed=4), "JPEG", quality=95)
    with pytest.raises(ImageRejected, match="truncated or corrupt"):
        reencode(data[: len(data) // 2], Reencoding(format="png"))
    with pytest.raises(ImageRejected, match="no known image format"):
        reencode(b"not an image at all", Reencoding(format="png"))


def test_build_with_max_side_and_reencode(tmp_path, shardsmith, read_records, metadata_of, tf):
    images = tmp_path / "img"
    sources = {
        "cat/big.jpg": _save(_photo((640, 480), seed=1), "JPEG"),
        "cat/rotated.jpg": _rotated_jpeg((320, 200)),
        "cat/scan.tiff": _save(_photo((200, 100), seed=2), "TIFF"),
        "dog/alpha.png": _save(_photo((90, 120), "RGBA", seed=5), "PNG"),
        "dog/small.jpg": _save(_photo((50, 40), seed=6), "JPEG"),
        "dog/broken.jpg": _save(_photo((300, 300), seed=7), "JPEG")[:400],
    }
    for name, data in sources.items():
        (images / name).parent.mkdir(parents=True, exist_ok=True)
        (images / name).write_bytes(data)
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("".join(f"train,img/{name},{name.split('/')[0]}\n" for name in sources))
    outputs = []
    for attempt in range(2):
        out = tmp_path / f"out{attempt}"
        result = shardsmith("build", "--manifest", manifest, "--output_dir", out, "--name", "pets",
                            "--max_side", "128", "--reencode", "jpeg", "--jpeg_quality", "85",
                            "--max_error_fraction", "0.5")
        assert result.code == 0, result.err
        outputs.append(out)
    [records] = read_records(outputs[0], "train")
    assert sorted(r["image/filename"] for r in records) == sorted(f"img/{n}" for n in sources if "broken" not in n)
    for record in records:
        name = record["image/filename"][len("img/"):]
        assert record["image/key/sha256"] == hashlib.sha256(sources[name]).hexdigest()  # the source's hash
        assert record["image/format"] == "jpeg" and record["image/encoded"].startswith(b"\xff\xd8")
        shape = (record["image/height"], record["image/width"], record["image/channels"])
        assert _decoded_shape(tf, record["image/encoded"]) == shape
        assert max(shape[:2]) <= 128
    shapes = {r["image/filename"]: (r["image/height"], r["image/width"]) for r in records}
    assert shapes["img/cat/big.jpg"] == (96, 128)
    assert shapes["img/cat/rotated.jpg"] == (128, 80)  # EXIF orientation applied: portrait
    assert shapes["img/cat/scan.tiff"] == (64, 128)
    assert shapes["img/dog/small.jpg"] == (40, 50)  # re-encoded (--reencode jpeg), not resized
    errors = (Path(published_dir(outputs[0])) / "errors.jsonl").read_text()
    assert "broken.jpg" in errors and ("truncated or corrupt" in errors or "cannot be parsed" in errors)
    assert metadata_of(outputs[0])["options"]["max_side"] == 128
    shard = metadata_of(outputs[0])["splits"]["train"]["shards"][0]["file"]
    first, second = (Path(published_dir(out)) / shard for out in outputs)
    assert first.read_bytes() == second.read_bytes(), "deterministic"
    images_read = [image.numpy() for image, _ in load(str(outputs[0]), "train", batch_size=None, shuffle_buffer=0)]
    assert len(images_read) == 5 and all(max(i.shape[:2]) <= 128 for i in images_read)
    assert all(isinstance(i, np.ndarray) and i.shape[2] == 3 for i in images_read)
