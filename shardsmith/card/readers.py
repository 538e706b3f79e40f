"""The read check's readers, each run in its own process by shardsmith/card/read_check.py: one pass of a split
(or `limit` records), decoded and resized, timed from the end of the first batch.

Memory: the shard readers stream; decode_limit holds at most LIMIT_IMAGES encoded images; the file readers hold
the list of paths.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

LIMIT_IMAGES = 2_000  # images decode_limit holds in memory at once


@dataclass(frozen=True)
class Settings:
    """What the read check reads: a kept version's split, and how (`limit` None: a whole pass)."""

    output_dir: str
    build_id: str
    split: str
    limit: int | None
    image_size: int
    batch_size: int
    workers: int


class _Span:
    """Wall and CPU time (this process and its children: DataLoader workers) from `start()`."""

    def __init__(self) -> None:
        import psutil

        self._process = psutil.Process()
        self._seen: dict[int, float] = {}
        self.started, self.cpu = 0.0, 0.0

    def _cpu(self) -> float:
        times = self._process.cpu_times()
        for child in self._process.children(recursive=True):
            try:
                child_times = child.cpu_times()
                self._seen[child.pid] = child_times.user + child_times.system
            except Exception:  # noqa: BLE001 - a worker that ended keeps its last reading
                pass
        return times.user + times.system + sum(self._seen.values())

    def start(self) -> None:
        self.started, self.cpu = time.perf_counter(), self._cpu()

    def stop(self, images: int) -> dict:
        wall, cpu = time.perf_counter() - self.started, self._cpu() - self.cpu
        return {"images": images, "images_per_s": images / wall if wall > 0 else 0.0,
                "cpu_us_per_image": cpu * 1e6 / images if images else 0.0}


def _timed(batches: Iterable, count: Callable[[object], int], limit: int | None) -> dict:
    iterator = iter(batches)
    first = next(iterator, None)
    span = _Span()
    span.start()
    images, seen = 0, count(first) if first is not None else 0
    for batch in iterator:
        if limit is not None and seen >= limit:
            break
        n = count(batch)
        images, seen = images + n, seen + n
    return span.stop(images)


def measure(name: str, settings: Settings) -> dict:
    """The reader `name`'s figures: images timed, images/s, CPU us per image, and how it read."""
    try:
        figures, how = READERS[name](settings)
    except ModuleNotFoundError as e:
        return {"reader": name, "skipped": f"{e.name} is not installed here"}
    except (FileNotFoundError, _Unavailable) as e:
        return {"reader": name, "skipped": str(e).splitlines()[0]}
    return {"reader": name, **figures, "how": how}


class _Unavailable(Exception):
    """This reader cannot run on this version here; the message says why."""


def _load(s: Settings) -> tuple[dict, str]:
    import shardsmith

    dataset = shardsmith.load(s.output_dir, s.split, batch_size=s.batch_size, image_size=s.image_size,
                              version=s.build_id)
    return (_timed(dataset, lambda b: int(b[0].shape[0]), s.limit),
            f"shardsmith.load(batch_size={s.batch_size}, image_size={s.image_size})")


def _torch(s: Settings) -> tuple[dict, str]:
    import torch
    from torch.utils.data import DataLoader

    from shardsmith.torch import StreamingShardDataset

    torch.set_num_threads(1)
    loader = DataLoader(StreamingShardDataset(s.output_dir, s.split, version=s.build_id, image_size=s.image_size),
                        batch_size=s.batch_size, num_workers=s.workers)
    return (_timed(loader, lambda b: len(b[1]), s.limit),
            f"StreamingShardDataset + DataLoader(num_workers={s.workers})")


def _encoded_images(s: Settings, most: int) -> list[tuple[bytes, int, int]]:
    import shardsmith

    records = shardsmith.records(s.output_dir, s.split, version=s.build_id)
    if "image/encoded" not in records[0]:
        raise _Unavailable("the records hold paths, not image bytes (--image_mode path)")
    return [(r["image/encoded"], r["image/height"], r["image/width"]) for r in itertools.islice(records, most)]


