"""load()'s decode step (shardsmith/read/tf_images.py) costs what the output needs and keeps the picture: a JPEG
to be shrunk is decoded at reduced scale and resized bilinearly, and on every kind of image the result stays within
MAX_MEAN_LEVELS_FROM_REFERENCE levels on average, and MAX_LEVELS_ONE_IMAGE on any one image, of a full decode
followed by an antialiased resize of the same bytes.
The images: conftest's every_kind_of_image (TFRecorder's photos, re-encoded as JPEG, PNG, grayscale, RGBA, tiny,
panorama, 12 megapixels), at 224, at a non-square size and upscaled."""

from __future__ import annotations

import numpy as np
import pytest

from shardsmith.read.tf_images import (
    FULL_DECODE,
    JPEG_RATIOS,
    MAX_LEVELS_ONE_IMAGE,
    MAX_MEAN_LEVELS_FROM_REFERENCE,
    RESIZES,
    decode_plan,
    decode_resized,
    plan_for,
    to_dtype,
)


def _run(tf, fn, *args):
    """`fn` inside a tf.data map, where load() runs it (graph mode, its control flow)."""
    dataset = tf.data.Dataset.from_tensors(tuple(tf.constant(a) for a in args)).map(fn)
    return next(iter(dataset)).numpy()


def _reference(tf, data: bytes, size: tuple[int, int], channels: int) -> np.ndarray:
    """A full decode and an antialiased resize (for a JPEG asked for 4 channels, RGB and opaque alpha)."""
    image = tf.io.decode_image(data, channels=3 if channels == 4 and tf.io.is_jpeg(data) else channels,
                               expand_animations=False)
    if image.shape[-1] != channels:
        image = tf.concat([image, tf.fill([*image.shape[:2], 1], tf.constant(255, tf.uint8))], axis=-1)
    resized = tf.image.resize(image, size, antialias=True)
    return tf.cast(tf.clip_by_value(tf.round(resized), 0, 255), tf.uint8).numpy()


@pytest.mark.parametrize("size", [(224, 224), (96, 160), (600, 600)], ids=["224", "96x160", "upscaled"])
@pytest.mark.parametrize("channels", [3, 1, 4])
def test_every_kind_of_image_stays_within_three_levels_of_a_full_decode(tf, every_kind_of_image, size, channels):
    differences = {}
    for name, (data, height, width) in every_kind_of_image.items():
        ours = _run(tf, lambda e, h, w: to_dtype(decode_resized(e, h, w, size, channels), "uint8"),
                    data, np.int64(height), np.int64(width))
        reference = _reference(tf, data, size, channels)
        assert ours.shape == reference.shape == (*size, channels), name
        differences[name] = np.abs(ours.astype(np.int16) - reference.astype(np.int16)).mean()
    assert np.mean(list(differences.values())) <= MAX_MEAN_LEVELS_FROM_REFERENCE, differences
    assert max(differences.values()) <= MAX_LEVELS_ONE_IMAGE, differences


def test_a_photo_to_be_shrunk_is_decoded_at_reduced_scale(tf, every_kind_of_image):
    def way(name: str, size: tuple[int, int] = (224, 224), known: bool = True) -> tuple[int | str, str]:
        data, height, width = every_kind_of_image[name]
        height, width = (height, width) if known else (-1, -1)
        plan = _run(tf, lambda e, h, w: tf.stack(plan_for(e, decode_plan(h, w, size))), data, np.int64(height),
                    np.int64(width))
        decode, resize = (int(x) for x in plan)
        return ("full" if decode == FULL_DECODE else JPEG_RATIOS[decode]), RESIZES[resize]

    # 800x600 to 224: 1/2 (400x300) still covers it, 1/4 does not; less than twice the target is left.
    photo = "photo_as_stored_cat-800x600-3"
    assert every_kind_of_image[photo][1:] == (600, 800)
    assert way(photo) == (2, "bilinear"), "400x300 is less than twice 224"
    assert way(photo, (100, 100)) == (2, "area"), "1/4 would leave less than twice the target"
    assert way("jpeg_12mp") == (4, "area"), "4000x3000: 1/4 leaves twice the target"
    assert way("jpeg_12mp", (64, 64)) == (8, "area")
    assert way("jpeg_panorama") == (1, "area"), "300 high: full scale"
    assert way("jpeg_panorama", (400, 224)) == (1, "antialiased"), "upscaled in height, shrunk 13x in width"
    assert way("jpeg_tiny") == (1, "bilinear"), "upscaled from a full decode"
    assert way("jpeg_just_above_target") == (1, "bilinear")
    assert way("png_photo") == ("full", "antialiased")
    assert way(photo, known=False) == ("full", "antialiased"), "a record without a stored size"


def test_a_damaged_jpeg_still_fails_loudly(tf, every_kind_of_image):
    images = every_kind_of_image
    data, height, width = images["photo_as_stored_cat-800x600-3"]
    with pytest.raises(tf.errors.InvalidArgumentError):
        _run(tf, lambda e, h, w: decode_resized(e, h, w, (224, 224), 3), data[:200], np.int64(height),
             np.int64(width))


def test_load_reads_each_record_within_three_levels_of_a_full_decode(tf, built):
    import shardsmith

    dataset = shardsmith.load(str(built), "train", batch_size=None, image_size=(40, 56), features=True)
    seen = 0
    for example in dataset:
        reference = _reference(tf, example["image/encoded"].numpy(), (40, 56), 3)
        ours = example["image"].numpy()
        assert ours.dtype == np.uint8 and ours.shape == (40, 56, 3)
        assert np.abs(ours.astype(np.int16) - reference.astype(np.int16)).mean() <= MAX_LEVELS_ONE_IMAGE
        seen += 1
    assert seen == 225
