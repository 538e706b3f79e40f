"""The perceptual hash of an image: imagehash's 64-bit pHash (DCT of a 32x32 grey thumbnail), computed from a
reduced decode, so near-identical pictures (resized, re-encoded, brightened, cropped a little) get hashes a few
bits apart while distinct photos sit about 32 bits apart.

Cost: a JPEG is decoded in Pillow's draft mode (libjpeg's DCT scaling, 1/2 to 1/8 of full size, in grey); other
formats are decoded in full and shrunk with `Image.reduce` before the thumbnail. When the writer has already
decoded the pixels (--validate decode), `hash_image` reuses them: only the shrink and the DCT are extra.
Nothing here keeps pixels: a hash (an int) is all that leaves. docs/near_duplicates.md has the measurements.
"""

from __future__ import annotations

import io

HASH_BITS = 64
# The thumbnail pHash takes its DCT of is 32x32; decoding at least twice that keeps the Lanczos resize honest.
MIN_REDUCED_SIDE = 64


def hash_image(image) -> int | None:
    """The pHash of a loaded PIL image, as an int of HASH_BITS bits; None for a mode it cannot take (the image
    is still written: a missing hash only means it is not compared)."""
    try:
        return _phash(image)
    except Exception:
        return None


def _phash(image) -> int:
    import imagehash

    factor = min(image.size) // MIN_REDUCED_SIDE
    if factor >= 2:
        image = image.reduce(factor)
    if image.mode not in ("L", "RGB"):
        image = image.convert("RGBA").convert("RGB") if "A" in image.getbands() or image.mode == "P" \
            else image.convert("RGB")
    return int(str(imagehash.phash(image)), 16)


def hash_bytes(data: bytes) -> int | None:
    """The pHash of an encoded image from a reduced decode; None when the bytes do not decode (the writer
    reports such images on its own terms)."""
    from PIL import Image

    Image.MAX_IMAGE_PIXELS = None  # the writer's own pixel limit has been checked before this is called
    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.format in ("JPEG", "MPO"):
                width, height = image.size
                scale = max(1, min(width, height) // MIN_REDUCED_SIDE)
                image.draft("L", (max(1, width // scale), max(1, height // scale)))
            image.load()
            return _phash(image)
    except Exception:
        return None
