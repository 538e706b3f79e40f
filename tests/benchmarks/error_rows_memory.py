"""Do error rows cost memory in proportion to their number? Builds a manifest of N rows whose images all do not
exist (every row becomes an errors.jsonl line) with --max_error_fraction 1, on the local runner, and reports
wall time, CPU time and the peak RSS of the whole process tree (the build and its writer processes), sampled
from /proc every SAMPLE_EVERY_S. Not run by CI.

    python tests/benchmarks/error_rows_memory.py --rows 100000 1000000 --workdir /tmp/shardsmith-errors
    python tests/benchmarks/error_rows_memory.py --rows 100000 --code /path/to/another/checkout   # before/after

`--code` runs another checkout's pipeline (its root on PYTHONPATH) on the same manifests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_EVERY_S = 0.2
NUM_LABELS = 10
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def make_manifest(root: Path, rows: int) -> Path:
    """`rows` rows naming images that do not exist, label-sorted, 90% train and 10% test."""
    manifest = root / "manifest.csv"
    if manifest.exists():
        return manifest
    root.mkdir(parents=True, exist_ok=True)
    with manifest.open("w") as f:
        f.write("split,image_uri,label\n")
        per_label = -(-rows // NUM_LABELS)
        for n in range(rows):
            label = n // per_label
            f.write(f"{'test' if n % 10 == 0 else 'train'},img/l{label}/{n:08d}.jpg,l{label}\n")
    return manifest


def _tree_rss(pid: int) -> int:
    """Resident bytes of `pid` and every process descended from it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        with contextlib.suppress(OSError):  # a process that just ended
            total += int(Path(f"/proc/{current}/statm").read_text().split()[1]) * PAGE_BYTES
        todo += children.get(current, [])
    return total


def run_build(manifest: Path, out: Path, code: Path) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(code)}
    started = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "pipeline", "build", "--manifest", str(manifest), "--output_dir", str(out),
         "--name", "errors", "--overwrite", "--max_error_fraction", "1", "--num_shards", "train=4,test=1"],
        cwd=code, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
    )
    peak = [0]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss(child.pid))
            done.wait(SAMPLE_EVERY_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    done.set()
    sampler.join()
    wall = time.monotonic() - started
    err = child.stderr.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"build failed: {err.strip().splitlines()[-1:] or status}")
    metadata = json.loads((out / "metadata.json").read_text())
    return {"rows": metadata["num_input_rows"], "errors": metadata["num_errors"], "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime, "peak_tree_rss_mb": peak[0] / 1e6,
            "largest_process_rss_mb": usage.ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--workdir", default="/tmp/shardsmith-errors")
    parser.add_argument("--code", type=Path, default=ROOT, help="the checkout whose pipeline runs (default: this)")
    args = parser.parse_args()
    results = []
    for rows in args.rows:
        root = Path(args.workdir) / f"r{rows}"
        result = run_build(make_manifest(root, rows), root / "out", args.code.resolve())
        results.append(result)
        print(f"{rows:>9} rows: {result['errors']} error lines, wall {result['wall_s']:.1f} s, CPU "
              f"{result['cpu_s']:.1f} s, peak tree RSS {result['peak_tree_rss_mb']:.0f} MB (largest process "
              f"{result['largest_process_rss_mb']:.0f} MB)", flush=True)
    if len(results) > 1:
        first, last = results[0], results[-1]
        print(f"peak tree RSS at {last['rows']} rows / at {first['rows']} rows: "
              f"{last['peak_tree_rss_mb'] / first['peak_tree_rss_mb']:.2f}x")
    print(f"code: {args.code.resolve()}; machine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
