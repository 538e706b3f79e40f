"""The read side against what users write themselves, from a local disk (docs/performance.md, "Reading"). Not run by CI.

    python tests/benchmarks/read_side.py                      # 4,000 photo crops, 3 rounds
    python tests/benchmarks/read_side.py --images 4000 --rounds 3 --only load,tf_hand

Makes (or reuses, in --workdir) compare.py's corpus of real-photo JPEG crops (0.3-0.5 MP, tests/benchmarks/
corpora.py), builds it once with `shardsmith build`, warms the page cache, then reads one epoch of the train split
at --image_size (224) in batches of 64 with each contender, each in a fresh process, the order alternating from
one round to the next:

    load             shardsmith.load(out, "train", batch_size=64, image_size=224)
    tf_hand          a careful hand-written tf.data pipeline over the same shard files: shuffled files, parallel
                     interleave (16), shuffle(1024), parse image + label, decode_image, bilinear resize (no
                     antialias), batch, prefetch, AUTOTUNE everywhere
    tf_files         the same images as files one by one through tf.data: shuffled paths, read_file, decode_image,
                     bilinear resize, AUTOTUNE map, batch, prefetch
    tf_limit         the limit: load()'s own decode and resize (shardsmith/read/tf_images.py) over the records'
                     image bytes already in memory, AUTOTUNE map, batch: what decoding and resizing alone cost
    torch_stream     shardsmith.torch.StreamingShardDataset + DataLoader(num_workers=2)
    torch_map        shardsmith.torch.ShardDataset + DataLoader(num_workers=2, shuffle=True)
    torch_careful    a careful user's torch Dataset over the files: Pillow open, draft (reduced-scale JPEG decode),
                     RGB, bilinear resize, a CHW tensor; DataLoader(num_workers=2, shuffle=True)
    grain            shardsmith.grain's ShardSource (decode_reduced, then Pillow's resize) in a Grain pipeline: a
                     shuffled MapDataset, batched, read by 2 worker processes (`mp_prefetch`)
    grain_pillow     the same pipeline over a source that decodes with Pillow (`draft` at 1/2, 1/4 or 1/8, then
                     Pillow's resize: `decode_image`, the Grain source's decode before it took decode_reduced)
    torch_imagefolder  torchvision ImageFolder's default loader (Pillow open, full decode, RGB) and `Resize`
                     (Pillow bilinear, antialiased) with PILToTensor, spelled out (torchvision does not install
                     beside this machine's torch wheel); DataLoader(num_workers=2, shuffle=True)

Each run prints images/s over the epoch after its first batch (start-up and TensorFlow's first graph excluded)
and CPU per image over the same span (user + system of the process and its DataLoader workers, from psutil).
Then a table of medians and the ratios the read-side targets are stated in.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # corpora.py lies beside this file
import corpora  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BATCH = 64
CYCLE = 16
SHUFFLE = 1024
WORKERS = 2
RUN_DEADLINE_S = 600  # one epoch of a few thousand images takes seconds; a run this long is stuck
CONTENDERS = ("load", "tf_hand", "tf_files", "tf_limit", "torch_stream", "torch_map", "torch_careful",
              "torch_imagefolder", "grain", "grain_pillow")


class Span:
    """Images counted and wall and CPU time (the process and its children) from the first `start()`."""

    def __init__(self) -> None:
        import psutil

        self._process = psutil.Process()
        self.images = 0
        self._started: tuple[float, float] | None = None

    def _cpu(self) -> float:
        """This process's CPU, its reaped children's (DataLoader workers that ended) and its live children's."""
        import psutil

        reaped = os.times()
        total = reaped.user + reaped.system + reaped.children_user + reaped.children_system
        for child in self._process.children(recursive=True):
            with contextlib.suppress(psutil.Error):  # one that just ended is counted as reaped next time
                total += sum(child.cpu_times()[:2])
        return total

    def start(self) -> None:
        self._started = (time.perf_counter(), self._cpu())

    def stop(self, ended: float) -> dict:
        """`ended`: perf_counter() when the last image came; the CPU is read now (workers reaped by then)."""
        wall, cpu = ended - self._started[0], self._cpu() - self._started[1]
        return {"images": self.images, "images_per_s": self.images / wall, "cpu_us_per_image": 1e6 * cpu / self.images}


def _epoch(batches, count) -> dict:
    """Times an iterable of batches after its first one; `count(batch)` is the images in a batch."""
    span = Span()
    iterator = iter(batches)
    next(iterator)
    span.start()
    for batch in iterator:
        span.images += count(batch)
    ended = time.perf_counter()
    del iterator  # DataLoader workers end and are reaped: their CPU is in os.times()'s children
    result = span.stop(ended)
    return result


