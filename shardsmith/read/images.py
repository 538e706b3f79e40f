"""Images of records read without TensorFlow: the bytes a record holds (or, with --image_mode path, points at)
and their pixels, optionally resized. Used by `shardsmith.torch` and `shardsmith.grain`.

`decode_pil` and `decode_image` decode with Pillow (a JPEG to be shrunk at reduced scale, Pillow's `draft`) and
resize with it. `decode_reduced` only decodes, as small as the target allows: a JPEG through libjpeg-turbo's
scaled decode (simplejpeg, in the torch and grain extras: about 1.2x Pillow's draft decode, at finer scales, n/8,
and none of Pillow's copies between image and array), anything else with Pillow; `shardsmith.torch` resizes its
result with torch, `decode_resized` (`shardsmith.grain`'s) with Pillow: the two agree within one level on every
pixel (tests/shardsmith/test_grain_decode.py).
"""

from __future__ import annotations

import io
from collections.abc import Sequence

from shardsmith.format.example import IMAGE, URI

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_SIMPLEJPEG_SPACES = {1: "GRAY", 3: "RGB", 4: "RGBA"}  # a JPEG's alpha, as Pillow gives it: opaque


def image_bytes(record: dict) -> bytes:
    """The encoded image of a record (a dict from `shardsmith.records`): its `image/encoded`, or with
    --image_mode path the file at its `image/uri` (local or gs://), which must still be there."""
    if record.get(IMAGE) is not None:
        return record[IMAGE]
    from shardsmith.images.load_images import read_input_file

    return read_input_file(record[URI].decode("utf-8"), 1 << 62)


def image_size(size: int | Sequence[int] | None) -> tuple[int, int] | None:
    """(height, width) of a size given as an int (a square), a pair, or None."""
    if size is None:
        return None
    if isinstance(size, int):
        return (size, size)
    height, width = size
    return (int(height), int(width))


def decode_pil(data: bytes, size: int | Sequence[int] | None = None, channels: int = 3, *, resize: bool = True):
    """The image in `data` as a Pillow image: its first frame (as `tf.io.decode_image(...,
    expand_animations=False)`), converted to `channels` (1 L, 3 RGB, 4 RGBA), and resized to `size`
    ((height, width), or an int for a square; bilinear, antialiased, aspect ratio not kept) when given
    (`resize=False`: only decoded as small as `size` allows).
    A JPEG to be shrunk is decoded at the smallest of 1/1, 1/2, 1/4 and 1/8 scale that still covers `size`
    (libjpeg's DCT scaling, Pillow's `draft`), then resized: a 0.4 MP photo resized to 224 decodes in about half
    the time, and its pixels differ from a full decode's resize by a few levels."""
    from PIL import Image

    if channels not in _MODES:
        raise ValueError(f"channels must be 1, 3 or 4, not {channels!r}")
    image = Image.open(io.BytesIO(data))
    image.seek(0)
    target = image_size(size)
    if target is not None and image.format == "JPEG":
        image.draft(_MODES[channels] if channels != 4 else None, (target[1], target[0]))
    image = image.convert(_MODES[channels])
    if resize and target is not None and (image.height, image.width) != target:
        image = image.resize((target[1], target[0]), Image.Resampling.BILINEAR)
    return image


def decode_reduced(data: bytes, size: tuple[int, int] | None = None, channels: int = 3):
    """The image in `data` as a numpy array, height x width x `channels` (1, 3, 4), uint8: a JPEG decoded at
    the smallest of libjpeg-turbo's scales (n/8) that still covers `size` ((height, width); None: full size),
    anything else (or a JPEG simplejpeg cannot read: CMYK, arithmetic-coded) in full by `decode_image`. Not
    resized: the caller resizes to `size`. Rejects what Pillow rejects, and damaged JPEGs Pillow would pass
    (simplejpeg's strict mode)."""
    if channels not in _MODES:
        raise ValueError(f"channels must be 1, 3 or 4, not {channels!r}")
    from shardsmith.images.load_images import JPEG_START

    if data.startswith(JPEG_START):
        try:
            import simplejpeg
        except ImportError:
            simplejpeg = None
        if simplejpeg is not None:
            height, width = size or (0, 0)
            try:
                image = simplejpeg.decode_jpeg(data, colorspace=_SIMPLEJPEG_SPACES[channels], min_height=height,
                                               min_width=width)
            except ValueError:
                image = None  # Pillow reads it, or says why not
            if image is not None:
                return image if image.ndim == 3 else image[:, :, None]
    return _array(decode_pil(data, size, channels, resize=False))


def decode_resized(data: bytes, size: tuple[int, int] | None = None, channels: int = 3):
    """`decode_reduced`, then resized to `size` ((height, width); None: as decoded) by Pillow's bilinear filter
    (antialiased when shrinking): a numpy array, height x width x `channels`, uint8. Within one level, on every
    pixel, of `shardsmith.torch`'s decode of the same bytes."""
    pixels = decode_reduced(data, size, channels)
    if size is None or pixels.shape[:2] == size:
        return pixels
    from PIL import Image

    image = Image.fromarray(pixels[:, :, 0] if channels == 1 else pixels, _MODES[channels])
    return _array(image.resize((size[1], size[0]), Image.Resampling.BILINEAR))


def _array(image):
    """A Pillow image as a writable numpy array, height x width x channels, uint8."""
    import numpy as np

    pixels = np.array(image, dtype=np.uint8)  # a copy: writable, as torch wants
    return pixels[:, :, None] if pixels.ndim == 2 else pixels


def decode_image(data: bytes, size: int | Sequence[int] | None = None, channels: int = 3):
    """`decode_pil` as a numpy array, height x width x channels, uint8."""
    return _array(decode_pil(data, size, channels))
