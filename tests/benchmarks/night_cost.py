"""What an `--incremental` night costs as the version grows: the same night (+NEW rows, nothing removed) on a
version of each size, against a full build of the largest (docs/versions.md, "Cost").

The corpus is small distinct JPEGs (8x8, random pixels: every image differs), so that a night's cost is the
carry-over's per-row work and start-up, not image decoding. For each size it publishes a version of that many rows
(a full build, `--validate header`, timed: the "full build" figure), then, alternating sizes and kinds, runs two
nights (`--incremental`) into a hard-linked copy of the published folder: "appended", the version's manifest with
NEW rows appended (the common nightly export: only the new lines are parsed), and "rewritten", the version's rows
in reverse order and then the NEW rows (the same rows, other bytes: every row is paired with the version's
records). Each repetition also times a build of the NEW rows alone: what a night would cost if it cost only what
it adds. Whole processes are timed from outside (start-up included; CPU of the process tree). Not run by CI. Run
from the repository root:

    python tests/benchmarks/night_cost.py --sizes 20000 100000 --repeats 3
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import random
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import become_subreaper  # noqa: E402
from incremental import run_build  # noqa: E402

LABELS = tuple(f"label{i}" for i in range(10))
SPLITS = ("train",) * 8 + ("validation", "test")
BUILD = ("--validate", "header", "--max_error_fraction", "0")


def make_images(folder: Path, count: int, seed: int) -> list[list[str]]:
    """`count` distinct 8x8 JPEGs under folder/img/ (kept between runs), as manifest rows."""
    from PIL import Image

    rows, generator = [], random.Random(seed)
    for i in range(count):
        uri = f"img/{i // 1000:04d}/{i:07d}.jpg"
        path = folder / uri
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            buffer = io.BytesIO()
            Image.frombytes("RGB", (8, 8), generator.randbytes(192)).save(buffer, "JPEG", quality=90)
            path.write_bytes(buffer.getvalue())
        rows.append([SPLITS[i % len(SPLITS)], uri, LABELS[i // len(SPLITS) % len(LABELS)]])
    return rows


def write_manifest(path: Path, rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["split", "image_uri", "label"])
        writer.writerows(rows)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--new", type=int, default=200, help="rows a night adds")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench/night-cost"))
    args = parser.parse_args()
    become_subreaper()
    largest = max(args.sizes)
    corpus = args.workdir / "corpus"
    rows = make_images(corpus, largest + args.new, seed=7)
    new_rows = rows[largest:]
    logs = args.workdir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    published, full = {}, {}
    for size in args.sizes:
        out = args.workdir / f"published-{size}"
        shutil.rmtree(out, ignore_errors=True)
        version = write_manifest(corpus / f"version-{size}.csv", rows[:size])
        write_manifest(corpus / f"appended-{size}.csv", rows[:size] + new_rows)
        write_manifest(corpus / f"rewritten-{size}.csv", rows[:size][::-1] + new_rows)
        full[size] = run_build(version, out, logs / f"full-{size}.log", *BUILD)
        published[size] = out
        print(f"full build of {size:,} rows: {full[size]['wall_s']:.1f} s wall, {full[size]['cpu_s']:.1f} s CPU",
              flush=True)
    kinds = ("appended", "rewritten")
    nights: dict[tuple[str, int], list[dict]] = {(kind, size): [] for kind in kinds for size in args.sizes}
    alone = write_manifest(corpus / "new-rows-alone.csv", new_rows)  # the floor: a build of the night's rows only
    alone_runs = []
    for repetition in range(args.repeats):
        out = args.workdir / "new-rows-alone"
        shutil.rmtree(out, ignore_errors=True)
        alone_runs.append(run_build(alone, out, logs / f"alone-{repetition}.log", *BUILD))
        print(f"a build of the {args.new} new rows alone: {alone_runs[-1]['wall_s']:.2f} s wall", flush=True)
        for kind in kinds:
            for size in args.sizes:
                out = args.workdir / f"night-{size}"
                shutil.rmtree(out, ignore_errors=True)
                shutil.copytree(published[size], out, copy_function=os.link)  # published files are never rewritten
                result = run_build(corpus / f"{kind}-{size}.csv", out, logs / f"{kind}-{size}-{repetition}.log",
                                   "--incremental", *BUILD)
                change = result["incremental"]
                assert change["num_added_rows"] == args.new and change["num_carried_rows"] == size, change
                assert change["appended"] is (kind == "appended"), change
                shutil.rmtree(out, ignore_errors=True)
                nights[kind, size].append(result)
                print(f"{kind:>9} night on {size:>9,} rows  {result['wall_s']:6.2f} s wall  "
                      f"{result['cpu_s']:6.2f} s CPU", flush=True)
    smallest = min(args.sizes)
    print(f"\n| night | version rows | wall s (median; runs) | CPU s (median) | vs the {smallest:,}-row night | "
          "vs a full build of the version |")
    print("|---|---:|---:|---:|---:|---:|")
    for kind in kinds:
        base = statistics.median(r["wall_s"] for r in nights[kind, smallest])
        for size in args.sizes:
            walls = [r["wall_s"] for r in nights[kind, size]]
            wall = statistics.median(walls)
            print(f"| {kind} | {size:,} | {wall:.2f} ({', '.join(f'{w:.2f}' for w in walls)}) | "
                  f"{statistics.median(r['cpu_s'] for r in nights[kind, size]):.2f} | {wall / base:.2f}x | "
                  f"{wall / full[size]['wall_s']:.2f}x (full {full[size]['wall_s']:.1f} s) |")
    walls = [r["wall_s"] for r in alone_runs]
    print(f"| a build of the {args.new} new rows alone | - | {statistics.median(walls):.2f} "
          f"({', '.join(f'{w:.2f}' for w in walls)}) | {statistics.median(r['cpu_s'] for r in alone_runs):.2f} | | |")
    if len(args.sizes) > 1:
        low, high = smallest, largest
        for kind in kinds:
            per_row = (statistics.median(r["cpu_s"] for r in nights[kind, high])
                       - statistics.median(r["cpu_s"] for r in nights[kind, low])) / (high - low)
            print(f"CPU per unchanged row, {kind} night: {per_row * 1e6:.1f} us (the {high:,}-row night less the "
                  f"{low:,}-row one)")


    unchanged_row_work(published[largest], corpus / f"appended-{largest}.csv", largest)


def unchanged_row_work(published: Path, manifest: Path, rows: int, repeats: int = 5) -> None:
    """An appended night's work per unchanged row, each step timed alone in this process (best of `repeats`):
    checking the manifest's prefix (its SHA-256), reading the manifest with only the appended lines parsed, and
    counting and scanning the version's row lists for a new image's SHA-256."""
    import json
    import time

    from shardsmith.format.metadata_schema import ManifestDigestEntry
    from shardsmith.format.row_list import rows_with_sha256
    from shardsmith.manifest import AppendedPlan, ManifestParser, ManifestRead, Source
    from shardsmith.manifest.settings import ManifestFormat

    meta = json.loads((published / "metadata.json").read_text())
    digest = ManifestDigestEntry(**meta["incremental"]["manifest"])
    plan = AppendedPlan(digest, meta["num_example_rows"], str(published / meta["build_dir"] / "errors.jsonl"))
    lists = sorted(published.glob("builds/*/rows/*.jsonl"))
    wanted = {"0" * 64}

    def best(step) -> float:
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            step()
            times.append(time.perf_counter() - started)
        return min(times) / rows * 1e6

    def read_appended() -> None:
        selection = plan.selection(str(manifest))
        assert selection is not None
        read = ManifestRead(selection, expected=digest.sha256, expected_bytes=digest.bytes)
        list(ManifestParser(ManifestFormat()).parse(Source(str(manifest), 0, "csv"), read))
        assert read.skipped == rows

    def scan_lists() -> None:
        for path in lists:
            data = path.read_bytes()
            data.count(b"\n")
            list(rows_with_sha256(data, wanted, str(path)))

    print(f"\nAn appended night's work per unchanged row, timed alone ({rows:,} rows, best of {repeats}):")
    print(f"  manifest read, only appended lines parsed (prefix checked, lines hashed and skipped): "
          f"{best(read_appended):.2f} us")
    print(f"  row lists counted and scanned for new images' SHA-256s: {best(scan_lists):.2f} us")


if __name__ == "__main__":
    main()
