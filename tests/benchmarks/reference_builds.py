"""Reference builds for refactors that must not change a byte: builds one input set in nine configurations
(classification from a manifest and from TFRecorder's folder, path mode, gzip with writer processes, re-encode
and resize, detection, segmentation, multi-label, features with --on_duplicate drop) and prints the SHA-256 of
every file a build writes except those that name the build or the time (metadata.json, build.json,
dataset_info.json, transform_fn/).

    python tests/benchmarks/reference_builds.py --workdir /tmp/ref > before.txt
    ... change the code ...
    python tests/benchmarks/reference_builds.py --workdir /tmp/ref > after.txt && diff before.txt after.txt

The inputs are made once per work folder (`shardsmith sample` plus manifests derived from it) and reused, so
both runs read the same image files.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import subprocess
import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[2]
TFRECORDER_FOLDER = ROOT / "tests/data/tfrecorder/images"
VOLATILE = ("metadata.json", "build.json", "dataset_info.json")


def make_inputs(data: Path) -> None:
    """The demo set (with its deliberately bad rows) and detection, segmentation, multi-label and feature
    manifests over the same images."""
    subprocess.run([sys.executable, "-m", "pipeline", "sample", str(data), "--per_label", "12"], check=True,
                   capture_output=True)
    rows = [line.split(",")[:3] for line in (data / "manifest.csv").read_text().splitlines()[1:]]
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
    return {
        "demo": ["--manifest", str(data / "manifest.csv")],
        "tfrecorder": ["--manifest", str(TFRECORDER_FOLDER)],
        "path": ["--manifest", str(data / "manifest.csv"), "--image_mode", "path",
                 "--num_shards", "train=3,validation=1,test=1"],
        "gzip": ["--manifest", str(data / "manifest.csv"), "--compression", "gzip", "--writer_processes", "2"],
        "reencode": ["--manifest", str(data / "manifest.csv"), "--reencode", "jpeg", "--max_side", "32",
                     "--jpeg_quality", "80"],
        "detection": ["--manifest", str(data / "det.csv"), "--task", "detection"],
        "segmentation": ["--manifest", str(data / "seg.csv"), "--task", "segmentation"],
        "multi_label": ["--manifest", str(data / "multi.csv"), "--task", "multi_label"],
        "features": ["--manifest", str(data / "feat.csv"), "--feature", "weight:float",
                     "--feature", "tags:string_list", "--on_duplicate", "drop"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-reference"))
    args = parser.parse_args()
    data, builds = args.workdir / "data", args.workdir / "builds"
    if not (data / "feat.csv").exists():
        make_inputs(data)
    failed = 0
    for name, flags in configurations(data).items():
        out = builds / name
        subprocess.run(["rm", "-rf", str(out)], check=True)
        done = subprocess.run([sys.executable, "-m", "pipeline", "build", "--output_dir", str(out), "--name", "g",
                               "--seed", "5", "--max_error_fraction", "0.5", *flags], capture_output=True, text=True)
        if done.returncode != 0:
            failed += 1
            print(f"FAILED {name} (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
            continue
        for path in sorted((out / "builds").rglob("*")):
            relative = path.relative_to(out / "builds")
            if path.is_file() and path.name not in VOLATILE and "transform" not in str(relative):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
                print(f"{digest} {name}/{Path(*relative.parts[1:])}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
