"""Read image bytes and validate them, so that every written record decodes with
`tf.io.decode_image(..., expand_animations=False)` to exactly (height, width, channels).

`header` parses the header only (about 22 us); `decode` also decodes the image data, which is the only check
that catches a truncated file. A JPEG is decoded at 1/8 scale (libjpeg's DCT scaling, Pillow's `draft`): every
entropy-coded block is still read and Huffman-decoded, so truncated and corrupt data fail exactly as in a full
decode (tests/shardsmith/images/test_reduced_decode.py and tests/benchmarks/decode_agreement.py compare the verdicts on
damaged files), while the inverse DCT, upsampling and colour conversion run on 1/64 of the pixels: about half the CPU of
a full decode of a 0.4 MP photo. Other formats have no such shortcut and are decoded in full.

The channel count is what TensorFlow's decoder returns, which differs from Pillow's mode in places (GIF is
always RGB; a palette PNG with transparency is RGBA; a 16-bit grey+alpha PNG has 2 channels where Pillow says
RGBA; a 32-bit BMP is RGBA even where Pillow says RGB), and a GIF's size is its largest frame, not the logical
screen Pillow reports: the rules below were measured with TensorFlow 2.21 and are checked by
tests/shardsmith/images/test_load_images.py.

Reads may run in a thread pool with at most `max_in_flight` images held at once, and results come back in
input order, so memory is bounded by that window and not by the shard or the dataset. This module does not
import Beam or TensorFlow: the shard writer processes import it.
"""

from __future__ import annotations

import io
import struct
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from shardsmith import storage
from shardsmith.settings import DEFAULT_MAX_PIXELS
from shardsmith.storage.local_files import (
    READ_CHUNK_BYTES,
    NotARegularFile,
    OutsideAllowedPrefixes,
    read_regular_file,
    read_to_limit,
)

# libjpeg's smallest DCT scale: 1/8 in each dimension.
JPEG_VALIDATION_SCALE = 8

# (Pillow format, Pillow mode) -> channels from tf.io.decode_image; GIF, PNG and BMP are handled apart.
_CHANNELS = {
    ("JPEG", "L"): 1, ("JPEG", "RGB"): 3, ("JPEG", "CMYK"): 3,
    ("WEBP", "RGB"): 3, ("WEBP", "RGBA"): 4,
}
# PNG colour type (IHDR) -> channels from tf.io.decode_image; palette (3) is 3, or 4 with a tRNS chunk.
_PNG_CHANNELS_BY_COLOR_TYPE = {0: 1, 2: 3, 4: 2, 6: 4}
_FORMAT_NAMES = {"JPEG": "jpeg", "MPO": "jpeg", "PNG": "png", "GIF": "gif", "BMP": "bmp", "WEBP": "webp"}
_BMP_CHANNELS_BY_BITS = {24: 3, 32: 4}


@dataclass(frozen=True)
class ImageInfo:
    format: str  # jpeg | png | gif | bmp | webp
    height: int
    width: int
    channels: int


class ImageRejected(Exception):
    """An image that must not become a record; `reason` is for people, `detail` says what was seen."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def inspect_image(data: bytes, validate: str = "decode", max_pixels: int = DEFAULT_MAX_PIXELS,
                  jpeg_scale: int = JPEG_VALIDATION_SCALE, min_decoded_side: int = 1,
                  on_pixels: Callable[[object], None] | None = None) -> ImageInfo:
    """Returns the image's format and the shape TensorFlow will decode it to, or raises ImageRejected.
    `jpeg_scale` is the DCT scale of a JPEG's validating decode (1: full size; 2, 4 or 8: reduced), lowered so
    that the decoded image keeps at least `min_decoded_side` pixels on its shorter side.
    `on_pixels`, if given, is called with the decoded PIL image (validate decode only), which it must not keep."""
    if validate == "header":
        plain = _plain_jpeg_shape(data)
        if plain is not None and 0 < plain[0] * plain[1] <= max_pixels:
            return ImageInfo("jpeg", *plain)
    with open_image(data, max_pixels) as image:
        width, height = image.size
        fmt = _FORMAT_NAMES.get(image.format or "")
        if fmt is None:
            raise ImageRejected(f"{image.format} images cannot be decoded by TensorFlow",
                                "supported: JPEG, PNG, GIF, BMP, WebP")
        if fmt == "gif":
            height, width = _gif_extent(data)
        if width == 0 or height == 0:
            raise ImageRejected("image has zero width or height")
        channels = _channels(image, data)
        if validate == "decode":
            scale = min(jpeg_scale, max(1, min(width, height) // min_decoded_side))
            if image.format == "JPEG" and scale > 1:
                image.draft(None, (max(1, width // scale), max(1, height // scale)))
            try:
                image.load()
            except Exception as e:
                raise ImageRejected("image data is truncated or corrupt", _one_line(e)) from None
            if on_pixels is not None:
                on_pixels(image)
    return ImageInfo(fmt, height, width, channels)


def check_min_side(info: ImageInfo, min_side: int) -> None:
    """ImageRejected when the image's shorter side is below `min_side` pixels (--min_side; 0: any size). The
    reason is the same for every image (errors are counted by reason); the detail gives this one's size."""
    if min(info.width, info.height) < min_side:
        raise ImageRejected(f"too small: shorter side below --min_side {min_side}",
                            f"{info.width}x{info.height} pixels")


