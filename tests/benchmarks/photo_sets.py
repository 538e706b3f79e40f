"""Independent photos for the near-duplicate benchmark, from a package that ships them: GCompris's data
(Debian's gcompris-qt-data, measured with 3.1-2), whose activities hold a few hundred photographs of tools,
animals, fish and monuments, each a different picture.

    apt-get download gcompris-qt-data      # a .deb in the current folder (no install, no root)
    python tests/benchmarks/near_duplicates.py --gcompris gcompris-qt-data_*.deb

The photos sit in Qt resource files (.rcc) as WebP; they are carved out by their RIFF headers, which needs
neither Qt nor an install. Only the activities made of photographs are read (PHOTO_ACTIVITIES); drawings,
puzzle pieces of paintings and the "details" activity (crops of other pictures, by design) are left out.
"""

from __future__ import annotations

import hashlib
import io
import struct
import tarfile
from collections.abc import Iterator
from pathlib import Path

from PIL import Image

PHOTO_ACTIVITIES = ("categorization", "erase", "explore_farm_animals", "explore_monuments", "explore_world_animals")
MIN_SIDE = 128  # icons and thumbnails are smaller
# The same photograph in two activities, a 320-pixel copy and a 1024-pixel one (found at pHash distance 2, and
# compared side by side by a person): the small copy is left out, so that the set holds distinct pictures only.
SAME_PICTURE = {
    "categorization#114": "explore_monuments#39",
    "categorization#116": "explore_monuments#11",
    "categorization#118": "explore_monuments#46",
}


class PhotoSetError(RuntimeError):
    """The path is not a gcompris-qt-data .deb nor a folder holding its .rcc files."""


def _deb_members(deb: Path) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every file in a .deb's data archive (an ar archive holding data.tar.xz or .gz)."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise PhotoSetError(f"{deb} is not a .deb (no ar header)")
    at = 8
    while at + 60 <= len(data):
        name = data[at:at + 16].decode().strip().rstrip("/")
        size = int(data[at + 48:at + 58])
        body = data[at + 60:at + 60 + size]
        at += 60 + size + size % 2
        if name.startswith("data.tar"):
            try:
                with tarfile.open(fileobj=io.BytesIO(body)) as archive:
                    for member in archive:
                        if member.isfile():
                            yield member.name, archive.extractfile(member).read()
            except tarfile.ReadError as e:
                raise PhotoSetError(f"{deb}: cannot read {name} ({e})") from None
            return
    raise PhotoSetError(f"{deb} holds no data.tar")


def _resource_files(path: Path) -> Iterator[tuple[str, bytes]]:
    """(activity, bytes) of the photo activities' .rcc files, from the .deb or a folder it was unpacked into."""
    if path.is_dir():
        files = ((str(p), p.read_bytes) for p in sorted(path.rglob("*.rcc")))
        members = ((name, read()) for name, read in files)
    elif path.is_file():
        members = ((name, data) for name, data in _deb_members(path) if name.endswith(".rcc"))
    else:
        raise PhotoSetError(f"{path} does not exist")
    for name, data in members:
        activity = Path(name).stem
        if activity in PHOTO_ACTIVITIES:
            yield activity, data


def _webp_images(data: bytes) -> Iterator[bytes]:
    """Every WebP file inside `data`, in order: a RIFF header, its length, then WEBP."""
    at = 0
    while (found := data.find(b"WEBPVP8", at)) >= 0:
        at = found + 4
        start = found - 8
        if start >= 0 and data[start:start + 4] == b"RIFF":
            (length,) = struct.unpack("<I", data[start + 4:start + 8])
            yield data[start:start + 8 + length]


def gcompris_photos(path: Path) -> list[tuple[str, Image.Image]]:
    """The photographs of gcompris-qt-data's photo activities as (name, RGB image), named `activity#n` (n counts
    the activity's photos in file order), exact pixel repeats and SAME_PICTURE's second copies left out.
    Deterministic for a given package version."""
    photos: list[tuple[str, Image.Image]] = []
    seen: set[str] = set()
    for activity, data in sorted(_resource_files(path), key=lambda item: item[0]):
        number = 0
        for webp in _webp_images(data):
            try:
                image = Image.open(io.BytesIO(webp))
                image.load()
            except OSError:
                continue
            if min(image.size) < MIN_SIDE:
                continue
            image = image.convert("RGB")
            digest = hashlib.sha256(image.tobytes()).hexdigest()
            if digest in seen:
                continue
            seen.add(digest)
            name = f"{activity}#{number}"
            number += 1
            if name not in SAME_PICTURE:
                photos.append((name, image))
    if not photos:
        raise PhotoSetError(f"{path} holds no photos of {', '.join(PHOTO_ACTIVITIES)}: is it gcompris-qt-data?")
    return photos
