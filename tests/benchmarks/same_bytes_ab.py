"""Two checkouts of shardsmith run the same command, alternately, on the same input: are the shards the same bytes,
and what does each cost? For a change that must not change a byte at a scale the reference builds
(reference_builds.py) do not reach, e.g. the million-row build of imagenet_shape.py. Not run by CI.

    git worktree add /tmp/before <commit>
    python tests/benchmarks/same_bytes_ab.py --before /tmp/before --runs 2 -- \
        build --manifest /tmp/shardsmith-bench/imagenet/day1-1000000.csv --incremental --validate header
    python tests/benchmarks/same_bytes_ab.py --before /tmp/before --compact FOLDER    # compact copies of FOLDER

Each run is a whole process tree, timed from outside as imagenet_shape.py times its phases (wall, CPU of the tree,
peak summed RSS), into a fresh output folder (a build's `--output_dir` is added; a compaction compacts a hard-linked
copy of FOLDER). Prints every run, then, per checkout pair of the same run number, whether every shard and index
file of the published versions has the same SHA-256. Exit status 1 when any differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import become_subreaper  # noqa: E402
from incremental import timed_process  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def shard_hashes(out: Path) -> dict[str, str]:
    """SHA-256 of each shard and index file the published version lists, by file name."""
    metadata = json.loads((out / "metadata.json").read_text())
    hashes = {}
    for split in metadata["splits"].values():
        for shard in split["shards"]:
            folder = out / "builds" / shard.get("build", metadata["build_id"])
            for name in (shard["file"], shard.get("index")):
                if name:
                    hashes[name] = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    return hashes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True, help="the other checkout (a git worktree)")
    parser.add_argument("--runs", type=int, default=1, help="runs per checkout, alternating")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench/same-bytes"))
    parser.add_argument("--compact", type=Path, help="compact hard-linked copies of this folder")
    parser.add_argument("command", nargs="*", help="after --: the build command without --output_dir")
    args = parser.parse_args()
    become_subreaper()
    args.workdir.mkdir(parents=True, exist_ok=True)
    checkouts = {"before": args.before.resolve(), "after": REPO}
    results: dict[tuple[str, int], dict] = {}
    for number in range(1, args.runs + 1):
        for name, checkout in checkouts.items():
            out = args.workdir / f"{name}-{number}"
            shutil.rmtree(out, ignore_errors=True)
            if args.compact:
                shutil.copytree(args.compact, out, copy_function=os.link)
                command = ["compact", str(out), "--no_card"]
            else:
                command = [*args.command, "--output_dir", str(out)]
            figures = timed_process([sys.executable, "-m", "pipeline", *command],
                                    args.workdir / f"{name}-{number}.log", checkout)
            results[(name, number)] = {**figures, "hashes": shard_hashes(out)}
            print(f"run {number} {name:6}  {figures['wall_s']:7.1f} s wall  {figures['cpu_s']:7.1f} s CPU  "
                  f"{figures['peak_rss_mb']:6.0f} MB peak", flush=True)
    differ = 0
    for number in range(1, args.runs + 1):
        before, after = results[("before", number)]["hashes"], results[("after", number)]["hashes"]
        names = sorted(set(before) | set(after))
        different = [name for name in names if before.get(name) != after.get(name)]
        differ += bool(different)
        print(f"run {number}: {len(names)} shard and index files, "
              + ("all the same bytes" if not different else f"{len(different)} differ, e.g. {different[:3]}"))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
