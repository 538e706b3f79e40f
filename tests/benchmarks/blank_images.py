"""Does `--near_duplicates drop` stay linear on identical-looking images? Makes N all-black 16x16 PNGs whose
bytes all differ (a text chunk each: exact-duplicate detection sees N files, the perceptual hash one picture),
60% train, 20% validation, 20% test, builds them with `--near_duplicates drop` on the local runner under an
address-space cap (`--cap_gb`, as `prlimit --as`), and reports wall time, the peak RSS of the whole process tree
(sampled from /proc every SAMPLE_EVERY_S) and what metadata.json says of the pairs and groups. Not run by CI.

    python tests/benchmarks/blank_images.py --images 10000 --workdir /tmp/shardsmith-blank

Before identical signatures were grouped (shardsmith/near_duplicates/identical_signatures.py), 1,000 such images took
915 s and 11 GB (499,500 pairs), and 5,000 did not finish in 600 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_EVERY_S = 0.2
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
SPLIT_CYCLE = ("train", "train", "train", "validation", "test")
THREAD_STACK = 2 << 20  # glibc sizes thread stacks by RLIMIT_STACK: 8 MB each would spend the cap on stacks


def make_images(root: Path, count: int) -> Path:
    """`count` black PNGs with distinct bytes and their manifest, cached in `root`."""
    from PIL import Image, PngImagePlugin

    manifest = root / f"manifest-{count}.csv"
    if manifest.exists():
        return manifest
    root.mkdir(parents=True, exist_ok=True)
    rows = ["split,image_uri,label"]
    for i in range(count):
        name = f"blank_{i:06d}.png"
        if not (root / name).exists():
            info = PngImagePlugin.PngInfo()
            info.add_text("frame", str(i))
            Image.new("L", (16, 16), 0).save(root / name, pnginfo=info)
        rows.append(f"{SPLIT_CYCLE[i % len(SPLIT_CYCLE)]},{name},{'ab'[i % 2]}")
    manifest.write_text("\n".join(rows) + "\n")
    return manifest


def _tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):  # a process that just ended
            total += int(Path(f"/proc/{current}/statm").read_text().split()[1]) * PAGE_BYTES
        todo.extend(children.get(current, []))
    return total


def run_build(manifest: Path, out: Path, cap_bytes: int, deadline_s: float) -> dict:
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (cap_bytes, cap_bytes))
        resource.setrlimit(resource.RLIMIT_STACK, (THREAD_STACK, THREAD_STACK))

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    command = [sys.executable, "-m", "pipeline", "build", "--manifest", str(manifest), "--output_dir", str(out),
               "--name", "blank", "--near_duplicates", "drop", "--max_error_fraction", "1", "--overwrite"]
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, preexec_fn=cap)
    peak, output = 0, []
    reader = threading.Thread(target=lambda: output.extend(process.stdout), daemon=True)
    reader.start()
    while process.poll() is None:
        peak = max(peak, _tree_rss(process.pid))
        if time.monotonic() - started > deadline_s:
            process.kill()
            break
        time.sleep(SAMPLE_EVERY_S)
    code = process.wait()
    reader.join(timeout=10)
    result = {"exit_code": code, "wall_s": round(time.monotonic() - started, 1), "peak_rss_gb": round(peak / 1e9, 2)}
    metadata = out / "metadata.json"
    if code == 0 and metadata.exists():
        meta = json.loads(metadata.read_text())
        near = meta["near_duplicates"]
        keys = ("num_pairs", "num_listed", "num_dropped", "num_identical_groups", "num_identical_images",
                "num_capped_buckets")
        result |= {key: near.get(key) for key in keys} | {"num_examples": meta["num_examples"]}
        result["groups"] = [{k: g[k] for k in ("size", "splits")} for g in near.get("identical_groups", [])]
    else:
        result["output_tail"] = "".join(output)[-2000:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, nargs="+", default=[10_000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-blank"))
    parser.add_argument("--cap_gb", type=float, default=4.0, help="address-space cap of the build (prlimit --as)")
    parser.add_argument("--deadline_s", type=float, default=1800, help="kill the build after this long")
    args = parser.parse_args()
    for count in args.images:
        manifest = make_images(args.workdir / "images", count)
        result = run_build(manifest, args.workdir / f"out-{count}", int(args.cap_gb * 1e9), args.deadline_s)
        print(json.dumps({"images": count, **result}), flush=True)


if __name__ == "__main__":
    main()
