"""What a dataset card costs on a large version (docs/card.md, "Bounds"; docs/performance.md). Not run by CI.

    python tests/benchmarks/card_time.py --rows 100000 --labels 100 --repeats 3

Makes (or reuses, in --workdir) `--rows` distinct 8x8 JPEGs in `--labels` labels (night_cost.py's corpus),
builds them once with `--no_card`, then, --repeats times: `card_bytes()` in this process (the work a build's
last step does), and `shardsmith card OUT --output PATH` as a whole process, timed from outside (start-up
included; CPU of the process tree). Prints each run, the medians and the card's size.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from incremental import run_build, run_shardsmith  # noqa: E402
from night_cost import make_images, write_manifest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--labels", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench/card"))
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from shardsmith.card import card_bytes

    args.workdir.mkdir(parents=True, exist_ok=True)
    rows = make_images(args.workdir, args.rows, seed=0)
    for i, row in enumerate(rows):
        row[2] = f"label{i * args.labels // len(rows):04d}"  # label-sorted, as exports are
    manifest = write_manifest(args.workdir / f"manifest-{args.rows}-{args.labels}.csv", rows)
    out = args.workdir / f"out-{args.rows}-{args.labels}"
    if not (out / "metadata.json").exists():
        print(f"building {args.rows:,} rows ...", flush=True)
        built = run_build(manifest, out, args.workdir / "build.log", "--validate", "header", "--no_card")
        print(f"  build {built['wall_s']:.1f} s", flush=True)
    build_id = json.loads((out / "metadata.json").read_text())["build_id"]
    in_process, commands, size = [], [], 0
    for repeat in range(args.repeats):
        started = time.perf_counter()
        size = len(card_bytes(str(out), build_id))
        in_process.append(time.perf_counter() - started)
        command = run_shardsmith(out, args.workdir / "card.log", "card", str(out), "--output",
                                 str(args.workdir / "card.html"))
        commands.append(command)
        print(f"run {repeat + 1}: card_bytes {in_process[-1]:.2f} s; `shardsmith card` {command['wall_s']:.2f} s "
              f"wall, {command['cpu_s']:.2f} s CPU, peak {command['peak_rss_mb']:.0f} MB", flush=True)
    print(f"{args.rows:,} records, {args.labels} labels: card_bytes median {statistics.median(in_process):.2f} s, "
          f"`shardsmith card` median {statistics.median(c['wall_s'] for c in commands):.2f} s wall; "
          f"card {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
