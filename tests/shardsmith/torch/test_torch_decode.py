"""shardsmith.torch's decode (`decoded_tensor`): a JPEG decoded at libjpeg-turbo's reduced scale and resized by
torch's antialiased bilinear filter stays within MAX_MEAN_LEVELS_FROM_REFERENCE levels on average, and
MAX_LEVELS_ONE_IMAGE on any one image, of Pillow's full decode and antialiased bilinear resize (what torchvision's
ImageFolder loader and `Resize` give); a damaged JPEG is still refused. The images: conftest's
every_kind_of_image."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

torch = pytest.importorskip("torch")
pytest.importorskip("simplejpeg")

from shardsmith.read.images import decode_reduced  # noqa: E402
from shardsmith.read.tf_images import MAX_LEVELS_ONE_IMAGE, MAX_MEAN_LEVELS_FROM_REFERENCE  # noqa: E402
from shardsmith.torch import decoded_tensor  # noqa: E402

MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def _reference(data: bytes, size: tuple[int, int], channels: int) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as image:
        resized = image.convert(MODES[channels]).resize((size[1], size[0]), Image.Resampling.BILINEAR)
    pixels = np.asarray(resized)
    return (pixels[:, :, None] if pixels.ndim == 2 else pixels).transpose(2, 0, 1)


@pytest.mark.parametrize("size", [(224, 224), (96, 160), (600, 600)], ids=["224", "96x160", "upscaled"])
@pytest.mark.parametrize("channels", [3, 1, 4])
def test_every_kind_of_image_stays_within_three_levels_of_a_full_decode(every_kind_of_image, size, channels):
    differences = {}
    for name, (data, _height, _width) in every_kind_of_image.items():
        ours = decoded_tensor(data, size, channels)
        assert ours.dtype == torch.uint8 and tuple(ours.shape) == (channels, *size), name
        reference = _reference(data, size, channels)
        differences[name] = np.abs(ours.numpy().astype(np.int16) - reference.astype(np.int16)).mean()
    assert np.mean(list(differences.values())) <= MAX_MEAN_LEVELS_FROM_REFERENCE, differences
    assert max(differences.values()) <= MAX_LEVELS_ONE_IMAGE, differences


def test_a_jpeg_is_decoded_only_as_large_as_the_target_needs(every_kind_of_image):
    data, height, width = every_kind_of_image["photo_as_stored_cat-800x600-3"]
    assert (height, width) == (600, 800)
    reduced = decode_reduced(data, (224, 224), 3)
    assert 224 <= reduced.shape[0] < 600 and 224 <= reduced.shape[1] < 800, reduced.shape
    assert decode_reduced(data, None, 3).shape == (600, 800, 3)
    tiny, *_ = every_kind_of_image["jpeg_tiny"]
    assert decode_reduced(tiny, (224, 224), 3).shape == (9, 12, 3), "never decoded above its own size"


def test_a_damaged_jpeg_is_refused(every_kind_of_image):
    data, *_ = every_kind_of_image["photo_as_stored_cat-800x600-3"]
    with pytest.raises(OSError):
        decoded_tensor(data[: len(data) // 2], (224, 224), 3)
