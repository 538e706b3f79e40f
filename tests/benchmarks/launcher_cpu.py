"""Where a local build's CPU goes: the launcher (Beam's runner and every stage on rows) against its shard writer
processes (reading, checking, encoding and writing images). Not run by CI.

    python tests/benchmarks/launcher_cpu.py \
        --small /tmp/shardsmith-bench/corpus-photos-n20000/manifest-quarter.csv \
        --large /tmp/shardsmith-bench/corpus-photos-n20000/manifest.csv --repeats 2

Each build runs in a fresh process (`pipeline.cli.main`, in-process so that its own CPU is the launcher's; the
writers are its children), alternating small and large manifests. Per extra row: (CPU at large - CPU at small) /
(rows at large - rows at small), for the launcher and for the writers, medians over the repeats. Each build's
line also gives the launcher's full garbage collections: how many, and their CPU.

`--repo PATH` (repeatable) measures other checkouts of shardsmith instead of this one, taking turns within each
repeat, so that a before/after on a machine whose speed drifts compares runs made minutes apart:

    python tests/benchmarks/launcher_cpu.py --small ... --large ... --repo ../before --repo . --repeats 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # corpora.py lies beside this file, however it is run
from corpora import BUILD_DEADLINE_S, manifest_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import gc, resource, sys, time
full = [0, 0.0]  # the launcher's full (generation 2) collections: how many, CPU seconds

def timed(phase, info, started=[0.0]):
    if info["generation"] == 2:
        if phase == "start":
            started[0] = time.process_time()
        else:
            full[0] += 1
            full[1] += time.process_time() - started[0]

gc.callbacks.append(timed)
from pipeline.cli import main
code = main(["build", "--manifest", sys.argv[1], "--output_dir", sys.argv[2], "--name", "bench", "--overwrite",
             "--validate", sys.argv[3]])
own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime, full[0], full[1])
sys.exit(code)
"""


def _cpu(manifest: Path, validate: str, repo: Path) -> Cpu:
    with tempfile.TemporaryDirectory(prefix="shardsmith-launcher-cpu-") as out:
        done = subprocess.run([sys.executable, "-c", PROBE, str(manifest), out, validate], cwd=repo,
                              capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(repo)}, timeout=BUILD_DEADLINE_S)
    launcher, writers, collections, collecting = done.stdout.split()[-4:]
    return Cpu(float(launcher), float(writers), int(collections), float(collecting))


@dataclass(frozen=True)
class Cpu:
    """One build's CPU seconds: the launcher's, its children's (writers and the tf.transform process), and the
    launcher's full garbage collections (how many, and their CPU seconds, part of the launcher's)."""

    launcher: float
    writers: float
    full_collections: int
    collecting: float


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=Path, required=True, help="a CSV manifest (header split,image_uri,label)")
    parser.add_argument("--large", type=Path, required=True, help="the same kind of manifest, with more rows")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--validate", choices=("header", "decode"), default="header")
    parser.add_argument("--repo", type=Path, action="append", help="a checkout to measure (default: this one)")
    args = parser.parse_args()
    repos = [repo.resolve() for repo in args.repo or [REPO]]
    extra = manifest_rows(args.large) - manifest_rows(args.small)
    launcher_us: dict[Path, list[float]] = {repo: [] for repo in repos}
    writers_us: dict[Path, list[float]] = {repo: [] for repo in repos}
    for repeat in range(args.repeats):
        order = (args.small, args.large) if repeat % 2 == 0 else (args.large, args.small)
        for repo in repos if repeat % 2 == 0 else repos[::-1]:
            cpu = {manifest: _cpu(manifest, args.validate, repo) for manifest in order}
            small, large = cpu[args.small], cpu[args.large]
            launcher_us[repo].append(1e6 * (large.launcher - small.launcher) / extra)
            writers_us[repo].append(1e6 * (large.writers - small.writers) / extra)
            print(f"repeat {repeat + 1} {repo}: launcher {small.launcher:.1f} -> {large.launcher:.1f} s, writers "
                  f"{small.writers:.1f} -> {large.writers:.1f} s of CPU; the launcher's full collections "
                  f"{small.full_collections} in {small.collecting:.2f} s -> {large.full_collections} in "
                  f"{large.collecting:.2f} s", flush=True)
    for repo in repos:
        launcher, writers = statistics.median(launcher_us[repo]), statistics.median(writers_us[repo])
        print(f"{repo}: CPU per extra row ({extra} rows, median of {args.repeats}): launcher {launcher:.0f} us, "
              f"writer processes {writers:.0f} us, together {launcher + writers:.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