def _train_files(manifest: Path, out: Path) -> list[tuple[str, int]]:
    """(path, label id) of the manifest's train images that the build wrote (errors.jsonl's rows left out)."""
    import shardsmith

    labels = {name: i for i, name in enumerate(shardsmith.records(str(out), "train").labels)}
    with manifest.open(newline="") as f:
        return [(str(manifest.parent / row["image_uri"]), labels[row["label"]]) for row in csv.DictReader(f)
                if row["split"] == "train"]


def _tf_contender(name: str, out: Path, manifest: Path, size: int) -> dict:
    import tensorflow as tf

    import shardsmith
    from shardsmith.format.metadata import read_metadata
    from shardsmith.read.tf_images import decode_resized, to_dtype
    from shardsmith.read.version_files import split_shards

    auto = tf.data.AUTOTUNE
    if name == "load":
        dataset = shardsmith.load(str(out), "train", batch_size=BATCH, image_size=size)
    elif name == "tf_hand":
        paths = [shard.path for shard in split_shards(str(out), read_metadata(str(out)), "train")]
        spec = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/class/label": tf.io.FixedLenFeature([], tf.int64)}

        def parse(record):
            example = tf.io.parse_single_example(record, spec)
            image = tf.io.decode_image(example["image/encoded"], channels=3, expand_animations=False)
            return tf.cast(tf.image.resize(image, (size, size)), tf.uint8), example["image/class/label"]

        dataset = (tf.data.Dataset.from_tensor_slices(paths).shuffle(len(paths))
                   .interleave(tf.data.TFRecordDataset, cycle_length=CYCLE, num_parallel_calls=auto,
                               deterministic=False)
                   .shuffle(SHUFFLE).map(parse, num_parallel_calls=auto, deterministic=False)
                   .batch(BATCH).prefetch(auto))
    elif name == "tf_files":
        files = _train_files(manifest, out)

        def read(path, label):
            image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
            return tf.cast(tf.image.resize(image, (size, size)), tf.uint8), label

        dataset = (tf.data.Dataset.from_tensor_slices(([p for p, _ in files], [label for _, label in files]))
                   .shuffle(len(files)).map(read, num_parallel_calls=auto, deterministic=False)
                   .batch(BATCH).prefetch(auto))
    else:  # tf_limit
        records = shardsmith.records(str(out), "train")
        images = [(r["image/encoded"], r["image/height"], r["image/width"]) for r in records]
        encoded, heights, widths = zip(*images, strict=True)
        dataset = (tf.data.Dataset.from_tensor_slices((list(encoded), tf.constant(heights, tf.int64),
                                                       tf.constant(widths, tf.int64)))
                   .map(lambda e, h, w: (to_dtype(decode_resized(e, h, w, (size, size), 3), "uint8"), h),
                        num_parallel_calls=auto, deterministic=False)
                   .batch(BATCH).prefetch(auto))
    return _epoch(dataset, lambda batch: int(batch[1].shape[0]))


class _CarefulFiles:
    """A careful user's torch Dataset over image files: Pillow's draft decode at reduced scale, then bilinear."""

    def __init__(self, files: list[tuple[str, int]], size: int, full_decode: bool):
        self.files, self.size, self.full_decode = files, size, full_decode

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int):
        import numpy as np
        import torch
        from PIL import Image

        path, label = self.files[i]
        with Image.open(path) as image:
            if not self.full_decode:
                image.draft("RGB", (self.size, self.size))
            pixels = image.convert("RGB").resize((self.size, self.size), Image.Resampling.BILINEAR)
        return torch.from_numpy(np.asarray(pixels).copy()).permute(2, 0, 1), label


def _torch_contender(name: str, out: Path, manifest: Path, size: int) -> dict:
    import torch
    from torch.utils.data import DataLoader

    from shardsmith.torch import ShardDataset, StreamingShardDataset

    if name == "torch_stream":
        loader = DataLoader(StreamingShardDataset(str(out), "train", image_size=size), batch_size=BATCH,
                            num_workers=WORKERS)
    elif name == "torch_map":
        loader = DataLoader(ShardDataset(str(out), "train", image_size=size), batch_size=BATCH,
                            num_workers=WORKERS, shuffle=True)
    else:
        files = _train_files(manifest, out)
        loader = DataLoader(_CarefulFiles(files, size, full_decode=name == "torch_imagefolder"), batch_size=BATCH,
                            num_workers=WORKERS, shuffle=True)
    torch.set_num_threads(1)
    return _epoch(loader, lambda batch: len(batch[1]))


class _PillowSource:
    """shardsmith.grain's source decoding with Pillow (`decode_image`: draft, then Pillow's resize)."""

    def __init__(self, out: Path, size: int):
        from shardsmith.grain import ShardSource

        self.source, self.size = ShardSource(str(out), "train"), size

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, i: int) -> dict:
        from shardsmith.format.example import LABEL
        from shardsmith.read.images import decode_image, image_bytes

        record = self.source.records[i]
        return {"image": decode_image(image_bytes(record), self.size, 3), "label": record[LABEL]}