def _decode_limit(s: Settings) -> tuple[dict, str]:
    import tensorflow as tf

    from shardsmith.read.tf_images import decode_resized, to_dtype

    images = _encoded_images(s, min(s.limit or LIMIT_IMAGES, LIMIT_IMAGES))
    encoded, heights, widths = zip(*images, strict=True)
    size = (s.image_size, s.image_size)
    dataset = (tf.data.Dataset.from_tensor_slices((list(encoded), tf.constant(heights, tf.int64),
                                                   tf.constant(widths, tf.int64)))
               .map(lambda e, h, w: (to_dtype(decode_resized(e, h, w, size, 3), "uint8"), h),
                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
               .batch(s.batch_size).prefetch(tf.data.AUTOTUNE))
    return (_timed(dataset, lambda b: int(b[1].shape[0]), None),
            f"load()'s decode and resize over {len(images):,} images in memory")


def image_files(s: Settings) -> list[tuple[str, int]]:
    """(path, label id) of the split's images as the build found them: the records' URIs resolved as the build
    resolved them (against the manifest's folder, --path_map applied); _Unavailable when they are not all there."""
    import shardsmith
    from shardsmith import storage
    from shardsmith.manifest import ManifestFormat, resolve_uri

    records = shardsmith.records(s.output_dir, s.split, version=s.build_id)
    recorded = records.metadata.options or {}
    manifests = recorded.get("manifests") or []
    if len(manifests) != 1:
        raise _Unavailable("--files needs a build of one manifest or folder")
    source = manifests[0]
    base = source if storage.is_folder(source) else storage.parent(source)
    fmt = ManifestFormat.from_recorded(recorded)
    files = []
    for record in itertools.islice(records, s.limit):
        uri = record.get("image/uri") or record["image/filename"]
        files.append((resolve_uri(uri.decode("utf-8"), base, fmt), int(record["image/class/label"])))
    missing = [path for path, _ in files[:50] if not storage.exists(path)]
    if missing:
        raise _Unavailable(f"the image files are not where the build read them (e.g. {missing[0]})")
    return files


def _tf_files(s: Settings) -> tuple[dict, str]:
    import tensorflow as tf

    files = image_files(s)
    size = (s.image_size, s.image_size)

    def read(path, label):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return tf.cast(tf.image.resize(image, size), tf.uint8), label

    auto = tf.data.AUTOTUNE
    dataset = (tf.data.Dataset.from_tensor_slices(([p for p, _ in files], [label for _, label in files]))
               .shuffle(len(files), seed=0).map(read, num_parallel_calls=auto, deterministic=False)
               .batch(s.batch_size).prefetch(auto))
    return _timed(dataset, lambda b: int(b[1].shape[0]), None), "tf.data: read_file, decode_image, resize"


class _CarefulFiles:
    """A careful torch Dataset over image files: Pillow's reduced-scale decode (draft), RGB, bilinear resize."""

    def __init__(self, files: list[tuple[str, int]], size: int):
        self.files, self.size = files, size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import numpy as np
        import torch
        from PIL import Image

        path, label = self.files[i]
        with Image.open(path) as image:
            image.draft("RGB", (self.size, self.size))
            pixels = image.convert("RGB").resize((self.size, self.size), Image.Resampling.BILINEAR)
        return torch.from_numpy(np.asarray(pixels).copy()).permute(2, 0, 1), label


def _torch_files(s: Settings) -> tuple[dict, str]:
    import torch
    from torch.utils.data import DataLoader

    files = image_files(s)
    torch.set_num_threads(1)
    loader = DataLoader(_CarefulFiles(files, s.image_size), batch_size=s.batch_size, num_workers=s.workers,
                        shuffle=True)
    return (_timed(loader, lambda b: len(b[1]), None),
            f"Pillow draft + resize, DataLoader(num_workers={s.workers}, shuffle=True)")


READERS: dict[str, Callable[[Settings], tuple[dict, str]]] = {
    "load": _load, "torch": _torch, "decode_limit": _decode_limit, "tf_files": _tf_files,
    "torch_files": _torch_files,
}
