"""Resize and re-encode (`--max_side`, `--reencode`, `--jpeg_quality`): decode with Pillow, apply the EXIF
orientation, shrink so the longer side is at most `max_side` (aspect ratio kept), and encode as JPEG or PNG.

The record then holds the new bytes and their shape; `image/key/sha256` stays the hash of the source file, so
duplicates can still be traced to it. Any format Pillow reads (TIFF, for example) becomes usable this way.
Deterministic: the same source bytes and settings give the same output bytes. Imports neither Beam nor
TensorFlow (the shard writer processes run it).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from shardsmith.core.flag import Flag, Template, checked, option
from shardsmith.core.load_images import DEFAULT_MAX_PIXELS, ImageInfo, ImageRejected, open_image

REENCODE_FORMATS = ("none", "jpeg", "png")
# Pillow's names of the formats tf.io.decode_image reads; others (TIFF, ...) are always re-encoded.
TENSORFLOW_FORMATS = ("JPEG", "MPO", "PNG", "GIF", "BMP", "WEBP")
DEFAULT_JPEG_QUALITY = 90
# Pillow modes each output format stores as they are, and the channels tf.io.decode_image returns for them.
_JPEG_MODES = {"L": 1, "RGB": 3}
_PNG_MODES = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}


@dataclass(frozen=True)
class Reencoding:
    max_side: int = option(0, Flag(  # 0: no resizing
        "shrink images whose longer side is larger to this (aspect kept, EXIF orientation applied) and re-encode "
        "them; 0 (default): keep sizes", group="output", metavar="PIXELS",
        parse=checked(lambda side: side >= 0, "--max_side must be 0 (keep sizes) or a number of pixels"),
        template=Template("Max side", "shrink images whose longer side is larger to this many pixels and "
                          "re-encode them; 0 (default): keep sizes", r"[0-9]+"), same_in_every_version=True))
    # none: only images resized, rotated or unreadable by TensorFlow are re-encoded, as JPEG if they were JPEG,
    # else PNG
    format: str = option("none", Flag(
        "re-encode every image as jpeg or png (none, the default: only images resized, rotated, or in formats "
        "TensorFlow cannot decode, such as TIFF)", name="reencode", recorded="reencode", group="output",
        choices=REENCODE_FORMATS, template=Template("Re-encode", "none (default), jpeg or png: re-encode every "
                                                    "image"), same_in_every_version=True))
    jpeg_quality: int = option(DEFAULT_JPEG_QUALITY, Flag(
        "JPEG quality of re-encoded images, 1-95 (default {default})", group="output", metavar="Q",
        parse=checked(lambda quality: 1 <= quality <= 95, "--jpeg_quality must be between 1 and 95"),
        template=Template("JPEG quality", "JPEG quality of re-encoded images, 1-95 (default {default})",
                          r"([1-9]|[1-8][0-9]|9[0-5])"), same_in_every_version=True))

    @property
    def active(self) -> bool:
        return self.max_side > 0 or self.format != "none"


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
