"""Images of records decoded inside a tf.data map, at the cost the output needs: `load()`'s decode step.

`decode_resized` decodes a JPEG that is to be shrunk at libjpeg's reduced scale (`decode_jpeg`'s `ratio`: the
DCT scaling averages each block, so the smaller decode is already low-passed), chosen per record from the height
and width the record stores (the build read them from the file's header: they are what a full decode gives):
1/2 when that still covers the target size in both dimensions, 1/4 and 1/8 only when they leave twice the target
(at 1/4 and 1/8 libjpeg also shrinks the colour planes to a few pixels a block, which shows at the target size
unless there are pixels to spare). "Covers" allows the decode to fall short by UPSCALE_SLACK, so that a 400x900
photo is decoded at 1/2 for 224x224. Then the resize: plain bilinear when the decode is
less than MAX_PLAIN_BILINEAR_FACTOR times the target in both dimensions (it still reaches every source pixel);
an area (box) filter when it is larger in a dimension, which reaches every pixel at any factor for a fraction of
the cost of an antialiased filter (which costs about as much as the whole decode); antialiased bilinear only
when a dimension grows and the other shrinks that much (a tiny panorama). Everything else is decoded in full by
`decode_image` and resized with antialiasing: other formats (PNG, GIF, BMP, WebP) and records without a stored
size.

Each record takes one branch of a `switch_case` of decodes, then one of a `switch_case` of resizes: small
branches, since a tf.data map walks every node of the branches not taken (one `switch_case` over 13
decode-and-resize branches cost 200 us a record more than one over 2, a sixth of the decode itself).

Guarantee (tests/shardsmith/read/test_load_decode.py): on JPEG, PNG, grayscale, RGBA, tiny and upscaled images the
pixels are within MAX_MEAN_LEVELS_FROM_REFERENCE mean absolute levels (0-255) of a full decode followed by an
antialiased resize of the same bytes, over a set of images, and within MAX_LEVELS_ONE_IMAGE on any one. A JPEG asked for
4 channels gets an opaque alpha channel (`decode_image` refuses it).
"""

from __future__ import annotations

JPEG_RATIOS = (1, 2, 4, 8)  # the reduced scales libjpeg decodes at (decode_jpeg's `ratio` attribute)
# The smallest decode a ratio may leave, in multiples of the target: 1/4 and 1/8 shrink the colour planes too far
# to be resized to just the target size (docs/performance.md, "Reading").
MIN_DECODE_OVER_TARGET = {2: 1.0, 4: 2.0, 8: 2.0}
# A decode this much short of the target still covers it: stretching it back costs 0.06 levels on average on
# photo crops at 224 (1.47 instead of 1.41 from the reference), against a full decode for one image in 11.
UPSCALE_SLACK = 0.15
MAX_PLAIN_BILINEAR_FACTOR = 2.0  # plain bilinear shrinks by less than this; beyond, it skips source pixels
RESIZES = ("bilinear", "area", "antialiased")
FULL_DECODE = len(JPEG_RATIOS)  # the decode of everything not decoded at reduced scale: decode_image's
# The tests' bounds on the mean absolute difference (levels 0-255) from a full decode + antialiased resize: over
# a set of images, and on one image (where the target is exactly the 1/2 decode in a dimension, the DCT scaling
# is sharper than the antialiasing filter).
MAX_MEAN_LEVELS_FROM_REFERENCE = 3.0
MAX_LEVELS_ONE_IMAGE = 5.0


