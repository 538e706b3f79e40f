"""Resize and re-encode (`--max_side`, `--reencode`, `--jpeg_quality`): decode with Pillow, apply the EXIF
orientation, shrink so the longer side is at most `max_side` (aspect ratio kept), and encode as JPEG or PNG.

The record then holds the new bytes and their shape; `image/key/sha256` stays the hash of the source file, so
duplicates can still be traced to it. Any format Pillow reads (TIFF, for example) becomes usable this way.
Deterministic: the same source bytes and settings give the same output bytes. Imports neither Beam nor
TensorFlow (the shard writer processes run it).
"""

from __future__ import annotations

import io

from shardsmith.images.load_images import ImageInfo, ImageRejected, open_image
from shardsmith.settings import DEFAULT_MAX_PIXELS, Reencoding

# Pillow's names of the formats tf.io.decode_image reads; others (TIFF, ...) are always re-encoded.
TENSORFLOW_FORMATS = ("JPEG", "MPO", "PNG", "GIF", "BMP", "WEBP")
# Pillow modes each output format stores as they are, and the channels tf.io.decode_image returns for them.
_JPEG_MODES = {"L": 1, "RGB": 3}
_PNG_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


def reencode(data: bytes, settings: Reencoding, max_pixels: int = DEFAULT_MAX_PIXELS) -> tuple[bytes, ImageInfo] | None:
    """(new bytes, their shape as TensorFlow decodes them), or None when the image needs no change (no
    --reencode and already within --max_side). Raises ImageRejected for what Pillow cannot decode."""
    from PIL import Image, ImageOps

    with open_image(data, max_pixels) as image:
        width, height = image.size
        orientation = image.getexif().get(0x0112, 1)
        fits = not settings.max_side or max(width, height) <= settings.max_side
        if settings.format == "none" and fits and orientation == 1 and image.format in TENSORFLOW_FORMATS:
            return None
        try:
            image.load()
            oriented = ImageOps.exif_transpose(image)
        except Exception as e:
            raise ImageRejected("image data is truncated or corrupt", f"{type(e).__name__}: {e}"[:300]) from None
        source_format = image.format
    if not fits:
        scale = settings.max_side / max(oriented.size)
        size = (max(1, round(oriented.width * scale)), max(1, round(oriented.height * scale)))
        oriented = oriented.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
    target = settings.format if settings.format != "none" else ("jpeg" if source_format == "JPEG" else "png")
    return _encode(oriented, target, settings.jpeg_quality)


def _encode(image, target: str, jpeg_quality: int) -> tuple[bytes, ImageInfo]:
    alpha = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    if image.mode in ("I", "I;16", "I;16B", "I;16L"):
        image = image.point(lambda value: value / 256).convert("L")  # 16-bit grey to 8 bits, scaled
    grey = image.mode in ("1", "L", "LA", "F")
    if target == "jpeg":
        mode = "L" if grey else "RGB"
        channels, kwargs = _JPEG_MODES[mode], {"quality": jpeg_quality}
    else:
        mode = ("LA" if alpha else "L") if grey else ("RGBA" if alpha else "RGB")
        channels, kwargs = _PNG_MODES[mode], {"compress_level": 6}
    converted = image if image.mode == mode else image.convert(mode)
    out = io.BytesIO()
    converted.save(out, "JPEG" if target == "jpeg" else "PNG", **kwargs)
    return out.getvalue(), ImageInfo(target, converted.height, converted.width, channels)