def open_image(data: bytes, max_pixels: int = DEFAULT_MAX_PIXELS):
    """Pillow's image of `data`, opened (header parsed, no pixel decoded) and within `max_pixels` (a GIF by its
    largest frame, as TensorFlow decodes it); raises ImageRejected otherwise. Every decode in shardsmith (the
    writer's validation and re-encoding, the perceptual hash of `--near_duplicates`) opens images here, so a
    decompression bomb is an error row before any pixel is allocated, whichever pass meets it first."""
    from PIL import Image, UnidentifiedImageError

    # Our own limit below applies before any pixel is allocated; Pillow's global one would warn or raise from
    # inside open() in ways that depend on process-wide warning filters.
    Image.MAX_IMAGE_PIXELS = None
    try:
        image = Image.open(io.BytesIO(data))
    except UnidentifiedImageError:
        raise ImageRejected("not an image file (no known image format)") from None
    except Exception as e:
        raise ImageRejected("image header cannot be parsed", _one_line(e)) from None
    extents = [image.size] + ([_gif_extent(data)[::-1]] if image.format == "GIF" else [])
    for width, height in extents:
        if width * height > max_pixels:
            image.close()
            raise ImageRejected("image has too many pixels (decompression bomb guard)",
                                f"{width}x{height} > {max_pixels} pixels")
    return image


# Start-of-frame markers of 8-bit Huffman JPEGs: baseline, extended sequential, progressive.
_PLAIN_SOF_MARKERS = (0xC0, 0xC1, 0xC2)
JPEG_START = b"\xff\xd8\xff"  # the first bytes of every JPEG file: start-of-image and a marker's first byte
_JPEG_MARKERS_WITHOUT_LENGTH = frozenset([0x01, *range(0xD0, 0xD8)])


def _plain_jpeg_shape(data: bytes) -> tuple[int, int, int] | None:
    """(height, width, channels) of an 8-bit, 1- or 3-component Huffman JPEG, read from its start-of-frame
    segment (a few microseconds, where Pillow's open() takes about 45). None for anything else (other
    formats, CMYK, 12-bit, arithmetic coding, a damaged marker chain), which then goes through Pillow."""
    if not data.startswith(JPEG_START):
        return None
    pos, end = 2, len(data) - 4
    while pos < end:
        if data[pos] != 0xFF:
            return None
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in _JPEG_MARKERS_WITHOUT_LENGTH:
            pos += 2
            continue
        length = (data[pos + 2] << 8) | data[pos + 3]
        if marker in _PLAIN_SOF_MARKERS:
            if length < 8 or pos + 10 > len(data) or data[pos + 4] != 8:
                return None
            height, width = struct.unpack_from(">HH", data, pos + 5)
            components = data[pos + 9]
            return (height, width, components) if components in (1, 3) else None
        if marker >= 0xC0 and marker not in (0xC4, 0xCC) and marker < 0xD0 or marker in (0xD9, 0xDA):
            return None  # another frame type, or the scan began before any frame header
        pos += 2 + length
    return None


def _channels(image, data: bytes) -> int:
    if image.format == "GIF":
        return 3
    if image.format == "BMP":
        return _bmp_channels(image, data)
    if image.format == "PNG":
        return _png_channels(image, data)
    if image.format == "WEBP" and data[12:16] == b"VP8X" and len(data) > 20 and data[20] & 0x12 == 0x02:
        # VP8X flags: animation (0x02) without alpha (0x10). TF 2.21 sizes its buffer for 3 channels and
        # its animation decoder writes 4: heap corruption, the process dies.
        raise ImageRejected("animated WebP without alpha is not supported",
                            "TensorFlow 2.21's WebP decoder crashes on it")
    key = ("JPEG" if image.format == "MPO" else image.format, image.mode)
    if key not in _CHANNELS:
        raise ImageRejected(f"{image.format} image of mode {image.mode} is not supported",
                            "TensorFlow would decode it to an unexpected shape")
    return _CHANNELS[key]


def _png_channels(image, data: bytes) -> int:
    # From the IHDR colour type, not Pillow's mode: Pillow opens a 16-bit grey+alpha PNG as RGBA.
    if len(data) < 26 or data[12:16] != b"IHDR":
        raise ImageRejected("image header cannot be parsed", "the PNG does not start with an IHDR chunk")
    color_type = data[25]
    if color_type == 3:
        return 4 if "transparency" in image.info else 3
    if color_type not in _PNG_CHANNELS_BY_COLOR_TYPE:
        raise ImageRejected(f"PNG colour type {color_type} is not supported")
    return _PNG_CHANNELS_BY_COLOR_TYPE[color_type]


