"""A local build's marginal rate (extra images per second of wall time between a small and a large manifest) for
several ways of running it, whole builds taking turns. Not run by CI.

    python tests/benchmarks/marginal_rate.py \
        --small /tmp/shardsmith-bench/corpus-photos-n20000/manifest-quarter.csv \
        --large /tmp/shardsmith-bench/corpus-photos-n20000/manifest.csv \
        --variant "writers=2|--writer_processes 2" --variant "writers=3|--writer_processes 3" --repeats 4

Each `--variant "NAME|FLAGS"` adds FLAGS to `python -m pipeline build --validate header`; `--variant "NAME@PATH|"`
runs the checkout at PATH instead of this one (a before/after). Every build is a fresh process, as a user runs it
(imports and start-up count), and within each repeat every variant builds the small manifest, then every variant
the large one, so that a machine whose speed drifts between runs minutes apart drifts for all of them. Marginal
rate: (rows at large - rows at small) / (wall at large - wall at small), per repeat and from the medians.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # corpora.py lies beside this file, however it is run
from corpora import BUILD_DEADLINE_S, manifest_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Variant:
    name: str
    repo: Path
    flags: list[str]
    walls: dict[Path, list[float]] = field(default_factory=dict)


def _variant(text: str) -> Variant:
    name, _, flags = text.partition("|")
    name, _, repo = name.partition("@")
    return Variant(name, Path(repo).resolve() if repo else REPO, shlex.split(flags))


def _wall(variant: Variant, manifest: Path) -> float:
    with tempfile.TemporaryDirectory(prefix="shardsmith-marginal-") as out:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pipeline", "build", "--manifest", str(manifest), "--output_dir", out,
                        "--name", "bench", "--overwrite", "--validate", "header", *variant.flags],
                       cwd=variant.repo, check=True, capture_output=True, timeout=BUILD_DEADLINE_S)
        return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=Path, required=True, help="a CSV manifest (header split,image_uri,label)")
    parser.add_argument("--large", type=Path, required=True, help="the same kind of manifest, with more rows")
    parser.add_argument("--variant", action="append", required=True, help='"NAME|FLAGS" or "NAME@CHECKOUT|FLAGS"')
    parser.add_argument("--repeats", type=int, default=4)
    args = parser.parse_args()
    variants = [_variant(text) for text in args.variant]
    manifests = (args.small.resolve(), args.large.resolve())
    extra = manifest_rows(manifests[1]) - manifest_rows(manifests[0])
    for variant in variants:
        variant.walls = {manifest: [] for manifest in manifests}
    for repeat in range(args.repeats):
        for manifest in manifests:
            for variant in variants if repeat % 2 == 0 else variants[::-1]:
                variant.walls[manifest].append(_wall(variant, manifest))
        print(f"repeat {repeat + 1}: " + "; ".join(
            f"{v.name} {v.walls[manifests[0]][-1]:.2f} -> {v.walls[manifests[1]][-1]:.2f} s" for v in variants),
            flush=True)
    print(f"\n{extra} extra rows, {args.repeats} repeats")
    print("| variant | wall, small (s) | wall, large (s) | marginal images/s per repeat | from the medians |")
    print("|---|---|---|---|---:|")
    for v in variants:
        small, large = v.walls[manifests[0]], v.walls[manifests[1]]
        per_repeat = ", ".join(f"{extra / (b - a):.0f}" for a, b in zip(small, large, strict=True))
        median = extra / (statistics.median(large) - statistics.median(small))
        print(f"| {v.name} | {min(small):.2f}-{max(small):.2f} | {min(large):.2f}-{max(large):.2f} | {per_repeat} | "
              f"{median:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
