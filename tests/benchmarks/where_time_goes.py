"""Where a local build's time goes: the fixed costs (imports, writing transform_fn) and the per-image costs of
a shard writer, each timed alone on one core. Not run by CI.

    python tests/benchmarks/where_time_goes.py --images 2000

Fixed costs are timed in fresh processes (imports are cached after the first time in a process). Per-image
costs use JPEGs from compare.py's corpus when it exists (--corpus), else photo-like JPEGs made here.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_CORPUS = Path("/tmp/shardsmith-bench/corpus-n20000/img")

IMPORT_PROBES = {
    "python -c pass": "pass",
    "import apache_beam (and its local runner)": "import apache_beam\n"
    "from apache_beam.runners.portability.fn_api_runner import FnApiRunner",
    "import tensorflow": "import tensorflow",
    "import tensorflow_transform.beam": "import tensorflow_transform.beam",
    "import the shard writer process's modules":
        "import shardsmith.shard_writer.shard_worker, shardsmith.shard_writer.shard_file",
}
TRANSFORM_FN_STEP = """
import tempfile, time
from shardsmith.format.transform_fn import write_transform_fn
started = time.perf_counter()
write_transform_fn(tuple(f"label_{i:02d}" for i in range(10)), tempfile.mkdtemp())
print(time.perf_counter() - started)
"""


def _wall_of(code: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - started


def fixed_costs(repeats: int) -> None:
    print(f"fixed costs, median of {repeats} fresh processes:")
    for name, code in IMPORT_PROBES.items():
        print(f"  {statistics.median(_wall_of(code) for _ in range(repeats)):6.2f} s  {name}")
    runs = [float(subprocess.run([sys.executable, "-c", TRANSFORM_FN_STEP], cwd=REPO, check=True,
                                 capture_output=True, text=True).stdout.split()[-1]) for _ in range(repeats)]
    print(f"  {statistics.median(runs):6.2f} s  transform_fn for 10 labels, after its imports "
          "(shardsmith.format.transform_fn.write_transform_fn; no TensorFlow)")


def _images(corpus: Path, count: int) -> list[bytes]:
    files = sorted(corpus.rglob("*.jpg"))[:count] if corpus.is_dir() else []
    if len(files) == count:
        return [f.read_bytes() for f in files]
    from PIL import Image, ImageFilter

    rng = random.Random(0)
    images = []
    for _ in range(count):
        noise = Image.frombytes("RGB", (180, 135), rng.randbytes(180 * 135 * 3)).resize((720, 540))
        out = io.BytesIO()
        noise.filter(ImageFilter.GaussianBlur(2)).save(out, "JPEG", quality=89)
        images.append(out.getvalue())
    return images


def per_image_costs(count: int, corpus: Path) -> None:
    sys.path.insert(0, str(REPO))
    from shardsmith.format.tfrecord import frame
    from shardsmith.images.load_images import ImageInfo, inspect_image, read_input_file
    from shardsmith.rows import ManifestRow
    from shardsmith.shard_writer.encode import encode_image_example

    images = _images(corpus, count)
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, data in enumerate(images):
            paths.append(Path(tmp) / f"{i}.jpg")
            paths[-1].write_bytes(data)
        sizes = [len(d) for d in images]
        row = ManifestRow("m.csv", 0, 1, "img/x.jpg", "/x", "train", "label_01", 1, 1)
        info = ImageInfo("jpeg", 540, 720, 3)
        records = [encode_image_example(row, d, info, "ab" * 32) for d in images]
        steps = {
            "read the file (page cache)": (lambda i: read_input_file(str(paths[i]), 64 << 20, sizes[i])),
            "--validate header (JPEG start-of-frame)": (lambda i: inspect_image(images[i], "header")),
            "--validate decode, JPEG at full scale (as before)": (lambda i: inspect_image(images[i], "decode",
                                                                                          jpeg_scale=1)),
            "--validate decode (JPEG at 1/8 scale, every block)": (lambda i: inspect_image(images[i], "decode")),
            "SHA-256 of the bytes": (lambda i: hashlib.sha256(images[i]).hexdigest()),
            "build and serialize the Example": (lambda i: encode_image_example(row, images[i], info, "ab" * 32)),
            "TFRecord framing (2 masked CRC32C)": (lambda i: frame(records[i])),
        }
        print(f"\nper-image costs, one core, {count} JPEGs of median {statistics.median(sizes) / 1e3:.0f} KB:")
        for name, step in steps.items():
            started = time.perf_counter()
            for i in range(count):
                step(i)
            print(f"  {(time.perf_counter() - started) / count * 1e6:7.1f} us  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = parser.parse_args()
    fixed_costs(args.repeats)
    per_image_costs(args.images, args.corpus)


if __name__ == "__main__":
    main()
