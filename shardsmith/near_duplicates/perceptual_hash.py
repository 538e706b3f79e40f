"""An image's perceptual signature: a 64-bit pHash (imagehash's) to find candidates, and two small confirming parts
(the thumbnail's low-frequency structure and its coarse colour) that tell near copies from images that only
hash alike. Computed from a reduced decode; about 90 bytes, never pixels.

- `phash`: the pHash of imagehash 4.3.2 (DCT of a 32x32 grey thumbnail, its 8x8 lowest frequencies against
  their median), bit for bit (tests/shardsmith/near_duplicates/test_near_duplicates.py compares them). It is computed
  here rather than by calling imagehash because the confirming parts need the same thumbnail and DCT: calling imagehash
  as well cost a second resize and DCT per image (decode-mode CPU 0.37 ms against a 0.3 ms budget). Resized,
  re-encoded, brightened and slightly cropped copies land a few bits apart; distinct photos about 32.
  But low-detail images (a dark corner, a blank wall) land close to each other whatever they show.
- `structure`: the same 63 low-frequency DCT coefficients (without the mean), as signed bytes. Two copies keep
  the coefficients' proportions (their cosine stays near 1 under resizing, re-encoding, brightness and
  contrast); images that only share the signs of their coefficients mostly do not.
- `colour`: the opponent colours (red-green, yellow-blue) of the 2x2 quarters of the image, divided by its mean
  brightness, so brightening leaves them unchanged and a contrast change scales them. pHash is blind to colour.
- `detail`: how many of the thumbnail's 16 blocks of 8x8 have texture; a pair of low-detail images is flagged
  in the report (most false pairs are such images).

As text (`signature_text`, in a row list: shardsmith/format/row_list.py), a signature is the base64 of its 80
bytes: the pHash (8 bytes, big-endian), the structure (63), the colour (8) and the detail (1); 108 characters.

Cost: a JPEG is decoded in Pillow's draft mode (libjpeg's DCT scaling, 1/2 to 1/8 of full size); other formats
are decoded in full and shrunk with `Image.reduce` before the thumbnail. When the writer has already decoded the
pixels (--validate decode), `signature_of_image` reuses them. docs/near_duplicates.md has the measurements.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from shardsmith.images.load_images import open_image
from shardsmith.settings import DEFAULT_MAX_PIXELS

# numpy, scipy and Pillow are imported where used: the flag declarations (shardsmith/settings/__init__.py) read this
# module's constants (through near_duplicates.py) on the bare standard library, for the dataflow command's
# argument checks.
HASH_BITS = 64
# The thumbnail pHash takes its DCT of is 32x32; decoding at least twice that keeps the Lanczos resize honest.
MIN_REDUCED_SIDE = 64
THUMBNAIL_SIDE = 32
LOW_FREQUENCIES = 8  # pHash's 8x8 block of the DCT
STRUCTURE_SCALE = 127  # the largest coefficient's magnitude as a signed byte
COLOUR_SCALE = 64  # opponent colour / mean brightness, as a signed byte: a step is 1/64
COLOUR_CELLS = 2  # the image is cut into COLOUR_CELLS x COLOUR_CELLS quarters for its colour
DETAIL_BLOCK = 8  # thumbnail blocks of 8x8 pixels: 16 of them
DETAIL_MIN_STD = 4.0  # grey levels a block must vary by (standard deviation) to count as textured
STRUCTURE_BYTES = LOW_FREQUENCIES * LOW_FREQUENCIES - 1
COLOUR_BYTES = COLOUR_CELLS * COLOUR_CELLS * 2
SIGNATURE_BYTES = HASH_BITS // 8 + STRUCTURE_BYTES + COLOUR_BYTES + 1


@dataclass(frozen=True, slots=True)
class ImageSignature:
    phash: int  # HASH_BITS bits, as imagehash's pHash
    structure: bytes  # 63 signed bytes: the low-frequency DCT coefficients after the mean, scaled
    colour: bytes  # COLOUR_CELLS**2 * 2 signed bytes: opponent colours per cell over mean brightness
    detail: int  # textured blocks of the thumbnail, 0-16

    def structure_vector(self):
        import numpy as np

        return np.frombuffer(self.structure, dtype=np.int8).astype(np.float64)

    def colour_cells(self):
        import numpy as np

        return np.frombuffer(self.colour, dtype=np.int8).astype(np.float64).reshape(-1, 2) / COLOUR_SCALE


def signature_text(signature: ImageSignature) -> str:
    """The signature as a row list holds it (the module says how); `signature_from_text` reads it back."""
    data = (signature.phash.to_bytes(HASH_BITS // 8, "big") + signature.structure + signature.colour
            + bytes([signature.detail]))
    return base64.b64encode(data).decode("ascii")


def signature_from_text(text: str) -> ImageSignature:
    """The signature `signature_text` wrote; ValueError for text that is not one (a row list is input)."""
    try:
        data = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise ValueError("not a perceptual signature (base64 expected)") from None
    detail_at = SIGNATURE_BYTES - 1
    if len(data) != SIGNATURE_BYTES or data[detail_at] > (THUMBNAIL_SIDE // DETAIL_BLOCK) ** 2:
        raise ValueError(f"not a perceptual signature ({SIGNATURE_BYTES} bytes expected, detail at most 16)")
    structure_at = HASH_BITS // 8
    colour_at = structure_at + STRUCTURE_BYTES
    return ImageSignature(int.from_bytes(data[:structure_at], "big"), data[structure_at:colour_at],
                          data[colour_at:detail_at], data[detail_at])


def signature_of_image(image) -> ImageSignature | None:
    """The signature of a loaded PIL image; None for a mode it cannot take (the image is still written: a
    missing signature only means it is not compared)."""
    try:
        return _signature(image)
    except Exception:
        return None


def _as_rgb_or_grey(image):
    if image.mode in ("L", "RGB"):
        return image
    if image.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        return image.convert("L")
    if "A" in image.getbands() or image.mode == "P":
        return image.convert("RGBA").convert("RGB")
    return image.convert("RGB")


def _signature(image) -> ImageSignature:
    import numpy as np
    import scipy.fftpack
    from PIL import Image

    factor = min(image.size) // MIN_REDUCED_SIDE
    if factor >= 2:
        image = image.reduce(factor)
    image = _as_rgb_or_grey(image)
    grey = image.convert("L") if image.mode != "L" else image

    thumbnail = np.asarray(grey.resize((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.LANCZOS), dtype=np.float64)
    dct = scipy.fftpack.dct(scipy.fftpack.dct(thumbnail, axis=0), axis=1)
    low = dct[:LOW_FREQUENCIES, :LOW_FREQUENCIES].flatten()
    phash = int.from_bytes(np.packbits(low > np.median(low)).tobytes(), "big")  # first coefficient: highest bit
    coefficients = low[1:]
    largest = np.abs(coefficients).max()
    scaled = coefficients * (STRUCTURE_SCALE / largest) if largest > 0 else coefficients
    structure = np.rint(scaled).astype(np.int8).tobytes()

    blocks = thumbnail.reshape(THUMBNAIL_SIDE // DETAIL_BLOCK, DETAIL_BLOCK, -1, DETAIL_BLOCK).swapaxes(1, 2)
    detail = int((blocks.reshape(-1, DETAIL_BLOCK * DETAIL_BLOCK).std(axis=1) >= DETAIL_MIN_STD).sum())

    if image.mode == "RGB":
        cells = np.asarray(image.resize((COLOUR_CELLS, COLOUR_CELLS), Image.BOX), dtype=np.float64).reshape(-1, 3)
        red_green = cells[:, 0] - cells[:, 1]
        yellow_blue = (cells[:, 0] + cells[:, 1]) / 2 - cells[:, 2]
        opponent = np.stack([red_green, yellow_blue], axis=1) / (thumbnail.mean() + 1.0)
    else:
        opponent = np.zeros((COLOUR_CELLS * COLOUR_CELLS, 2))
    colour = np.clip(np.rint(opponent * COLOUR_SCALE), -127, 127).astype(np.int8).tobytes()
    return ImageSignature(phash, structure, colour, detail)


def signature_of_bytes(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS) -> ImageSignature | None:
    """The signature of an encoded image from a reduced decode; None when the bytes do not decode or hold more
    than `max_pixels` (opened through the writer's decompression-bomb guard, so no pixel of such an image is
    allocated here; the writer reports it on its own terms)."""
    try:
        with open_image(data, max_pixels) as image:
            if image.format in ("JPEG", "MPO"):
                width, height = image.size
                scale = max(1, min(width, height) // MIN_REDUCED_SIDE)
                image.draft("RGB" if image.mode != "L" else "L", (max(1, width // scale), max(1, height // scale)))
            image.load()
            return _signature(image)
    except Exception:
        return None
