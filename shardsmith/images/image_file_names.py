"""Which file names are images: the extensions a class folder's images have, and what a manifest value that names
an image file looks like (the swapped-columns checks and the failure hints ask it). Names only: no file is read.
"""

from __future__ import annotations

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
# What a column of image paths looks like to the swapped-columns check: the formats read, and TIFF (re-encoded).
IMAGE_PATH_EXTENSIONS = (*IMAGE_EXTENSIONS, ".tif", ".tiff")


def looks_like_image_path(value: str) -> bool:
    """Whether a manifest value ends like an image file name (any case): not a label."""
    return value.strip().lower().endswith(IMAGE_PATH_EXTENSIONS)
