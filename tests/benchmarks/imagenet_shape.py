"""An ImageNet-shaped export on one machine (docs/performance.md, "A million rows"): how each phase grows from
100,000 to 1,000,000 rows, each phase a process of its own. Not run by CI. Run from the repository root, alone on
the machine:

    python tests/benchmarks/imagenet_shape.py --rows 100000 1000000 --json /tmp/shardsmith-bench/imagenet.json

The corpus: `--rows` distinct small JPEGs (8x8 random pixels, night_cost.py's; kept in --workdir between runs) in
1,000 classes, the manifest sorted by class (as exports are), splits 90/5/5. For each size, in order:

    build         a full build of the rows (`--incremental`, so that nights can follow; `--validate header`)
    alone         a build of the night's 1,000 new rows alone, into an empty folder (what a night would cost if it
                  cost only what it adds)
    append        a night: the manifest with 1,000 new rows appended
    remove        a night: that manifest without 1% of its rows (every 100th)
    compact       `shardsmith compact` of that version
    load          one `shardsmith.load()` pass over train, counting records (batch_size 256, image_size 8)
    verify        `shardsmith verify --sample 0` (every record read, checksummed and parsed; no image decoded)

Each is timed from outside: wall, CPU of the process tree (reaped children included) and peak RSS of the tree
(summed, sampled every 50 ms). Then a table per phase with both sizes side by side and the ratio, and the nights'
CPU per carried row above the 1,000 rows alone. `--night_repeats N` runs `alone` and `append` N times each,
taking turns (the extra nights on hard-linked copies of the built version), and prints every pair's figure: one
pair's difference of two CPU times is too noisy to judge a target of 2 us a row by.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compare import become_subreaper  # noqa: E402
from incremental import timed_process  # noqa: E402
from night_cost import write_manifest  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LABELS = 1_000
NEW_ROWS = 1_000
REMOVE_EVERY = 100  # 1% of the rows
PHASES = ("build", "alone", "append", "remove", "compact", "load", "verify")
LOAD_PASS = """
import sys, shardsmith
n = 0
for images, labels in shardsmith.load(sys.argv[1], "train", batch_size=256, image_size=8):
    n += int(labels.shape[0])
