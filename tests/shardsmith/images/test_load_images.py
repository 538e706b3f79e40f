"""shardsmith/images/load_images.py: inspect_image against real images made here with Pillow (and a few made byte by
byte), checked against TensorFlow's own decoder; read_input_file; ordered_bounded_map.

The key contract: for every image inspect_image accepts, tf.io.decode_image(data, expand_animations=False) has
exactly the (height, width, channels) it reports.
"""

from __future__ import annotations

import io
import random
import struct
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from PIL import Image

from shardsmith.images.load_images import (
    ImageInfo,
    ImageRejected,
    inspect_image,
    ordered_bounded_map,
    read_input_file,
)
from shardsmith.settings import DEFAULT_MAX_PIXELS

WIDTH, HEIGHT = 37, 23  # odd sizes: BMP row padding, no accidental width/height swap


def _noise(mode: str = "RGB", size: tuple[int, int] = (WIDTH, HEIGHT), seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    channels = 4 if mode in ("RGBA", "LA", "PA") else 3
    pixels = rng.integers(0, 256, (size[1], size[0], channels), dtype=np.uint8)
    image = Image.fromarray(pixels, "RGBA" if channels == 4 else "RGB")
    return image.convert(mode)


def _save(image: Image.Image, fmt: str, **kwargs) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **kwargs)
    return out.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _raw_png(bit_depth: int, color_type: int, samples: int, width=WIDTH, height=HEIGHT) -> bytes:
    """A PNG written byte by byte, for bit depths and colour types Pillow will not write."""
    row_bytes = (width * samples * bit_depth + 7) // 8
    rng = random.Random(bit_depth * 10 + color_type)
    raw = b"".join(b"\0" + rng.randbytes(row_bytes) for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(raw))
            + _png_chunk(b"IEND", b""))


def _bomb_png() -> bytes:
    """A valid PNG header claiming 100,000 x 100,000 pixels with a tiny body: decoding it would need 10 GB."""
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header)
            + _png_chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + _png_chunk(b"IEND", b""))


def _gif_color_table_size(flags: int) -> int:
    return 3 << ((flags & 7) + 1) if flags & 0x80 else 0


def _gif(frame_sizes: list[tuple[int, int]], screen: tuple[int, int]) -> bytes:
    """A GIF whose frames have the given (height, width) each, on a logical screen of (height, width): the
    frames of separate Pillow GIFs (one shared palette) spliced after the first one's header."""
    palette_source = _noise("RGB", (16, 16)).convert("P", palette=Image.Palette.WEB)
    parts = []
    for i, (h, w) in enumerate(frame_sizes):
        frame = _noise("RGB", (w, h), seed=i).quantize(palette=palette_source)
        parts.append(_save(frame, "GIF", optimize=False))
    data = bytearray(parts[0][:-1])  # without the trailer
    struct.pack_into("<HH", data, 6, screen[1], screen[0])
    for part in parts[1:]:
        start = 13 + _gif_color_table_size(part[10])
        data += part[part.index(b"\x2c", start):-1]
    return bytes(data) + b"\x3b"


def _bmp_core_header() -> bytes:
    """An OS/2 BMP (12-byte BITMAPCOREHEADER, 16-bit width and height), 24-bit."""
    row = (WIDTH * 3 + 3) & ~3
    pixels = random.Random(1).randbytes(row * HEIGHT)
    offset = 14 + 12
    return (b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset)
            + struct.pack("<IHHHH", 12, WIDTH, HEIGHT, 1, 24) + pixels)


def _bmp_rle8_grey() -> bytes:
    """An 8-bit RLE-compressed BMP with a grey palette (Pillow: mode L)."""
    palette = b"".join(bytes([i, i, i, 0]) for i in range(256))
    rle = b"".join(bytes([WIDTH, (y * 7) % 256]) + b"\0\0" for y in range(HEIGHT)) + b"\0\1"
    offset = 14 + 40 + len(palette)
    header = struct.pack("<IiiHHIIiiII", 40, WIDTH, HEIGHT, 1, 8, 1, len(rle), 2835, 2835, 256, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(rle), 0, 0, offset) + header + palette + rle