def decode_plan(height, width, size: tuple[int, int]):
    """(decode, resize) for a JPEG of `height` x `width` (int64, -1 when unknown; any shape, elementwise, so a
    batch of records is planned at once): decoded at 1/JPEG_RATIOS[decode] and resized by RESIZES[resize] (see
    the module); FULL_DECODE and the antialiased resize when the size is unknown. `decode_planned` sends what is
    not a JPEG to FULL_DECODE whatever the plan."""
    import tensorflow as tf

    factors_h, factors_w = tf.cast(height, tf.float32) / size[0], tf.cast(width, tf.float32) / size[1]
    smaller, larger = tf.minimum(factors_h, factors_w), tf.maximum(factors_h, factors_w)
    index = tf.add_n([tf.cast(smaller >= ratio * need * (1 - UPSCALE_SLACK), tf.int32)
                      for ratio, need in MIN_DECODE_OVER_TARGET.items()])
    ratio = tf.cast(tf.gather(JPEG_RATIOS, index), tf.float32)
    grows = smaller / ratio < 1 - UPSCALE_SLACK
    far = larger / ratio >= MAX_PLAIN_BILINEAR_FACTOR
    resize = tf.where(grows, tf.where(far, 2, 0), tf.where(far, 1, 0))
    known = smaller > 0
    return tf.where(known, index, FULL_DECODE), tf.where(known, resize, RESIZES.index("antialiased"))


def plan_for(encoded, plan):
    """`plan` (from decode_plan) for the image in `encoded`: as it is for a JPEG, a full decode and antialiased
    resize for anything else."""
    import tensorflow as tf

    jpeg = tf.io.is_jpeg(encoded)
    return tf.where(jpeg, plan[0], FULL_DECODE), tf.where(jpeg, plan[1], RESIZES.index("antialiased"))


def decode_full(encoded, channels: int):
    """Every pixel of the image in `encoded` (its first frame), `channels` as `decode_image` gives them."""
    import tensorflow as tf

    return tf.io.decode_image(encoded, channels=channels, expand_animations=False)


def _resized(image, size: tuple[int, int], resize: str):
    import tensorflow as tf

    if resize == "area":
        return tf.image.resize(image, size, method="area")
    return tf.image.resize(image, size, antialias=resize == "antialiased")


def _jpeg_reduced(encoded, ratio: int, channels: int):
    import tensorflow as tf

    image = tf.io.decode_jpeg(encoded, channels=3 if channels == 4 else channels, ratio=ratio)
    if channels == 4:  # what decode_image gives a JPEG asked for 4 channels: opaque alpha
        alpha = tf.fill(tf.concat([tf.shape(image)[:2], [1]], 0), tf.constant(255, tf.uint8))
        image = tf.concat([image, alpha], axis=-1)
    return image


def decode_resized(encoded, height, width, size: tuple[int, int], channels: int):
    """The image in `encoded` at `size` (height, width), float32 in 0..255, `channels` 1, 3 or 4 (0: as
    stored); `height`, `width`: the stored size (-1 when the record has none). See the module for how.
    Rejects what `decode_image` rejects."""
    return decode_planned(encoded, decode_plan(height, width, size), size, channels)


def decode_planned(encoded, plan, size: tuple[int, int], channels: int):
    """`decode_resized` with the stored size's plan made beforehand (`decode_plan`, for a batch at once)."""
    import tensorflow as tf

    decode, resize = plan_for(encoded, plan)
    decodes = [lambda ratio=ratio: _jpeg_reduced(encoded, ratio, channels) for ratio in JPEG_RATIOS]
    image = tf.switch_case(decode, [*decodes, lambda: decode_full(encoded, channels)])
    image.set_shape([None, None, channels or None])
    resized = tf.switch_case(resize, [lambda way=way: _resized(image, size, way) for way in RESIZES])
    resized.set_shape([size[0], size[1], channels or None])
    return resized


def to_dtype(resized, dtype: str):
    """A resized image (float32; every filter here averages with non-negative weights, so it stays in 0..255 but
    for float rounding) as uint8, rounded to nearest (a cast truncates: +0.5 first; no clip needed, and one costs
    tens of microseconds an image), or as float32 in 0..1."""
    import tensorflow as tf

    if dtype == "uint8":
        return tf.cast(resized + 0.5, tf.uint8)
    return tf.clip_by_value(resized / 255.0, 0.0, 1.0)