def _grain_contender(name: str, out: Path, manifest: Path, size: int) -> dict:
    import grain

    from shardsmith.grain import ShardSource

    source = ShardSource(str(out), "train", image_size=size) if name == "grain" else _PillowSource(out, size)
    batches = (grain.MapDataset.source(source).shuffle(seed=0).batch(BATCH).to_iter_dataset()
               .mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS)))
    return _epoch(batches, lambda batch: len(batch["label"]))


def run_one(name: str, out: Path, manifest: Path, size: int) -> dict:
    """One contender's epoch in this process (the `_one` subcommand)."""
    contender = (_torch_contender if name.startswith("torch") else _grain_contender if name.startswith("grain")
                 else _tf_contender)
    return contender(name, out, manifest, size)


def _run_in_process(name: str, out: Path, manifest: Path, size: int) -> dict:
    command = [sys.executable, __file__, "_one", name, "--out", str(out), "--manifest", str(manifest),
               "--image_size", str(size)]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=RUN_DEADLINE_S)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _build(corpus, workdir: Path) -> Path:
    out = workdir / f"read-side-{corpus.root.name}"
    if not (out / "metadata.json").exists():
        subprocess.run([sys.executable, "-m", "pipeline.cli", "build", "--manifest", str(corpus.full),
                        "--output_dir", str(out), "--name", "bench"], check=True, cwd=REPO,
                       stdout=subprocess.DEVNULL, timeout=corpora.BUILD_DEADLINE_S)
    return out


def _table(runs: dict[str, list[dict]]) -> str:
    def median(name: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[name])

    lines = ["| reader | images/s (median) | every run | CPU per image (us) |", "|---|---:|---|---:|"]
    for name, results in runs.items():
        every = ", ".join(f"{run['images_per_s']:,.0f}" for run in results)
        lines.append(f"| {name} | {median(name, 'images_per_s'):,.0f} | {every} | "
                     f"{median(name, 'cpu_us_per_image'):,.0f} |")
    ratios = [("load", "tf_hand"), ("load", "tf_files"), ("torch_stream", "torch_careful"),
              ("torch_map", "torch_careful"), ("torch_stream", "torch_imagefolder"), ("grain", "grain_pillow"),
              ("grain", "torch_map")]
    lines.append("")
    for ours, theirs in ratios:
        if ours in runs and theirs in runs:
            rate = median(ours, "images_per_s") / median(theirs, "images_per_s")
            lines.append(f"- {ours} / {theirs}: {rate:.2f}x images/s")
    if "load" in runs and "tf_limit" in runs:
        over = median("load", "cpu_us_per_image") / median("tf_limit", "cpu_us_per_image") - 1
        lines.append(f"- load's CPU per image over the limit (decode + resize alone): {100 * over:+.0f}%")
    return "\n".join(lines)


def main() -> int:
    if sys.argv[1:2] == ["_one"]:
        parser = argparse.ArgumentParser(prog="read_side.py _one")
        parser.add_argument("name", choices=CONTENDERS)
        parser.add_argument("--out", type=Path, required=True)
        parser.add_argument("--manifest", type=Path, required=True)
        parser.add_argument("--image_size", type=int, required=True)
        args = parser.parse_args(sys.argv[2:])
        print(json.dumps(run_one(args.name, args.out, args.manifest, args.image_size)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4000, help="photo crops in the corpus (default 4000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench"))
    parser.add_argument("--only", default=",".join(CONTENDERS), help=f"comma list of: {', '.join(CONTENDERS)}")
    parser.add_argument("--json", type=Path, help="also write every run here")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    unknown = set(names) - set(CONTENDERS)
    if unknown:
        parser.error(f"unknown contenders {sorted(unknown)}; choose from {', '.join(CONTENDERS)}")
    corpus = corpora.make_corpus(args.workdir, args.images, kind="photos")
    out = _build(corpus, args.workdir)
    corpora.warm_page_cache(corpus.full)
    print(f"cores {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f}, {corpora.describe(corpus)}")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for round_number in range(args.rounds):
        for name in names if round_number % 2 == 0 else names[::-1]:
            result = _run_in_process(name, out, corpus.full, args.image_size)
            runs[name].append(result)
            print(f"round {round_number + 1} {name:18s} {result['images_per_s']:8,.0f} images/s "
                  f"{result['cpu_us_per_image']:7,.0f} us CPU/image ({result['images']} images, "
                  f"load average {os.getloadavg()[0]:.2f})", flush=True)
    print()
    print(_table(runs))
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "args": {k: str(v) for k, v in vars(args).items()}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
