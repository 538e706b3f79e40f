"""The shard writer's CPU per image, alone: one shard written from a manifest's first rows by
`write_shard_file` in a fresh process (no Beam, no launcher), the CPU of that call divided by the images. Not run
by CI.

    python tests/benchmarks/writer_cpu.py --manifest /tmp/shardsmith-bench/corpus-photos-n20000/manifest.csv \
        --repo ../before --repo . --repeats 5

Checkouts given with `--repo` take turns within each repeat (this machine's speed drifts between runs minutes
apart); each run first writes a 200-image shard to warm the page cache and the imports, then measures.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # corpora.py lies beside this file, however it is run
from corpora import BUILD_DEADLINE_S  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import csv, os, sys, tempfile, time
from shardsmith.rows import ManifestRow, PlacedRow
from shardsmith.settings import RecordSettings
from shardsmith.shard_writer.shard_file import write_shard_file
from shardsmith.shard_writer.writer_config import UnlockedFolder, WriterConfig
from shardsmith.placement import order_key

manifest, images, validate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
base = os.path.dirname(manifest)
rows = []
with open(manifest, newline="") as f:
    reader = csv.reader(f)
    next(reader)
    for line, (split, uri, label) in enumerate(reader, start=2):
        if len(rows) == images:
            break
        path = os.path.join(base, uri)
        row = ManifestRow(manifest, 0, line, uri, path, "train", label, os.path.getsize(path), 0)
        rows.append(PlacedRow(row, 0, 1, order_key(row, 42)))
settings = RecordSettings(validate=validate)
with tempfile.TemporaryDirectory() as out:
    write_shard_file(WriterConfig(UnlockedFolder(out), "warm", settings), "train", 0, [rows[:200]])
    started = time.process_time()
    write_shard_file(WriterConfig(UnlockedFolder(out), "bench", settings), "train", 0, [rows])
    print((time.process_time() - started) / len(rows) * 1e6)
"""


def _us_per_image(repo: Path, manifest: Path, images: int, validate: str) -> float:
    done = subprocess.run([sys.executable, "-c", PROBE, str(manifest), str(images), validate], cwd=repo,
                          capture_output=True, text=True, check=True, env={**os.environ, "PYTHONPATH": str(repo)},
                          timeout=BUILD_DEADLINE_S)
    return float(done.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path, required=True, help="a CSV manifest (header split,image_uri,label) "
                        "whose image URIs are relative to its folder")
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--validate", choices=("header", "decode"), default="header")
    parser.add_argument("--repo", type=Path, action="append", help="a checkout to measure (default: this one)")
    args = parser.parse_args()
    repos = [repo.resolve() for repo in args.repo or [REPO]]
    measured: dict[Path, list[float]] = {repo: [] for repo in repos}
    for repeat in range(args.repeats):
        for repo in repos if repeat % 2 == 0 else repos[::-1]:
            measured[repo].append(_us_per_image(repo, args.manifest.resolve(), args.images, args.validate))
            print(f"repeat {repeat + 1} {repo}: {measured[repo][-1]:.0f} us per image", flush=True)
    for repo in repos:
        print(f"{repo}: writer CPU per image ({args.images} images, --validate {args.validate}, median of "
              f"{args.repeats}): {statistics.median(measured[repo]):.0f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