def _bmp_bitfields_32() -> bytes:
    """A 32-bit BI_BITFIELDS BMP (Pillow: mode RGB)."""
    pixels = random.Random(2).randbytes(WIDTH * HEIGHT * 4)
    masks = struct.pack("<III", 0x00FF0000, 0x0000FF00, 0x000000FF)
    offset = 14 + 40 + 12
    header = struct.pack("<IiiHHIIiiII", 40, WIDTH, HEIGHT, 1, 32, 3, len(pixels), 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", offset + len(pixels), 0, 0, offset) + header + masks + pixels


def _transparent_rgba() -> Image.Image:
    image = _noise("RGBA")
    assert image.getextrema()[3][0] < 255  # really has transparency: Pillow must not drop the alpha
    return image


def _animated_webp_rgba() -> bytes:
    first = _transparent_rgba()
    return _save(first, "WEBP", save_all=True, append_images=[first.rotate(90), first], duration=50)


def _top_down_bmp() -> bytes:
    data = bytearray(_save(_noise("RGB"), "BMP"))
    struct.pack_into("<i", data, 22, -HEIGHT)
    return bytes(data)


# name -> (bytes, expected (format, height, width, channels)).
ACCEPTED = {
    "jpeg-rgb": (lambda: _save(_noise("RGB"), "JPEG", quality=90), ("jpeg", HEIGHT, WIDTH, 3)),
    "jpeg-progressive": (lambda: _save(_noise("RGB"), "JPEG", progressive=True), ("jpeg", HEIGHT, WIDTH, 3)),
    "jpeg-grey": (lambda: _save(_noise("L"), "JPEG"), ("jpeg", HEIGHT, WIDTH, 1)),
    "jpeg-cmyk": (lambda: _save(_noise("CMYK"), "JPEG"), ("jpeg", HEIGHT, WIDTH, 3)),
    "png-1bit": (lambda: _save(_noise("1"), "PNG"), ("png", HEIGHT, WIDTH, 1)),
    "png-grey": (lambda: _save(_noise("L"), "PNG"), ("png", HEIGHT, WIDTH, 1)),
    "png-grey-trns": (lambda: _save(_noise("L"), "PNG", transparency=5), ("png", HEIGHT, WIDTH, 1)),
    "png-grey-2bit": (lambda: _raw_png(2, 0, 1), ("png", HEIGHT, WIDTH, 1)),
    "png-grey-16bit": (lambda: _raw_png(16, 0, 1), ("png", HEIGHT, WIDTH, 1)),
    "png-grey-16bit-pillow": (
        lambda: _save(Image.fromarray((np.arange(WIDTH * HEIGHT).reshape(HEIGHT, WIDTH) * 50)
                                      .astype(np.uint16)), "PNG"),
        ("png", HEIGHT, WIDTH, 1)),
    "png-la": (lambda: _save(_noise("LA"), "PNG"), ("png", HEIGHT, WIDTH, 2)),
    "png-la-16bit": (lambda: _raw_png(16, 4, 2), ("png", HEIGHT, WIDTH, 2)),  # Pillow says RGBA
    "png-rgb": (lambda: _save(_noise("RGB"), "PNG"), ("png", HEIGHT, WIDTH, 3)),
    "png-rgb-trns": (lambda: _save(_noise("RGB"), "PNG", transparency=(1, 2, 3)), ("png", HEIGHT, WIDTH, 3)),
    "png-rgb-16bit": (lambda: _raw_png(16, 2, 3), ("png", HEIGHT, WIDTH, 3)),
    "png-rgba": (lambda: _save(_transparent_rgba(), "PNG"), ("png", HEIGHT, WIDTH, 4)),
    "png-rgba-16bit": (lambda: _raw_png(16, 6, 4), ("png", HEIGHT, WIDTH, 4)),
    "png-palette": (lambda: _save(_noise("P"), "PNG"), ("png", HEIGHT, WIDTH, 3)),
    "png-palette-4bit": (
        lambda: _save(_noise("RGB").convert("P", palette=Image.Palette.ADAPTIVE, colors=16), "PNG", bits=4),
        ("png", HEIGHT, WIDTH, 3)),
    "png-palette-transparent": (lambda: _save(_noise("P"), "PNG", transparency=0), ("png", HEIGHT, WIDTH, 4)),
    "png-palette-alpha-table": (
        lambda: _save(_noise("P"), "PNG", transparency=bytes(range(256))), ("png", HEIGHT, WIDTH, 4)),
    "png-animated": (
        lambda: _save(_noise("RGB"), "PNG", save_all=True, append_images=[_noise("RGB", seed=1)]),
        ("png", HEIGHT, WIDTH, 3)),
    "gif": (lambda: _save(_noise("RGB"), "GIF"), ("gif", HEIGHT, WIDTH, 3)),
    "gif-grey": (lambda: _save(_noise("L"), "GIF"), ("gif", HEIGHT, WIDTH, 3)),
    "gif-transparent": (lambda: _save(_noise("P"), "GIF", transparency=0), ("gif", HEIGHT, WIDTH, 3)),
    "gif-animated": (
        lambda: _save(_noise("P"), "GIF", save_all=True, append_images=[_noise("P", seed=s) for s in (1, 2)]),
        ("gif", HEIGHT, WIDTH, 3)),
    # TensorFlow sizes a GIF by its largest frame, not by the logical screen that Pillow reports.
    "gif-frames-smaller-than-screen": (lambda: _gif([(10, 12), (11, 9)], (HEIGHT, WIDTH)),
                                       ("gif", 11, 12, 3)),
    "gif-second-frame-larger": (lambda: _gif([(10, 12), (HEIGHT, WIDTH)], (10, 12)),
                                ("gif", HEIGHT, WIDTH, 3)),
    "bmp-24": (lambda: _save(_noise("RGB"), "BMP"), ("bmp", HEIGHT, WIDTH, 3)),
    "bmp-32": (lambda: _save(_noise("RGBA"), "BMP"), ("bmp", HEIGHT, WIDTH, 4)),  # Pillow says RGB
    "bmp-32-bitfields": (_bmp_bitfields_32, ("bmp", HEIGHT, WIDTH, 4)),
    "bmp-8-grey": (lambda: _save(_noise("L"), "BMP"), ("bmp", HEIGHT, WIDTH, 1)),
    "bmp-top-down": (_top_down_bmp, ("bmp", HEIGHT, WIDTH, 3)),
    "webp-rgb": (lambda: _save(_noise("RGB"), "WEBP"), ("webp", HEIGHT, WIDTH, 3)),
    "webp-rgb-lossless": (lambda: _save(_noise("RGB"), "WEBP", lossless=True), ("webp", HEIGHT, WIDTH, 3)),
    "webp-rgba": (lambda: _save(_transparent_rgba(), "WEBP"), ("webp", HEIGHT, WIDTH, 4)),
    "webp-rgba-lossless": (lambda: _save(_transparent_rgba(), "WEBP", lossless=True),
                           ("webp", HEIGHT, WIDTH, 4)),
    "webp-opaque-rgba": (lambda: _save(_noise("RGBA").convert("RGB").convert("RGBA"), "WEBP"),
                         ("webp", HEIGHT, WIDTH, 3)),
    "webp-animated-rgba": (_animated_webp_rgba, ("webp", HEIGHT, WIDTH, 4)),
}


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_accepted_image_decodes_to_the_reported_shape(name, tf):
    make, (fmt, height, width, channels) = ACCEPTED[name]
    data = make()
    info = inspect_image(data, validate="decode")
    assert info == ImageInfo(fmt, height, width, channels)
    decoded = tf.io.decode_image(data, expand_animations=False)
    assert tuple(decoded.shape) == (info.height, info.width, info.channels)
    assert decoded.dtype == tf.uint8
    # Header-only validation reports the same shape.
    assert inspect_image(data, validate="header") == info


def _jpeg(mode: str, **save) -> bytes:
    out = io.BytesIO()
    Image.new(mode, (WIDTH, HEIGHT), 120 if mode == "L" else (10, 200, 30, 5)[: len(mode)]).save(out, "JPEG", **save)
    return out.getvalue()


@pytest.mark.parametrize("mode, save, expected", [
    ("RGB", {}, (HEIGHT, WIDTH, 3)),
    ("L", {}, (HEIGHT, WIDTH, 1)),
    ("RGB", {"progressive": True}, (HEIGHT, WIDTH, 3)),
    ("RGB", {"exif": b"Exif\x00\x00" + b"\x00" * 64, "comment": b"x" * 300}, (HEIGHT, WIDTH, 3)),
    ("CMYK", {}, None),  # four components: Pillow's rules decide
])
def test_the_jpeg_header_fast_path_agrees_with_pillow_and_tensorflow(mode, save, expected, tf):
    from shardsmith.images.load_images import _plain_jpeg_shape

    data = _jpeg(mode, **save)
    assert _plain_jpeg_shape(data) == expected
    header = inspect_image(data, validate="header")
    assert header == inspect_image(data, validate="decode")  # the decode path always goes through Pillow
    assert tuple(tf.io.decode_image(data, expand_animations=False).shape) == (header.height, header.width,
                                                                             header.channels)


def test_the_jpeg_header_fast_path_leaves_anything_unusual_to_pillow():
    from shardsmith.images.load_images import _plain_jpeg_shape

    data = _jpeg("RGB")
    assert _plain_jpeg_shape(b"GIF89a" + data[6:]) is None
    assert _plain_jpeg_shape(data[:4]) is None
    broken_chain = data[:2] + b"\x00" + data[3:]
    assert _plain_jpeg_shape(broken_chain) is None
    sof = data.index(b"\xff\xc0")
    twelve_bit = data[: sof + 4] + b"\x0c" + data[sof + 5:]
    assert _plain_jpeg_shape(twelve_bit) is None
    zero_height = data[: sof + 5] + b"\x00\x00" + data[sof + 7:]
    with pytest.raises(ImageRejected):
        inspect_image(zero_height, validate="header")


def test_mpo_counts_as_jpeg(tf):
    data = _save(_noise("RGB"), "MPO", save_all=True, append_images=[_noise("RGB", seed=1)])
    assert Image.open(io.BytesIO(data)).format == "MPO"
    info = inspect_image(data)
    assert info == ImageInfo("jpeg", HEIGHT, WIDTH, 3)
    assert tuple(tf.io.decode_image(data, expand_animations=False).shape) == (HEIGHT, WIDTH, 3)


def _rejection(data: bytes, **kwargs) -> ImageRejected:
    with pytest.raises(ImageRejected) as caught:
        inspect_image(data, **kwargs)
    return caught.value


def test_tiff_is_rejected(tf):
    data = _save(_noise("RGB"), "TIFF")
    error = _rejection(data)
    assert "TIFF" in error.reason and "TensorFlow" in error.reason
    with pytest.raises(tf.errors.InvalidArgumentError):
        tf.io.decode_image(data, expand_animations=False)


@pytest.mark.parametrize("data", [b"split,image_uri,label\ntrain,a.jpg,cat\n", b"", b"\x00" * 64],
                         ids=["text", "empty", "zeros"])
def test_bytes_that_are_no_image_are_rejected(data):
    assert "not an image" in _rejection(data).reason


def test_truncated_jpeg_is_rejected_when_decoding_but_passes_a_header_check():
    whole = _save(_noise("RGB", (200, 150)), "JPEG", quality=95)
    truncated = whole[: len(whole) // 2]
    error = _rejection(truncated, validate="decode")
    assert "truncated or corrupt" in error.reason
    assert error.detail  # says what Pillow saw
    # Header mode parses the header only: that is its documented blind spot.
    assert inspect_image(truncated, validate="header") == ImageInfo("jpeg", 150, 200, 3)


def test_decompression_bomb_is_rejected_before_any_decoding():
    started = time.perf_counter()
    error = _rejection(_bomb_png(), validate="decode")
    assert "decompression bomb" in error.reason
    assert "100000x100000" in error.detail
    # Decoding 10 G pixels would take minutes (and 10 GB): the guard ran first.
    assert time.perf_counter() - started < 2


def test_max_pixels_is_a_strict_upper_bound():
    data = _save(_noise("RGB"), "PNG")
    pixels = WIDTH * HEIGHT
    assert inspect_image(data, max_pixels=pixels).height == HEIGHT
    error = _rejection(data, max_pixels=pixels - 1)
    assert "decompression bomb" in error.reason
    assert DEFAULT_MAX_PIXELS > 80_000_000


def test_gif_frame_extent_counts_against_max_pixels():
    # The logical screen is 10x12, but a frame (and TensorFlow's output) is 23x37.
    data = _gif([(10, 12), (HEIGHT, WIDTH)], (10, 12))
    assert "decompression bomb" in _rejection(data, max_pixels=200).reason


@pytest.mark.parametrize(
    "name, make, words",
    [
        ("bmp-1bit", lambda: _save(_noise("1"), "BMP"), "1-bit BMP"),
        ("bmp-os2-core-header", _bmp_core_header, "OS/2 BMP"),
        ("bmp-rle8", _bmp_rle8_grey, "compressed"),
        ("bmp-trailing-bytes", lambda: _save(_noise("RGB"), "BMP") + b"\0\0", "file size"),
    ],
)
def test_bmps_tensorflow_cannot_decode_are_rejected(name, make, words, tf):
    data = make()
    error = _rejection(data, validate="header")
    assert words in error.reason
    with pytest.raises(tf.errors.InvalidArgumentError):  # why: TensorFlow fails on every one of them
        tf.io.decode_image(data, expand_animations=False)


def test_colour_palette_bmp_is_rejected(tf):
    data = _save(_noise("P"), "BMP")
    assert "8-bit BMP" in _rejection(data, validate="header").reason
    # Why: TensorFlow returns the palette indices as one grey channel, not the colours.
    decoded = tf.io.decode_image(data, expand_animations=False).numpy()
    with Image.open(io.BytesIO(data)) as image:
        indices = np.asarray(image)
    assert decoded.shape == (HEIGHT, WIDTH, 1)
    assert (decoded[..., 0] == indices).all()


def test_animated_webp_without_alpha_is_rejected():
    # Never handed to TensorFlow here: TF 2.21's decoder corrupts the heap on such a file; the process dies.
    first = _noise("RGB")
    data = _save(first, "WEBP", save_all=True, append_images=[first.rotate(90)], duration=50)
    with Image.open(io.BytesIO(data)) as image:
        assert (image.mode, image.n_frames) == ("RGB", 2)
    assert "animated WebP" in _rejection(data, validate="header").reason


def test_rejection_reasons_are_single_line():
    for data in (_bomb_png(), _save(_noise("RGB"), "TIFF"), b"hello"):
        error = _rejection(data)
        assert "\n" not in error.reason and "\n" not in error.detail


# read_input_file ------------------------------------------------------------------------------------------------


def test_read_bytes_reads_whole_files_and_refuses_larger_than_the_limit(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"x" * 100)
    assert read_input_file(str(path), 100) == b"x" * 100
    error = pytest.raises(ImageRejected, read_input_file, str(path), 99).value
    assert "larger than --max_image_bytes" in error.reason


@pytest.mark.parametrize("expected_size", [-1, 0, 1, 99_999, 100_000, 100_001, 3 << 20])
def test_read_bytes_reads_the_file_as_it_is_whatever_size_was_looked_up(tmp_path, expected_size):
    # A size looked up before the read is only a hint for the first read: a file that grew or shrank since is
    # read whole, and one of more than a read chunk (1 MiB) whose size is not known is read chunk by chunk.
    for size in (100_000, (1 << 20) + 7, 3 << 20):
        path = tmp_path / f"{size}.bin"
        payload = random.Random(size).randbytes(size)
        path.write_bytes(payload)
        assert read_input_file(str(path), 64 << 20, expected_size) == payload
        assert read_input_file(str(path), size, expected_size) == payload
        error = pytest.raises(ImageRejected, read_input_file, str(path), size - 1, expected_size).value
        assert "larger than --max_image_bytes" in error.reason


def test_read_bytes_never_decompresses(tmp_path):
    import gzip

    path = tmp_path / "a.jpg.gz"
    payload = gzip.compress(b"y" * 1000)
    path.write_bytes(payload)
    assert read_input_file(str(path), 10_000) == payload


# ordered_bounded_map ---------------------------------------------------------------------------------------


def test_ordered_bounded_map_keeps_input_order_under_random_delays():
    delays = random.Random(3).choices([0.0, 0.001, 0.004], k=60)

    def slow_square(i: int) -> int:
        time.sleep(delays[i])
        return i * i

    with ThreadPoolExecutor(8) as pool:
        assert list(ordered_bounded_map(slow_square, range(60), pool, 5)) == [i * i for i in range(60)]


@pytest.mark.parametrize("max_in_flight", [1, 3])
def test_ordered_bounded_map_holds_at_most_max_in_flight(max_in_flight):
    lock = threading.Lock()
    started = [0]
    peak = [0]
    consumed = 0

    def record(i: int) -> int:
        with lock:
            started[0] += 1
        return i

    with ThreadPoolExecutor(8) as pool:
        results = []
        for value in ordered_bounded_map(record, range(40), pool, max_in_flight):
            time.sleep(0.001)  # a slow consumer: the producer must wait for it
            with lock:
                peak[0] = max(peak[0], started[0] - consumed)
            consumed += 1
            results.append(value)
    assert results == list(range(40))
    assert 1 <= peak[0] <= max_in_flight


def test_ordered_bounded_map_is_lazy_and_passes_errors_through():
    calls = []

    def fn(i: int) -> int:
        calls.append(i)
        if i == 2:
            raise ValueError("boom")
        return i

    with ThreadPoolExecutor(2) as pool:
        mapped = ordered_bounded_map(fn, range(100), pool, 2)
        assert calls == []  # nothing starts before the first value is asked for
        assert next(mapped) == 0
        assert next(mapped) == 1
        with pytest.raises(ValueError, match="boom"):
            next(mapped)
    assert len(calls) <= 5  # the window, not the whole input
    with ThreadPoolExecutor(1) as pool:
        assert list(ordered_bounded_map(fn, [], pool, 3)) == []
