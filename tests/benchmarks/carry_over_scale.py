"""How `--incremental`'s carry-over (pairing a manifest's rows with the published version's row lists,
transforms/versions/carried_rows.py) scales with the rows: time and peak RSS at N and 10N rows, 1% of them new.

No images: the published version is its row lists only (one per 10,000 rows, as a build writes them, under
builds/<id>/rows/), and the measured pipeline is the build's first stages up to the carry-over: ReadManifest ->
AssignSplits -> SplitCarriedRows, counting the new rows, on the local runner (FnApiRunner, in-memory mode, as a
local build runs). Each size runs in a fresh process; peak RSS is that process tree's, sampled every 50 ms. Not run
by CI. Run from the repository root:

    python tests/benchmarks/carry_over_scale.py --rows 100000 1000000
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

ROWS_PER_SHARD = 10_000
NEW_EVERY = 100  # 1% of the manifest's rows are new
LABELS = tuple(f"label{i}" for i in range(10))
BUILD_ID = "20260101T000000Z-00000000"
NEW_BUILD_ID = "20260102T000000Z-00000000"  # the measured build's folder, where its spill files go


def make_inputs(folder: Path, rows: int) -> None:
    """manifest.csv (every row) and the version's row lists (every row but each NEW_EVERY-th)."""
    from shardsmith.format.naming import row_list_name
    from shardsmith.format.row_list import ListedRow, row_list_bytes
    from shardsmith.rows import ManifestRow
    from shardsmith.rows.row_identity import row_identity

    shutil.rmtree(folder, ignore_errors=True)
    build = folder / "out" / "builds" / BUILD_ID
    (build / "rows").mkdir(parents=True)
    shard, listed = 0, []

    def flush() -> None:
        nonlocal shard, listed
        (build / row_list_name(f"bench-train.tfrecord-{shard:05d}-of-99999")).write_bytes(row_list_bytes(listed))
        shard, listed = shard + 1, []

    with (folder / "manifest.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["split", "image_uri", "label"])
        for i in range(rows):
            uri, label = f"img/{i // 1000:04d}/{i:07d}.jpg", LABELS[i % len(LABELS)]
            writer.writerow(["train", uri, label])
            if i % NEW_EVERY == 0:
                continue
            row = ManifestRow("manifest.csv", 0, i + 2, uri, uri, "train", label)
            listed.append(ListedRow(row_identity(row), 1, label, 1000, uri))
            if len(listed) == ROWS_PER_SHARD:
                flush()
    if listed:
        flush()


def child(folder: Path) -> None:
    """The measured run: the carry-over of folder/manifest.csv against folder/out's row lists."""
    import apache_beam as beam
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner

    from pipeline.cli import _parser
    from pipeline.options.arguments import build_options_from
    from shardsmith.format.metadata_schema import ShardEntry
    from shardsmith.manifest import resolve_sources
    from shardsmith.output_folder.target import BuildTarget
    from shardsmith.versions.carry_over import CarriedShard, CarriedVersion
    from transforms.place import assign_splits
    from transforms.read_manifest import ReadManifest
    from transforms.versions.carried_rows import SplitCarriedRows

    out = folder / "out"
    args, _ = _parser().parse_known_args(["build", "--manifest", str(folder / "manifest.csv"), "--output_dir",
                                          str(out), "--name", "bench"])
    options = build_options_from(args)
    files = sorted(p.name.removesuffix(".jsonl") for p in (out / "builds" / BUILD_ID / "rows").iterdir())
    listed = sum(1 for name in files for _ in (out / "builds" / BUILD_ID / "rows" / f"{name}.jsonl").open())
    version = CarriedVersion(BUILD_ID, 2, LABELS,
                             tuple(CarriedShard("train", BUILD_ID, ShardEntry(file=name)) for name in files), listed)
    files_dir = out / "builds" / NEW_BUILD_ID
    shutil.rmtree(files_dir, ignore_errors=True)
    files_dir.mkdir()
    started = time.monotonic()
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        sources = pipeline | beam.Create(resolve_sources(options.manifests))
        rows, _, _ = sources | ReadManifest(options.manifest, fan_out=False)  # as an --incremental build reads
        target = BuildTarget(str(out), NEW_BUILD_ID)  # files_dir
        split = rows | beam.Map(assign_splits, options.placement) | SplitCarriedRows(target, version)
        new = split["rows"] | beam.Map(len) | beam.CombineGlobally(sum)
        _ = new | beam.Map(lambda n: print(f"RESULT new rows {n}", flush=True))
        _ = split["carried_lines"] | beam.Map(lambda n: print(f"RESULT carried rows {n}", flush=True))
    print(f"RESULT seconds {time.monotonic() - started:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench/carry-over"))
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    from compare import TreeSampler

    print("| manifest rows | new rows | carried rows | carry-over s | whole process s | peak RSS MB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for rows in args.rows:
        folder = args.workdir / f"n{rows}"
        make_inputs(folder, rows)
        sampler = TreeSampler()
        sampler.start()
        started = time.monotonic()
        done = subprocess.run([sys.executable, __file__, "--child", str(folder)], cwd=REPO, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        wall = time.monotonic() - started
        sampler.stop()
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        found = dict(line.removeprefix("RESULT ").rsplit(" ", 1) for line in done.stdout.splitlines()
                     if line.startswith("RESULT "))
        print(f"| {rows:,} | {int(found['new rows']):,} | {int(found['carried rows']):,} | {found['seconds']} | "
              f"{wall:.1f} | {sampler.peak_rss / 2**20:.0f} |", flush=True)


if __name__ == "__main__":
    main()
