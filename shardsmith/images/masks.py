"""Segmentation class masks: one class id per pixel, stored as a single-channel PNG beside the image.

A mask is accepted when Pillow reads it, it has the image's height and width, and its pixels are class ids
(mode L, P whose palette indices are the ids, or 1). It is stored as an 8-bit greyscale PNG, so
`tf.io.decode_png(mask, channels=1)` returns the ids (a palette PNG would decode to its colours). A PNG that
is already greyscale is stored unchanged. No Beam, no TensorFlow: the shard writer processes import this.
"""

from __future__ import annotations

import io

from shardsmith.images.load_images import ImageRejected

MASK_FORMAT = "png"


def mask_png(data: bytes, height: int, width: int) -> bytes:
    """The mask to store for an image of `height` x `width`, or raises ImageRejected saying why not."""
    from PIL import Image, UnidentifiedImageError

    try:
        mask = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise ImageRejected("mask is not an image file") from None
    except Exception as e:
        raise ImageRejected("mask header cannot be parsed", str(e).splitlines()[0][:300] if str(e) else "") from None
    with mask:
        if mask.size != (width, height):
            raise ImageRejected("mask size differs from its image",
                                f"mask {mask.size[0]}x{mask.size[1]}, image {width}x{height} (width x height)")
        if mask.mode not in ("L", "P", "1"):
            raise ImageRejected("mask is not single-channel class ids",
                                f"mode {mask.mode}; expected greyscale (L) or palette (P) with ids 0..255")
        if mask.format == "PNG" and mask.mode == "L":
            return data
        try:
            mask.load()
        except Exception as e:
            raise ImageRejected("mask cannot be decoded", str(e).splitlines()[0][:300] if str(e) else "") from None
        if mask.mode == "P":
            ids = Image.frombytes("L", mask.size, mask.tobytes())  # the palette indices, not their colours
        else:
            ids = mask.convert("L").point(lambda v: 1 if v else 0) if mask.mode == "1" else mask
        out = io.BytesIO()
        ids.save(out, format="PNG", optimize=False)
        return out.getvalue()
