"""Where a local build's wall time goes, phase by phase, at two sizes: what grows with the rows and whether a
core sits idle while it does. Not run by CI.

    python tests/benchmarks/build_phases.py \
        --small /tmp/shardsmith-bench/corpus-photos-n20000/manifest-quarter.csv \
        --large /tmp/shardsmith-bench/corpus-photos-n20000/manifest.csv --repeats 3

Each build runs in a fresh process (`pipeline.cli.main`, `--validate header`), small and large manifests taking
turns, with the moments below noted from inside the launcher:

    start-up     the process's start to the first manifest row read (imports, checks, the graph)
    rows         the first row read to the first shard handed to the writers: every stage on rows, placement
                 included, on the launcher's one core (no shard can start before the last row is placed), but for
                 a large manifest's lines, which the writer processes parse once started
                 (shardsmith/shard_writer/parallel_parse.py)
    writing      the first shard handed to the writers to the last shard written
    last shard   the last shard's end minus the one before it: the last shard handed out is written in parts by
                 every writer at once, then joined in the launcher (shardsmith/shard_writer/split_shard.py)
    join         of which the join (0 when the last shard was written whole)
    after        the last shard to the command's return (summaries, the report, publishing)

Then the medians per size and, per extra row, (large - small) / (rows at large - rows at small) for each phase.
A build small enough to be written without writer processes (transforms/write_shards.py) has no `rows` or
`writing` phase to report: give manifests of more than 256 images.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # corpora.py lies beside this file, however it is run
from corpora import BUILD_DEADLINE_S, manifest_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NO_WRITER_PROCESSES = 3  # the probe's exit status for a build that started no writer processes
PHASES = ("start-up", "rows", "writing", "last shard", "join", "after", "total")
PROBE = f"""
import sys, time
started = time.monotonic()
marks = {{"done": []}}

import shardsmith.shard_writer.shard_worker as shard_worker
import transforms.read_manifest as read_manifest
import transforms.write_shards as write_shards

pool_init = shard_worker.ShardWriterPool.__init__
def noted_pool_init(self, *args, **kwargs):
    marks["pool"] = True
    pool_init(self, *args, **kwargs)
shard_worker.ShardWriterPool.__init__ = noted_pool_init

write_shard = write_shards.WriteShardFn.process
def noted_write_shard(self, *args, **kwargs):
    marks.setdefault("writers", time.monotonic())
    yield from write_shard(self, *args, **kwargs)
write_shards.WriteShardFn.process = noted_write_shard

outputs = write_shards._outputs
def noted_outputs(outcome):
    marks["done"].append(time.monotonic())
    return outputs(outcome)
write_shards._outputs = noted_outputs

join_parts = write_shards.join_parts
def noted_join(*args):
    started = time.monotonic()
    try:
        return join_parts(*args)
    finally:
        marks["join"] = time.monotonic() - started
write_shards.join_parts = noted_join

batches = read_manifest.ReadSourceFn._batches
def noted_batches(self, source):
    marks.setdefault("read", time.monotonic())
    yield from batches(self, source)
read_manifest.ReadSourceFn._batches = noted_batches

from pipeline.cli import main
code = main(["build", "--manifest", sys.argv[1], "--output_dir", sys.argv[2], "--name", "bench", "--overwrite",
             "--validate", "header"])
ended = time.monotonic()
if code or "pool" not in marks or len(marks["done"]) < 2:
    sys.exit(code or {NO_WRITER_PROCESSES})
done = sorted(marks["done"])
print(marks["read"] - started, marks["writers"] - marks["read"], done[-1] - marks["writers"], done[-1] - done[-2],
      marks.get("join", 0.0), ended - done[-1], ended - started)
"""


def _phases(manifest: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="phases-") as out:
        try:
            done = subprocess.run([sys.executable, "-c", PROBE, str(manifest), out], cwd=REPO, capture_output=True,
                                  text=True, timeout=BUILD_DEADLINE_S)
        except subprocess.TimeoutExpired:
            sys.exit(f"the build of {manifest} did not finish within {BUILD_DEADLINE_S} s; stopped it")
    if done.returncode == NO_WRITER_PROCESSES:
        sys.exit(f"the build of {manifest} was written without writer processes (a small build): give a manifest "
                 "of more than 256 images")
    if done.returncode:
        sys.exit(f"the build of {manifest} failed (exit {done.returncode}): "
                 + " / ".join(done.stderr.strip().splitlines()[-3:]))
    return dict(zip(PHASES, map(float, done.stdout.split()[-len(PHASES):]), strict=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=Path, required=True, help="the smaller CSV manifest (more than 256 rows)")
    parser.add_argument("--large", type=Path, required=True, help="the larger CSV manifest")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = {"small": args.small, "large": args.large}
    rows = {name: manifest_rows(path) for name, path in sizes.items()}
    if rows["large"] <= rows["small"]:
        parser.error(f"--large has {rows['large']} rows, --small {rows['small']}: give --large more")
    runs: dict[str, list[dict[str, float]]] = {"small": [], "large": []}
    for repeat in range(args.repeats):
        for name in ("small", "large") if repeat % 2 == 0 else ("large", "small"):
            phases = _phases(sizes[name])
            runs[name].append(phases)
            print(f"repeat {repeat + 1} {name:5} ({rows[name]} rows): "
                  + ", ".join(f"{phase} {seconds:.2f} s" for phase, seconds in phases.items()), flush=True)
    medians = {name: {p: statistics.median(r[p] for r in runs[name]) for p in PHASES} for name in runs}
    extra = rows["large"] - rows["small"]
    print(f"\nmedians of {args.repeats}; per extra row: ({rows['large']} - {rows['small']} rows)")
    print("| phase | small (s) | large (s) | per extra row (us) |")
    print("|---|---:|---:|---:|")
    for phase in PHASES:
        small, large = medians["small"][phase], medians["large"][phase]
        print(f"| {phase} | {small:.2f} | {large:.2f} | {(large - small) / extra * 1e6:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
