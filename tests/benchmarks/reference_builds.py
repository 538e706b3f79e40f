"""Reference builds for refactors that must not change a byte: builds a fixed set of inputs with the local runner
and prints one JSON object mapping every file the builds write to its SHA-256.

The builds: the demo (`bash launch.sh demo`'s flags), TFRecorder's data.csv and its images/ class folders, an
`--incremental` night on a copy of the demo with two rows appended and one removed, `shardsmith compact` of
that night, and nine more configurations of the demo set (path mode, gzip with writer processes, re-encode and
resize, detection, segmentation, multi-label, features with --on_duplicate drop, and the TFRecorder folder with
a seed).

Paths are relative to each build's output folder, with build ids replaced by their order (`builds/build-0/...`),
inside file contents too (a carried-over version names its earlier builds). metadata.json, build.json and
retired.json are hashed with their time and id fields removed, card.html with its times; transform_fn/ and
transformed_metadata/ are left out (TensorFlow's SavedModel is not byte-stable).

    python tests/benchmarks/reference_builds.py --workdir /tmp/ref > before.json
    ... change the code ...
    python tests/benchmarks/reference_builds.py --workdir /tmp/ref > after.json && diff before.json after.json

The inputs are made once per work folder (`shardsmith sample` plus manifests derived from it) and reused, so
both runs read the same image files; the builds are made afresh on each run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
TFRECORDER = ROOT / "tests/data/tfrecorder"
DEMO_FLAGS = ["--name", "demo", "--num_shards", "train=4,validation=2,test=2", "--max_error_fraction", "0.1"]
BUILD_ID = re.compile(rb"\d{8}T\d{6}Z-[0-9a-f]{8}")
VOLATILE_KEYS = {"build_id", "started", "published", "retired"}
# The dataset card shows when its version was published.
TIMESTAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")
TIMED_FILES = ("metadata.json", "build.json", "retired.json")
LEFT_OUT = ("transform_fn", "transformed_metadata")


def make_inputs(data: Path) -> None:
    """The demo set (with its deliberately bad rows), the night's manifest, and detection, segmentation,
    multi-label and feature manifests over the same images."""
    subprocess.run([sys.executable, "-m", "pipeline", "sample", str(data)], check=True, capture_output=True)
    lines = (data / "manifest.csv").read_text().splitlines()
    night = [line for line in lines if line != lines[5]]  # one row removed
    for i, colour in enumerate([(200, 30, 30), (30, 200, 30)]):  # two rows appended, new images
        Image.new("RGB", (40, 32), colour).save(data / f"images/circle/night_{i}.png")
        night.append(f"train,images/circle/night_{i}.png,circle")
    (data / "night.csv").write_text("\n".join(night) + "\n")
    rows = [line.split(",")[:3] for line in lines[1:]]
    rows = [r for r in rows if len(r) == 3]
    rng = random.Random(7)
    manifests = {"det.csv": ["split,image_uri,label,xmin,ymin,,,xmax,ymax,,"],
                 "seg.csv": ["split,image_uri,label,mask_uri"], "multi.csv": ["split,image_uri,label"],
                 "feat.csv": ["split,image_uri,label,weight,tags"]}
    (data / "masks").mkdir(exist_ok=True)
    for i, (split, uri, label) in enumerate(rows):
        for _ in range(1 + i % 3):
            x0, y0 = rng.random() * 0.5, rng.random() * 0.5
            manifests["det.csv"].append(f"{split},{uri},{label},{x0:.3f},{y0:.3f},,,{x0 + 0.3:.3f},{y0 + 0.4:.3f},,")
        try:
            with Image.open(data / uri) as image:
                size = image.size
        except (OSError, ValueError):  # the demo's unreadable files
            size = (8, 8)
        mask = Image.new("L", size)
        mask.paste(i % 3, (0, 0, size[0] // 2, size[1]))
        mask.save(data / f"masks/{i:03d}.png")
        manifests["seg.csv"].append(f"{split},{uri},{label},masks/{i:03d}.png")
        manifests["multi.csv"].append(f"{split},{uri},{label};{rows[(i * 7) % len(rows)][2]}")
        manifests["feat.csv"].append(f"{split},{uri},{label},{i * 0.5},a;b")
    for name, lines in manifests.items():
        (data / name).write_text("\n".join(lines) + "\n")


def configurations(data: Path) -> dict[str, list[str]]:
    """The plain builds: output folder name -> build flags."""
    demo = ["--manifest", str(data / "manifest.csv")]
    varied = ["--name", "g", "--seed", "5", "--max_error_fraction", "0.5"]
    return {
        "demo": [*demo, *DEMO_FLAGS],
        "tfrecorder-csv": ["--manifest", str(TFRECORDER / "data.csv"), "--name", "pets",
                           "--path_map", "tfrecorder/test_data/images=images"],
        "tfrecorder-folder": ["--manifest", str(TFRECORDER / "images"), "--name", "pets"],
        "tfrecorder-seed": ["--manifest", str(TFRECORDER / "images"), *varied],
        "path": [*demo, *varied, "--image_mode", "path", "--num_shards", "train=3,validation=1,test=1"],
        "gzip": [*demo, *varied, "--compression", "gzip", "--writer_processes", "2"],
        "reencode": [*demo, *varied, "--reencode", "jpeg", "--max_side", "32", "--jpeg_quality", "80"],
        "detection": ["--manifest", str(data / "det.csv"), *varied, "--task", "detection"],
        "segmentation": ["--manifest", str(data / "seg.csv"), *varied, "--task", "segmentation"],
        "multi_label": ["--manifest", str(data / "multi.csv"), *varied, "--task", "multi_label"],
        "features": ["--manifest", str(data / "feat.csv"), *varied, "--feature", "weight:float",
                     "--feature", "tags:string_list", "--on_duplicate", "drop"],
    }


def shardsmith(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pipeline", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"FAILED shardsmith {' '.join(args[:1])} (exit {done.returncode}):\n{done.stderr[-2000:]}")


def without_volatile(value: object) -> object:
    if isinstance(value, dict):
        return {k: without_volatile(v) for k, v in value.items() if not (k in VOLATILE_KEYS and isinstance(v, str))}
    if isinstance(value, list):
        return [without_volatile(v) for v in value]
    return value


def file_hashes(out: Path, prefix: str) -> dict[str, str]:
    """SHA-256 of each file under `out`, build ids replaced by their order in names and contents."""
    files = sorted(p for p in out.rglob("*") if p.is_file())
    found = {m for p in files for m in BUILD_ID.findall(str(p).encode())}
    found |= {m for p in files if p.stat().st_size < 1 << 20 for m in BUILD_ID.findall(p.read_bytes())}
    ids = sorted(m.decode() for m in found)
    order = {build_id: f"build-{i}" for i, build_id in enumerate(ids)}  # ids start with their UTC time

    def renamed(data: bytes) -> bytes:
        return BUILD_ID.sub(lambda m: order[m.group().decode()].encode(), data)

    hashes = {}
    for path in files:
        relative = renamed(str(path.relative_to(out)).encode()).decode()
        if any(part in relative for part in LEFT_OUT):
            continue
        data = path.read_bytes()
        if path.name in TIMED_FILES and data:
            data = json.dumps(without_volatile(json.loads(data)), sort_keys=True).encode()
        elif path.name == "card.html":
            data = TIMESTAMP.sub(b"TIME", data)
        hashes[f"{prefix}/{relative}"] = hashlib.sha256(renamed(data)).hexdigest()
    return hashes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-reference"))
    args = parser.parse_args()
    data, builds = args.workdir / "data", args.workdir / "builds"
    if not (data / "night.csv").exists():
        make_inputs(data)
    shutil.rmtree(builds, ignore_errors=True)
    hashes: dict[str, str] = {}
    for name, flags in configurations(data).items():
        shardsmith("build", "--output_dir", str(builds / name), *flags)
        hashes.update(file_hashes(builds / name, name))
    shutil.copytree(builds / "demo", builds / "night")
    shardsmith("build", "--output_dir", str(builds / "night"), "--manifest", str(data / "night.csv"),
               *DEMO_FLAGS, "--incremental")
    hashes.update(file_hashes(builds / "night", "night"))
    shutil.copytree(builds / "night", builds / "compacted")
    shardsmith("compact", str(builds / "compacted"))
    hashes.update(file_hashes(builds / "compacted", "compacted"))
    print(json.dumps(hashes, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
