"""What `shardsmith compact` costs against a full build of the same rows, and whether it writes the same bytes
(issue 28; docs/versions.md, "Compaction").

On compare.py's photo-like corpus of N images (default 20,000; made once and cached by corpora.py), a first
`--incremental` build publishes all rows but every 20th; then 5 `--incremental` nights each add a fifth of the rows
held back and remove every 500th row of the night before's manifest (so shards are rewritten too): a version of
1 large and 5 small generations. Then, alternating (each repetition in the other order), each repetition runs
  compact  `shardsmith compact OUT` on a fresh hard-linked copy of that folder (a build never rewrites a file in
           place, so the copy's files stay the 6-generation version's);
  full     `shardsmith build` of the last night's manifest without --incremental, into an empty folder, with
           --label_file (the version's labels in id order) and the same default seed, shard settings and
           `--validate decode`.
Every shard and index file the compacted version lists must be byte-identical, file by file, to the full build's;
the benchmark stops naming the first that is not. Whole processes are timed from outside as incremental.py does
(start-up included; peak RSS summed over the process tree). Not run by CI. Run from the repository root:

    python tests/benchmarks/compaction.py --repeats 2
"""

from __future__ import annotations

import argparse
import csv
import filecmp
import os
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import become_subreaper  # noqa: E402
from corpora import make_corpus  # noqa: E402
from incremental import run_build, run_shardsmith, write_manifest  # noqa: E402

from shardsmith.format.metadata import read_metadata  # noqa: E402
from shardsmith.output_folder.layout import dataset_dir, shard_file_path  # noqa: E402

HELD_BACK_EVERY, NIGHTS, REMOVED_EVERY = 20, 5, 500


def version_files(out: Path) -> dict[str, Path]:
    """Every shard and index file the published version of `out` lists, by name, wherever its build holds it."""
    metadata = read_metadata(str(out))
    folder = dataset_dir(str(out), metadata)
    files = {}
    for _, shard in metadata.all_shards():
        path = Path(shard_file_path(folder, shard))
        files[path.name] = path
        if shard.index:
            files[shard.index] = path.with_name(shard.index)
    return files


def differences(compacted: Path, full: Path) -> list[str]:
    """The files that keep the compacted version from being byte-identical to the full build ([] when it is)."""
    ours, theirs = version_files(compacted), version_files(full)
    names = sorted(ours.keys() | theirs.keys())
    return [name for name in names if name not in ours or name not in theirs
            or not filecmp.cmp(ours[name], theirs[name], shallow=False)]


def make_generations(manifest: Path, base: Path, logs: Path) -> Path:
    """Publishes the 6-generation version into `base` (1 + NIGHTS --incremental builds); returns the last night's
    manifest, which lists exactly the version's rows."""
    with manifest.open(newline="") as f:
        reader = csv.reader(f)
        header, rows = next(reader), list(reader)
    held_back = rows[::HELD_BACK_EVERY]
    night_rows = [row for i, row in enumerate(rows) if i % HELD_BACK_EVERY]
    # The manifests live beside the corpus's, so its relative image paths resolve.
    night = write_manifest(manifest.parent / "compaction-night0.csv", header, night_rows)
    first = run_build(night, base, logs / "night0.log", "--incremental")
    print(f"night 0: published {first['records']:,} records in {first['wall_s']:.1f} s", flush=True)
    for number in range(1, NIGHTS + 1):
        removed = night_rows[number::REMOVED_EVERY]
        night_rows = [row for row in night_rows if row not in removed] + held_back[number - 1::NIGHTS]
        night = write_manifest(manifest.parent / f"compaction-night{number}.csv", header, night_rows)
        result = run_build(night, base, logs / f"night{number}.log", "--incremental")
        change = result["incremental"]
        print(f"night {number}: +{change['num_added_rows']:,} -{change['num_removed_rows']:,} rows, "
              f"{change['num_rewritten_shards']} shard(s) rewritten, {result['records']:,} records in "
              f"{result['wall_s']:.1f} s", flush=True)
    return night


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=20_000,
                        help="corpus size (default 20,000; 2000: a quick check)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each, alternating; medians are reported")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench"),
                        help="corpus cache (shared with compare.py) and, under compaction/, outputs and logs")
    args = parser.parse_args()
    if args.images < 200 or args.repeats < 1:
        parser.error("--images must be at least 200 and --repeats at least 1")
    become_subreaper()
    corpus = make_corpus(args.workdir, args.images)
    work = args.workdir / "compaction"
    shutil.rmtree(work, ignore_errors=True)
    (work / "logs").mkdir(parents=True)
    base = work / "generations"
    last_night = make_generations(corpus.full, base, work / "logs")
    published = read_metadata(str(base))
    label_file = work / "labels.txt"
    label_file.write_text("".join(f"{label}\n" for label in published.labels))
    runs: dict[str, list[dict]] = {"compact": [], "full": []}
    identical = True
    for repetition in range(args.repeats):
        outs = {kind: work / f"{kind}-{repetition}" for kind in runs}
        shutil.copytree(base, outs["compact"], copy_function=os.link)
        for kind in ("compact", "full") if repetition % 2 == 0 else ("full", "compact"):
            log = work / "logs" / f"{kind}-{repetition}.log"
            result = (run_shardsmith(outs[kind], log, "compact", str(outs[kind])) if kind == "compact" else
                      run_build(last_night, outs[kind], log, "--label_file", str(label_file)))
            runs[kind].append(result)
            print(f"{kind:<8} {result['wall_s']:7.1f} s wall {result['cpu_s']:7.1f} s CPU "
                  f"{result['peak_rss_mb']:6.0f} MB peak, {result['records']:,} records", flush=True)
        differing = differences(outs["compact"], outs["full"])
        if differing:
            identical = False
            print(f"NOT BYTE-IDENTICAL: {len(differing)} file(s) differ or are missing, first {differing[0]}; "
                  f"outputs kept in {outs['compact']} and {outs['full']}", flush=True)
        else:
            for out in outs.values():
                shutil.rmtree(out)
    report(runs, published.num_examples, published.incremental.generations, identical)
    if not identical:
        raise SystemExit("compaction is not byte-identical to the full build")


def report(runs: dict[str, list[dict]], images: int, generations: int, identical: bool) -> None:
    compact, full = ({key: statistics.median(run[key] for run in runs[kind]) for key in ("wall_s", "peak_rss_mb")}
                     for kind in ("compact", "full"))
    print("\n| images | generations before | compaction wall s (median) | full build wall s (median) | ratio "
          "| compaction peak RSS MB | full build peak RSS MB | byte-identical |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---|")
    print(f"| {images:,} | {generations} | {compact['wall_s']:.1f} | {full['wall_s']:.1f} "
          f"| {compact['wall_s'] / full['wall_s']:.2f}x | {compact['peak_rss_mb']:.0f} | {full['peak_rss_mb']:.0f} "
          f"| {'yes' if identical else 'NO'} |")


if __name__ == "__main__":
    main()
