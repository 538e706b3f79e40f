"""The TensorFlow-free readers on one build (docs/performance.md, "Reading"):

    PYTHONPATH=. python tests/benchmarks/readers.py                         # the demo set, 40 images a label
    PYTHONPATH=. python tests/benchmarks/readers.py --per_label 2000 --random 10000
    PYTHONPATH=. python tests/benchmarks/readers.py --dataset out/flowers --no_tf
    PYTHONPATH=. python tests/benchmarks/readers.py --manifest /tmp/shardsmith-bench/corpus-n20000/manifest.csv

Builds the demo dataset (`shardsmith sample` + `shardsmith build`, timed) unless --dataset names a built one,
then prints: index files' bytes as a share of the build's output and the time writing them costs (their records'
offsets computed and the files written atomically, as the writer does, against the build's wall time);
`shardsmith.records` streamed and at random (`records[i]` for --random random i, CRCs checked, page cache
warm); one epoch of `shardsmith.torch.StreamingShardDataset` through `DataLoader(num_workers=2)`, decoded and
resized to --image_size; unless --no_tf, one epoch of `shardsmith.load()` (tf.data) doing the same; and, for
the set it built (the demo set, or --manifest's), one epoch over the same image files one by one, as
torchvision's ImageFolder reads them.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from shardsmith.format.naming import ERRORS_FILE, INDEX_SUFFIX  # noqa: E402  (after the repo is on the path)


def _build(folder: Path, per_label: int, manifest: Path | None) -> tuple[Path, Path, float]:
    """(manifest, output folder, build seconds): the demo set of `per_label` images a label, or `manifest`."""
    out = folder / "out"
    run = [sys.executable, "-m", "pipeline.cli"]
    if manifest is None:
        manifest = folder / "data" / "manifest.csv"
        subprocess.run([*run, "sample", str(manifest.parent), "--per_label", str(per_label)], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
    started = time.perf_counter()
    subprocess.run([*run, "build", "--manifest", str(manifest), "--output_dir", str(out), "--name", "bench"],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return manifest, out, time.perf_counter() - started


def _index_cost(out: str) -> tuple[int, int, float]:
    """(index bytes, output bytes, seconds to compute and write the index files as the writer does)."""
    import shardsmith
    from shardsmith.format.build_record import write_atomically
    from shardsmith.format.record_index import RecordIndex
    from shardsmith.output_folder.layout import published_dir

    folder = Path(published_dir(out))
    output = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    index_bytes = sum(p.stat().st_size for p in folder.glob(f"*{INDEX_SUFFIX}"))
    lengths = []
    for split in shardsmith.records(out, "train").metadata.splits:
        records = shardsmith.records(out, split)
        lengths += [[len(data) for data in records.shard_records(k)] for k in range(len(records.shards))]
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        for number, shard in enumerate(lengths):
            index = RecordIndex()
            for length in shard:
                index.add(length)
            write_atomically(f"{scratch}/{number}.idx", index.to_bytes())
        seconds = time.perf_counter() - started
    return index_bytes, output, seconds


def _records_rates(out: str, picks: int) -> tuple[float, float, int]:
    import shardsmith

    records = shardsmith.records(out, "train")
    list(records)  # page cache and index files warm
    started = time.perf_counter()
    count = sum(1 for _ in records)
    streamed = count / (time.perf_counter() - started)
    order = [random.randrange(len(records)) for _ in range(picks)]
    started = time.perf_counter()
    for i in order:
        records[i]
    return streamed, picks / (time.perf_counter() - started), len(records)


def _torch_rate(out: str, size: int) -> float:
    import torch

    from shardsmith.torch import StreamingShardDataset

    loader = torch.utils.data.DataLoader(StreamingShardDataset(out, "train", image_size=size), batch_size=32,
                                         num_workers=2)
    started = time.perf_counter()
    images = sum(len(labels) for _, labels in loader)
    return images / (time.perf_counter() - started)


def _image_files_rate(manifest: Path, out: str, size: int) -> float:
    """One epoch over the manifest's image files as torchvision's ImageFolder reads them (a file a sample, Pillow
    decode, RGB, resize, a CHW uint8 tensor), through the same DataLoader: torchvision itself does not install
    beside this machine's torch wheel, so its ImageFolder's default loader is spelled out here. The rows the build
    rejected (the demo set's broken files, listed in errors.jsonl) are left out, as a user's folder would be."""
    import csv
    import json

    import numpy as np
    import torch
    from PIL import Image

    from shardsmith.output_folder.layout import published_dir

    errors = (Path(published_dir(out)) / ERRORS_FILE).read_text().splitlines()
    rejected = {json.loads(line)["uri"] for line in errors if line.strip()}
    with manifest.open() as f:
        files = [(str(manifest.parent / row["image_uri"]), index) for index, row in enumerate(csv.DictReader(f))
                 if row["image_uri"] not in rejected]

    class ImageFiles(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(files)

        def __getitem__(self, i: int):
            path, label = files[i]
            with Image.open(path) as image:
                pixels = np.array(image.convert("RGB").resize((size, size), Image.BILINEAR))
            return torch.from_numpy(pixels).permute(2, 0, 1), label % 3

    loader = torch.utils.data.DataLoader(ImageFiles(), batch_size=32, num_workers=2, shuffle=True)
    started = time.perf_counter()
    images = sum(len(labels) for _, labels in loader)
    return images / (time.perf_counter() - started)


def _tf_rate(out: str, size: int) -> float:
    import shardsmith

    dataset = shardsmith.load(out, "train", batch_size=32, image_size=size)
    next(iter(dataset))  # TensorFlow's start-up, not the reading
    started = time.perf_counter()
    images = sum(int(labels.shape[0]) for _, labels in dataset)
    return images / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset", default=None, help="a built dataset (default: build the demo set)")
    parser.add_argument("--per_label", type=int, default=40, help="demo images a label (3 labels)")
    parser.add_argument("--manifest", type=Path, default=None,
                        help="build this CSV manifest (split,image_uri,label; e.g. a compare.py corpus) instead")
    parser.add_argument("--random", type=int, default=2000, help="records[i] reads at random")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--no_tf", action="store_true", help="skip shardsmith.load()")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shardsmith-readers-") as folder:
        build_s = manifest = None
        out = args.dataset
        if out is None:
            manifest, built, build_s = _build(Path(folder), args.per_label, args.manifest)
            out = str(built)
        index_bytes, output_bytes, index_s = _index_cost(out)
        streamed, at_random, count = _records_rates(out, args.random)
        print(f"dataset {out}: {count} training records, cores {len(os.sched_getaffinity(0))}")
        print(f"index files: {index_bytes} bytes, {100 * index_bytes / output_bytes:.3f}% of the build's "
              f"{output_bytes} bytes; writing them {1000 * index_s:.1f} ms"
              + (f" ({100 * index_s / build_s:.3f}% of the {build_s:.1f} s build)" if build_s else ""))
        print(f"shardsmith.records: streamed {streamed:.0f} records/s; records[i] at random {at_random:.0f} records/s "
              f"({args.random} reads, CRCs checked)")
        print(f"shardsmith.torch StreamingShardDataset, DataLoader(num_workers=2), decode + resize to "
              f"{args.image_size}: {_torch_rate(out, args.image_size):.0f} images/s")
        if not args.no_tf:
            print(f"shardsmith.load() (tf.data), decode + resize to {args.image_size}: "
                  f"{_tf_rate(out, args.image_size):.0f} images/s")
        if args.dataset is None:
            rate = _image_files_rate(manifest, out, args.image_size)
            print(f"the same image files one by one (ImageFolder's way), DataLoader(num_workers=2), decode + resize "
                  f"to {args.image_size}: {rate:.0f} images/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
