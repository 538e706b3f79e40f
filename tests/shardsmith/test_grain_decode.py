"""shardsmith.grain decodes as shardsmith.torch does: a JPEG at libjpeg-turbo's reduced scale, as small as the
target allows (shardsmith/read/images.py `decode_reduced`), then resized (Pillow's antialiased bilinear filter
here, torch's there). Over a build of real photos (TFRecorder's) and conftest's every_kind_of_image, at a square
target, another shape and an upscale, Grain's source and torch's dataset agree within one level on every pixel.
Pillow's own reduced-scale decode (`draft`, scales 1/2, 1/4, 1/8 only) differs from them by up to 3 levels on
average on an image."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline import cli
from shardsmith.grain import ShardSource
from shardsmith.read.images import decode_resized

torch = pytest.importorskip("torch")
pytest.importorskip("simplejpeg")

from shardsmith.torch import ShardDataset, decoded_tensor  # noqa: E402

SIZES = [(224, 224), (96, 160), (600, 600)]


@pytest.fixture(scope="module")
def photos(tfrecorder_data, tmp_path_factory):
    """TFRecorder's real photos (JPEGs of 320x320 to 853x640), two in each split, built into a dataset."""
    out = tmp_path_factory.mktemp("photos") / "out"
    code = cli.main(["build", "--manifest", str(tfrecorder_data / "images"), "--output_dir", str(out),
                     "--name", "photos"])
    assert code == 0
    return out


@pytest.mark.parametrize("size", SIZES, ids=["224", "96x160", "upscaled"])
def test_the_grain_source_gives_the_torch_readers_pixels(photos, size):
    compared = 0
    for split in ("train", "validation", "test"):
        grain_source = ShardSource(photos, split, image_size=size)
        torch_dataset = ShardDataset(photos, split, image_size=size)
        assert len(grain_source) == len(torch_dataset)
        for i in range(len(grain_source)):
            ours = grain_source[i]["image"]
            theirs = torch_dataset[i][0].numpy().transpose(1, 2, 0)
            assert ours.shape == (*size, 3) and ours.dtype == np.uint8
            assert np.abs(ours.astype(np.int16) - theirs.astype(np.int16)).max() <= 1, (split, i)
            compared += 1
    assert compared == 6


@pytest.mark.parametrize("size", SIZES, ids=["224", "96x160", "upscaled"])
@pytest.mark.parametrize("channels", [3, 1, 4])
def test_every_kind_of_image_decodes_as_the_torch_reader_does(every_kind_of_image, size, channels):
    for name, (data, _height, _width) in every_kind_of_image.items():
        ours = decode_resized(data, size, channels)
        theirs = decoded_tensor(data, size, channels).numpy().transpose(1, 2, 0)
        assert ours.shape == (*size, channels) and ours.dtype == np.uint8, name
        assert np.abs(ours.astype(np.int16) - theirs.astype(np.int16)).max() <= 1, name


def test_without_a_size_the_image_keeps_its_own(every_kind_of_image):
    data, height, width = every_kind_of_image["photo_as_stored_cat-800x600-3"]
    assert decode_resized(data, None, 3).shape == (height, width, 3)
