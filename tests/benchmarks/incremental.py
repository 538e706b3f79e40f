"""What a scheduled `--incremental` build costs against a full rebuild of the same rows (docs/versions.md).

On a CSV manifest of N images (default: compare.py's 20,000-image corpus), a first `--incremental` build publishes
all rows but every 20th (N - N/20 rows); then, alternating, each repetition runs
  incremental  the next night's manifest (every 20th row added, every 95th of the published rows removed) built
               with --incremental into a hard-linked copy of the published folder;
  full         the same manifest built from scratch into an empty folder.
Whole processes are timed (start-up included); CPU is the process tree's, peak RSS the tree's summed RSS sampled
every 50 ms. Not run by CI. Run from the repository root:

    python tests/benchmarks/incremental.py --repeats 2
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import TreeSampler, _reap_orphans, become_subreaper  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEFAULT_MANIFEST = Path("/tmp/shardsmith-bench/corpus-n20000/manifest.csv")
NEW_EVERY, REMOVED_EVERY = 20, 95


def write_manifest(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def run_build(manifest: Path, out: Path, log: Path, *extra: str) -> dict:
    return run_shardsmith(out, log, "build", "--manifest", str(manifest), "--output_dir", str(out), "--name",
                          "bench", *extra)


def timed_process(command: list[str], log: Path, checkout: Path = REPO) -> dict:
    """Runs `command` as a whole process (its output in `log`) in `checkout` (the code it imports), timed from
    outside: wall, CPU of its process tree (reaped orphans included) and the tree's peak summed RSS; stops the
    benchmark, naming `log`, when it fails."""
    sampler = TreeSampler()
    sampler.start()
    started = time.monotonic()
    with log.open("wb") as f:
        child = subprocess.Popen(command, cwd=checkout, stdout=f, stderr=subprocess.STDOUT,
                                 env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(checkout)})
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    cpu = usage.ru_utime + usage.ru_stime + _reap_orphans()
    sampler.stop()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command[1:5])} failed; see {log}")
    return {"wall_s": wall, "cpu_s": cpu, "peak_rss_mb": sampler.peak_rss / 2**20}


def run_shardsmith(out: Path, log: Path, *args: str) -> dict:
    """Runs the shardsmith command (`python -m pipeline ARGS`) as `timed_process` does, and reads the version it
    published in `out`."""
    timed = timed_process([sys.executable, "-m", "pipeline", *args], log)
    metadata = json.loads((out / "metadata.json").read_text())
    return {**timed, "records": metadata["num_examples"], "incremental": metadata.get("incremental")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST,
                        help="CSV with a header (split,image_uri,label); default: compare.py's 20,000-image corpus "
                             "(`python tests/benchmarks/compare.py --images 20000` makes it)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench/incremental"))
    parser.add_argument("--json", type=Path, help="also write the runs here")
    args = parser.parse_args()
    if not args.manifest.exists():
        raise SystemExit(f"{args.manifest} does not exist; make it with python tests/benchmarks/compare.py "
                         "--images 20000, or pass --manifest")
    become_subreaper()
    with args.manifest.open(newline="") as f:
        reader = csv.reader(f)
        header, rows = next(reader), list(reader)
    # The manifests live beside the corpus's, so its relative image paths resolve.
    folder = args.manifest.parent
    added = rows[::NEW_EVERY]
    published = [row for i, row in enumerate(rows) if i % NEW_EVERY]
    removed = published[::REMOVED_EVERY]
    next_night = [row for i, row in enumerate(published) if i % REMOVED_EVERY] + added
    day1 = write_manifest(folder / "incremental-day1.csv", header, published)
    day2 = write_manifest(folder / "incremental-day2.csv", header, next_night)
    shutil.rmtree(args.workdir, ignore_errors=True)
    (args.workdir / "logs").mkdir(parents=True)
    base = args.workdir / "published"
    first = run_build(day1, base, args.workdir / "logs" / "day1.log", "--incremental")
    print(f"published {first['records']:,} records in {first['wall_s']:.1f} s; next night: +{len(added):,} rows, "
          f"-{len(removed):,} rows, {len(next_night):,} in all", flush=True)
    runs = []
    for repetition in range(args.repeats):
        for kind in ("incremental", "full"):
            out = args.workdir / f"{kind}-{repetition}"
            shutil.rmtree(out, ignore_errors=True)
            if kind == "incremental":
                shutil.copytree(base, out, copy_function=os.link)  # published files are never rewritten
                result = run_build(day2, out, args.workdir / "logs" / f"{kind}-{repetition}.log", "--incremental")
            else:
                result = run_build(day2, out, args.workdir / "logs" / f"{kind}-{repetition}.log")
            shutil.rmtree(out, ignore_errors=True)
            runs.append({"kind": kind, "repetition": repetition, **result})
            print(f"{kind:<12} {result['wall_s']:7.1f} s wall {result['cpu_s']:7.1f} s CPU "
                  f"{result['peak_rss_mb']:6.0f} MB peak, {result['records']:,} records", flush=True)
    report(runs, len(added), len(removed))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))


def report(runs: list[dict], added: int, removed: int) -> None:
    def median(kind: str, key: str) -> float:
        values = sorted(run[key] for run in runs if run["kind"] == kind)
        return values[len(values) // 2] if len(values) % 2 else sum(values[len(values) // 2 - 1:][:2]) / 2

    change = next(run["incremental"] for run in runs if run["kind"] == "incremental")
    print("\n| measure | incremental | full rebuild | ratio | target |\n|---|---:|---:|---:|---|")
    for key, unit, target in (("wall_s", "s", "<= 0.5x"), ("cpu_s", "s", ""), ("peak_rss_mb", "MB", "<= 1.0x")):
        ours, theirs = median("incremental", key), median("full", key)
        print(f"| {key.removesuffix('_s').removesuffix('_mb').replace('_', ' ')} ({unit}, median) | {ours:.1f} | "
              f"{theirs:.1f} | {ours / theirs:.2f}x | {target} |")
    print(f"\nimages read by the incremental build: {change['num_images_read']:,} (rows added {added:,}); rows "
          f"carried over {change['num_carried_rows']:,}, removed {change['num_removed_rows']:,} (of {removed:,}), "
          f"shards rewritten without them {change['num_rewritten_shards']}")


if __name__ == "__main__":
    main()