print(n)
"""


def _shardsmith(*args: object) -> list[str]:
    return [sys.executable, "-m", "pipeline", *map(str, args)]


def _image(path: Path, seed: int, index: int) -> None:
    """An 8x8 JPEG of random pixels drawn from (seed, index) alone: the same file whichever sizes made it before,
    and (to 192 random bytes) distinct from every other."""
    import io
    import random

    from PIL import Image

    buffer = io.BytesIO()
    Image.frombytes("RGB", (8, 8), random.Random(seed * 10**9 + index).randbytes(192)).save(buffer, "JPEG",
                                                                                            quality=90)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())


def _rows(workdir: Path, count: int, seed: int) -> list[list[str]]:
    """`count` rows of distinct images (made once, kept in `workdir`), label-sorted, splits 90/5/5 (every 20th
    validation, the next test)."""
    rows = []
    for i in range(count):
        uri = f"img/{i // 1000:04d}/{i:07d}.jpg"
        if not (workdir / uri).exists():
            _image(workdir / uri, seed, i)
        split = "validation" if i % 20 == 0 else "test" if i % 20 == 1 else "train"
        rows.append([split, uri, f"n{i * LABELS // count:08d}"])
    return rows


def measure(workdir: Path, count: int, phases: tuple[str, ...] = PHASES, night_repeats: int = 1) -> dict:
    """The phases at `count` rows, in PHASES's order (a phase reads what the ones before it made: the nights and
    compact need build); returns phase -> figures (plus the nights' carried rows)."""
    folder = workdir / f"n{count}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = _rows(workdir, count, seed=0)
    new = [[split, uri, f"n{LABELS // 2:08d}"] for split, uri, _ in _rows(workdir / "new", NEW_ROWS, seed=1)]
    for row in new:
        row[1] = f"new/{row[1]}"
    day1 = write_manifest(workdir / f"day1-{count}.csv", rows)
    day2 = write_manifest(workdir / f"day2-{count}.csv", rows + new)
    day3 = write_manifest(workdir / f"day3-{count}.csv",
                          [row for i, row in enumerate(rows + new) if i % REMOVE_EVERY != REMOVE_EVERY - 1])
    alone = write_manifest(workdir / f"alone-{count}.csv", new)
    out, single = folder / "out", folder / "alone"
    for path in (out, single):
        subprocess.run(["rm", "-rf", str(path)], check=True)
    logs = folder / "logs"
    logs.mkdir(exist_ok=True)
    build = ("--name", "imagenet", "--validate", "header", "--max_error_fraction", "0", "--keep_days", "0")
    commands = {
        "build": _shardsmith("build", "--manifest", day1, "--output_dir", out, "--incremental", *build),
        "alone": _shardsmith("build", "--manifest", alone, "--output_dir", single, *build),
        "append": _shardsmith("build", "--manifest", day2, "--output_dir", out, "--incremental", *build),
        "remove": _shardsmith("build", "--manifest", day3, "--output_dir", out, "--incremental", *build,
                              "--max_removed_fraction", "0.02"),
        "compact": _shardsmith("compact", out, "--keep_days", "0"),
        "load": [sys.executable, "-c", LOAD_PASS, str(out)],
        "verify": _shardsmith("verify", out, "--sample", "0"),
    }
    figures = {}

    def timed(phase: str, command: list[str], log_name: str) -> dict:
        result = timed_process(command, logs / log_name)
        print(f"{count:>9,} rows  {phase:<8} {result['wall_s']:7.1f} s wall {result['cpu_s']:7.1f} "
              f"s CPU {result['peak_rss_mb']:6.0f} MB peak", flush=True)
        return result

    for phase in (p for p in PHASES if p in phases):
        if phase == "alone" and night_repeats > 1 and "append" in phases:
            figures["pairs"] = _night_pairs(commands, out, single, folder / "out-night", night_repeats - 1, timed)
            subprocess.run(["rm", "-rf", str(single)], check=True)
        figures[phase] = timed(phase, commands[phase], f"{phase}.log")
    figures["carried_rows"] = {"append": count, "remove": count + NEW_ROWS - (count + NEW_ROWS) // REMOVE_EVERY}
    return figures


def _night_pairs(commands: dict, out: Path, single: Path, copy: Path, pairs: int, timed) -> list[tuple[dict, dict]]:
    """`pairs` more (alone, append) runs, taking turns before the phases' own: each appended night on a
    hard-linked copy of the built version (a build never rewrites a published file), each alone build into an
    empty folder; the copies are removed after."""
    runs = []
    for _ in range(pairs):
        subprocess.run(["rm", "-rf", str(single), str(copy)], check=True)
        alone = timed("alone", commands["alone"], "alone-pair.log")
        subprocess.run(["cp", "-al", str(out), str(copy)], check=True)
        append = [str(copy) if part == str(out) else part for part in commands["append"]]
        runs.append((alone, timed("append", append, "append-pair.log")))
    subprocess.run(["rm", "-rf", str(copy)], check=True)
    return runs


def report(results: dict[int, dict]) -> str:
    sizes = sorted(results)
    head = " | ".join(f"{n:,} rows: wall s / CPU s / peak MB" for n in sizes)
    lines = [f"| phase | {head} | ratio (wall, CPU, peak) |", "|---|" + "---:|" * len(sizes) + "---:|"]
    for phase in (p for p in PHASES if p in results[sizes[0]]):
        cells = [f"{results[n][phase]['wall_s']:.1f} / {results[n][phase]['cpu_s']:.1f} / "
                 f"{results[n][phase]['peak_rss_mb']:,.0f}" for n in sizes]
        first, last = results[sizes[0]][phase], results[sizes[-1]][phase]
        ratio = " / ".join(f"{last[k] / first[k]:.1f}x" for k in ("wall_s", "cpu_s", "peak_rss_mb"))
        lines.append(f"| {phase} | {' | '.join(cells)} | {ratio} |")
    lines.append("")
    for n in sizes if set(PHASES) <= set(results[sizes[0]]) else ():
        per_row = {kind: (results[n][kind]["cpu_s"] - results[n]["alone"]["cpu_s"]) * 1e6
                   / results[n]["carried_rows"][kind] for kind in ("append", "remove")}
        build_kb = results[n]["build"]["peak_rss_mb"] * 1024 / n
        lines.append(f"- {n:,} rows: the appended night {per_row['append']:.2f} us CPU per carried row above the "
                     f"1,000 rows alone, the removal night {per_row['remove']:.2f}; full build {build_kb:.2f} KB "
                     f"peak per row, compaction {results[n]['compact']['peak_rss_mb'] * 1024 / n:.2f}")
    for n in sizes:
        pairs = [*results[n].get("pairs", []), (results[n].get("alone"), results[n].get("append"))]
        if len(pairs) > 1 and all(pairs[-1]):
            each = [(append["cpu_s"] - alone["cpu_s"]) * 1e6 / results[n]["carried_rows"]["append"]
                    for alone, append in pairs]
            lines.append(f"- {n:,} rows, {len(each)} (alone, append) pairs taking turns: the appended night "
                         f"{', '.join(f'{x:.2f}' for x in each)} us CPU per carried row above the rows alone "
                         f"(median {statistics.median(each):.2f})")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/shardsmith-bench/imagenet"))
    parser.add_argument("--json", type=Path, help="also write every figure here")
    parser.add_argument("--night_repeats", type=int, default=1,
                        help="run the alone build and the appended night this many times each, taking turns")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=list(PHASES),
                        help="only these (run in the order above; the nights and compact need build)")
    args = parser.parse_args()
    if min(args.rows) < 20 * LABELS:
        parser.error(f"--rows must be at least {20 * LABELS:,}: every class needs training rows (splits 90/5/5)")
    become_subreaper()
    args.workdir.mkdir(parents=True, exist_ok=True)
    results = {count: measure(args.workdir, count, tuple(args.phases), args.night_repeats)
               for count in args.rows}
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps({str(n): r for n, r in results.items()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