def _bmp_channels(image, data: bytes) -> int:
    """TensorFlow reads the pixel offset, width, height and bit count at the places a BITMAPINFOHEADER (or
    later) has them, takes the pixels as uncompressed rows, and needs the file to end right after them."""
    if len(data) < 34:
        raise ImageRejected("image header cannot be parsed", "BMP header is incomplete")
    pixel_offset, header_size = struct.unpack_from("<II", data, 10)
    if header_size < 40:
        raise ImageRejected("OS/2 BMP (12-byte header) is not supported",
                            "TensorFlow reads width, height and bit count where a BITMAPINFOHEADER has them")
    width, height, _planes, bits, compression = struct.unpack_from("<iiHHI", data, 18)
    if compression not in (0, 3):  # BI_RGB, BI_BITFIELDS
        raise ImageRejected("compressed (RLE) BMP is not supported",
                            "TensorFlow reads BMP pixels as raw rows")
    if bits == 8 and image.mode == "L":
        channels = 1
    elif bits in _BMP_CHANNELS_BY_BITS:
        channels = _BMP_CHANNELS_BY_BITS[bits]
    else:
        raise ImageRejected(f"{bits}-bit BMP ({image.mode}) is not supported",
                            "TensorFlow reads palette BMPs as indices, and cannot read 1-, 4- or 16-bit BMPs")
    expected = pixel_offset + (channels * width + 3) // 4 * 4 * abs(height)
    if len(data) != expected:
        raise ImageRejected("BMP file size does not match its header",
                            f"{len(data)} bytes; TensorFlow needs exactly {expected} (pixel offset + rows)")
    return channels


def _gif_extent(data: bytes) -> tuple[int, int]:
    """(height, width) that TensorFlow decodes a GIF to: the largest frame width and height over all frames,
    which differs from the logical screen size that Pillow reports when no frame covers the screen."""
    height = width = 0
    pos = 13 + _gif_color_table_size(data[10])
    try:
        while data[pos] != 0x3B:  # trailer
            if data[pos] == 0x2C:  # image descriptor: left, top, width, height, flags; table; LZW code size
                frame_width, frame_height, flags = struct.unpack_from("<HHB", data, pos + 5)
                width, height = max(width, frame_width), max(height, frame_height)
                pos += 11 + _gif_color_table_size(flags)
            elif data[pos] == 0x21:  # extension: introducer, label
                pos += 2
            else:
                break
            while data[pos]:  # data sub-blocks, up to the terminator
                pos += data[pos] + 1
            pos += 1
    except (IndexError, struct.error):
        pass  # truncated: the frames seen so far; decode-mode validation rejects truncated files
    return height, width


def _gif_color_table_size(flags: int) -> int:
    return 3 << ((flags & 7) + 1) if flags & 0x80 else 0


def _one_line(error: Exception) -> str:
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300]


def read_input_file(uri: str, max_bytes: int, expected_size: int = -1, allowed_prefixes: tuple[str, ...] = (),
                    what: str = "image") -> bytes:
    """All bytes of one input file (an image or a mask), at most `max_bytes`, through shardsmith.storage (local or
    gs://). Never decompresses.

    A local file is judged as opened, not by its path (shardsmith/storage/local_files.py): one that is not a regular
    file is rejected without a read (a named pipe never makes this wait), and with `allowed_prefixes` (the
    manifest's) one whose real path is under none of them is rejected as `what` "URI is outside
    --allowed_prefixes", whatever the path looked like when the manifest was read.

    `expected_size` (from the size lookup) sizes the first read: asking for max_bytes at once would make
    Python allocate a buffer of max_bytes (64 MiB by default) for every image, which costs more than the read."""
    first = min(expected_size + 1 if 0 <= expected_size < max_bytes else READ_CHUNK_BYTES, max_bytes + 1)
    try:
        if not storage.is_remote(uri):
            data = read_regular_file(uri, allowed_prefixes, first, max_bytes)
        else:
            with storage.open_read(uri) as f:
                data = read_to_limit(f.read, first, max_bytes)
    except NotARegularFile as e:
        raise ImageRejected("file is not a regular file" if what == "image" else f"{what} file is not a regular file",
                            e.kind) from None
    except OutsideAllowedPrefixes:
        raise ImageRejected(f"{what} URI is outside --allowed_prefixes", uri) from None
    if len(data) > max_bytes:
        raise ImageRejected("file is larger than --max_image_bytes", f"more than {max_bytes} bytes")
    return data


T = TypeVar("T")
R = TypeVar("R")


def ordered_bounded_map(
    fn: Callable[[T], R], items: Iterable[T], pool: ThreadPoolExecutor, max_in_flight: int
) -> Iterator[R]:
    """Yields fn(item) for each item in input order, with at most `max_in_flight` calls started and not yet
    consumed. Memory is bounded by that window, whatever the number of items."""
    window: deque = deque()
    for item in items:
        if len(window) >= max_in_flight:
            yield window.popleft().result()
        window.append(pool.submit(fn, item))
    while window:
        yield window.popleft().result()
