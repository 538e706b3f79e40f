"""Side by side: shardsmith's local modes against the plain script loop people write first. Not run by CI.

    python tests/benchmarks/compare.py --images 20000 --repeats 2 --json /tmp/shardsmith-bench/results.json

Makes N distinct JPEGs (--corpus synthetic: photo-like 720x540, 65-100 KB; --corpus photos: crops of real
photographs, 0.3-0.5 MP; tests/benchmarks/corpora.py; cached in --workdir) and a label-sorted manifest with
relative paths, plus a manifest of the first quarter of each label (or takes --manifest's). Then runs every
configuration as a whole separate process (so imports and start-up count), at N/4 and at N images, --repeats
times, alternating the order from one repetition to the next:

    b0           the loop: tensorflow, read each file, Pillow header parse, tf.train.Example with
                 shardsmith's keys, tf.io.TFRecordWriter, 16 shards per split in manifest order
    b1           the same loop with a full Pillow decode of every image (img.load())
    b0-pool      b0 parallelised the way a user would: a multiprocessing pool of <cores> processes, each
                 importing TensorFlow once, one shard file per task (the yardstick that uses the same cores)
    header-mem   python -m pipeline build --validate header (Beam's in_memory local mode)
    header-mp    the same with --direct_running_mode=multi_processing --direct_num_workers=<cores>
    decode-mem   python -m pipeline build --validate decode (in_memory)
    decode-mp    --validate decode, multi_processing

For each: marginal rate (N - N/4) / (wall(N) - wall(N/4)), in which start-up cancels out; start-up (the
intercept, wall(N/4) - (N/4) / marginal rate); whole-run wall and CPU (user + sys of the whole process tree,
from wait4); peak RSS summed over the process tree (from /proc, every 0.2 s) and its growth from N/4 to N;
output bytes / input bytes. Medians over the repetitions. The loop is this file run as `compare.py _loop`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # corpora.py lies beside this file, however it is run
from corpora import KINDS, Corpus, corpus_of_manifest, describe, make_corpus, warm_page_cache  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LOOP_COMMAND = "_loop"
MIN_IMAGES = 40
LOOP_SHARDS = 16
SAMPLE_INTERVAL_S = 0.2
TARGET_IMAGES = 20000
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Config:
    name: str
    tool: str  # loop | shardsmith
    validate: str  # header | decode
    multi_processing: bool = False

    def command(self, manifest: Path, output_dir: Path, workers: int) -> list[str]:
        if self.tool == "loop":
            return [sys.executable, str(Path(__file__).resolve()), LOOP_COMMAND, "--manifest", str(manifest),
                    "--output_dir", str(output_dir), "--validate", self.validate,
                    "--processes", str(workers if self.multi_processing else 1)]
        command = [sys.executable, "-m", "pipeline", "build", "--manifest", str(manifest),
                   "--output_dir", str(output_dir), "--name", "bench", "--overwrite", "--validate", self.validate]
        if self.multi_processing:
            command += ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
        return command


CONFIGS = {c.name: c for c in [
    Config("b0", "loop", "header"),
    Config("b1", "loop", "decode"),
    Config("b0-pool", "loop", "header", multi_processing=True),
    Config("header-mem", "shardsmith", "header"),
    Config("header-mp", "shardsmith", "header", multi_processing=True),
    Config("decode-mem", "shardsmith", "decode"),
    Config("decode-mp", "shardsmith", "decode", multi_processing=True),
]}


# ----------------------------------------------------------------------------------------------- measurement

def _process_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, RSS bytes) for every process, from /proc/<pid>/stat."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # exited meanwhile
            continue
        fields = stat[stat.rindex(b")") + 2:].split()  # the command name may hold spaces and parentheses
        table[int(entry.name)] = (int(fields[1]), int(fields[21]) * PAGE_SIZE)
    return table


def descendants(root_pid: int, table: dict[int, tuple[int, int]]) -> list[int]:
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = [], list(children.get(root_pid, []))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack += children.get(pid, [])
    return found


class TreeSampler(threading.Thread):
    """Samples the summed RSS of this process's descendants (the measured run, its workers, and any orphans,
    which come to us as the child subreaper) every SAMPLE_INTERVAL_S seconds."""

    def __init__(self):
        super().__init__(daemon=True)
        self._stop_event = threading.Event()
        self.peak_rss = 0
        self.max_processes = 0

    def run(self) -> None:
        me = os.getpid()
        while True:
            table = _process_table()
            tree = descendants(me, table)
            self.peak_rss = max(self.peak_rss, sum(table[pid][1] for pid in tree))
            self.max_processes = max(self.max_processes, len(tree))
            if self._stop_event.wait(SAMPLE_INTERVAL_S):
                return

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def become_subreaper() -> None:
    """Orphaned descendants of a measured run are re-parented to us, so wait4 can count their CPU time."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def _reap_orphans(timeout_s: float = 30.0) -> float:
    """CPU seconds of descendants that outlived the measured process (none, when everything waits for its
    children, as Beam's multi_processing mode does); after timeout_s the stragglers are killed."""
    cpu, deadline = 0.0, time.monotonic() + timeout_s
    while True:
        try:
            pid, _, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return cpu
        if pid:
            cpu += usage.ru_utime + usage.ru_stime
            continue
        if time.monotonic() > deadline:
            for straggler in descendants(os.getpid(), _process_table()):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(straggler, signal.SIGKILL)
        time.sleep(0.1)


@dataclass
class Run:
    config: str
    images: int
    repetition: int
    wall_s: float
    cpu_s: float
    peak_tree_rss_mb: float  # summed over the process tree, sampled
    max_process_rss_mb: float  # the largest single process's peak (wait4)
    max_processes: int
    input_bytes: int
    output_bytes: int


def measure(config: Config, manifest: Path, images: int, input_bytes: int, workdir: Path, repetition: int,
            workers: int) -> Run:
    output_dir = workdir / "out" / f"{config.name}-n{images}"
    shutil.rmtree(output_dir, ignore_errors=True)
    log_path = workdir / "logs" / f"{config.name}-n{images}-r{repetition}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    sampler = TreeSampler()
    sampler.start()
    started = time.monotonic()
    with log_path.open("wb") as log:
        child = subprocess.Popen(config.command(manifest, output_dir, workers), cwd=REPO, stdout=log,
                                 stderr=subprocess.STDOUT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.monotonic() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime + _reap_orphans()
    sampler.stop()
    if child.returncode != 0:
        raise SystemExit(f"{config.name} at {images} images failed with exit code {child.returncode}; "
                         f"see {log_path}")
    output_bytes = sum(p.stat().st_size for p in output_dir.rglob("*") if ".tfrecord-" in p.name)
    shutil.rmtree(output_dir, ignore_errors=True)  # N=20000 writes 1.7 GB a run
    return Run(config.name, images, repetition, wall, cpu, sampler.peak_rss / 2**20, usage.ru_maxrss / 1024,
               sampler.max_processes, input_bytes, output_bytes)


# ------------------------------------------------------------------------------------------------- reporting

def _median(runs: list[Run], field: str) -> float:
    return statistics.median(getattr(r, field) for r in runs)


def summarize(runs: list[Run], names: list[str], corpus: Corpus) -> dict[str, dict]:
    summary = {}
    for name in names:
        row: dict = {"config": name}
        for size, images in (("quarter", corpus.quarter_images), ("full", corpus.full_images)):
            mine = [r for r in runs if r.config == name and r.images == images]
            row[size] = {"images": images, "wall_s": _median(mine, "wall_s"), "cpu_s": _median(mine, "cpu_s"),
                         "peak_tree_rss_mb": _median(mine, "peak_tree_rss_mb"),
                         "max_process_rss_mb": _median(mine, "max_process_rss_mb"),
                         "max_processes": max(r.max_processes for r in mine),
                         "output_over_input": _median(mine, "output_bytes") / mine[0].input_bytes}
        q, f = row["quarter"], row["full"]
        span = f["wall_s"] - q["wall_s"]
        marginal = (f["images"] - q["images"]) / span if span > 0 else None
        row["marginal_images_per_s"] = marginal
        row["startup_s"] = q["wall_s"] - q["images"] / marginal if marginal else None
        row["rss_growth"] = f["peak_tree_rss_mb"] / q["peak_tree_rss_mb"] - 1
        # CPU per extra image: unlike the marginal rate, not flattered by fixed work that overlaps the
        # per-image work more at N than at N/4 (the tf.transform step beside the writing, for example).
        row["cpu_us_per_extra_image"] = (f["cpu_s"] - q["cpu_s"]) / (f["images"] - q["images"]) * 1e6
        summary[name] = row
    for row in summary.values():
        for base in ("b0", "b1", YARDSTICK):
            ours, theirs = row["marginal_images_per_s"], summary.get(base, {}).get("marginal_images_per_s")
            row[f"vs_{base}"] = ours / theirs if ours and theirs else None
    return summary


def _fmt(value, spec: str, missing: str = "n/a") -> str:
    return missing if value is None else format(value, spec)


DEFAULT_MODES = ("header-mem", "decode-mem")  # what `shardsmith build` runs without runner flags
YARDSTICK = "b0-pool"  # the loop that uses the same cores
MIN_WHOLE_RUN_VS_POOL = 1.0
MIN_MARGINAL_VS_POOL = 1.0
MAX_CPU_PER_IMAGE_VS_POOL = 1.0
MAX_DECODE_CPU_VS_B1 = 0.5
MAX_TREE_RSS_MB = 1500
MAX_RSS_GROWTH = 0.10
MAX_OUTPUT_OVER_INPUT = 1.01


def targets(summary: dict[str, dict], cores: int | None = None) -> list[dict]:
    """The targets, against the pool loop (b0-pool) on the same cores, judged on the default local mode
    (in_memory), the one the quick start runs. With `cores`, the marginal rate's line also says the most it
    could be on them against the one-process loop (marginal_ceiling)."""
    results = []

    def add(target: str, mode: str | None, value, limit, passed, detail: str) -> None:
        results.append({"target": target, "mode": mode, "value": value, "limit": limit,
                        "passed": passed, "detail": detail})

    def versus(target: str, mode: str, ours, theirs, limit: float, at_least: bool, unit: str,
               extra: str = "") -> None:
        """A target on ours / theirs: at least `limit` (rates) or at most `limit` (costs)."""
        ratio = ours / theirs if ours and theirs else None
        passed = None if ratio is None else (ratio >= limit if at_least else ratio <= limit)
        add(target, mode, ratio, limit, passed,
            f"{_fmt(ours, '.0f')} vs {_fmt(theirs, '.0f')} {unit} = {_fmt(ratio, '.2f')}x{extra}")

    b0, b1, pool = summary.get("b0", {}), summary.get("b1", {}), summary.get(YARDSTICK, {})
    header = summary.get("header-mem", {})
    whole = {name: row["full"]["images"] / row["full"]["wall_s"] for name, row in summary.items()}
    quarter = {name: row["quarter"]["images"] / row["quarter"]["wall_s"] for name, row in summary.items()}
    versus(f"whole run, --validate header >= {MIN_WHOLE_RUN_VS_POOL}x the pool loop's images/s", "header-mem",
           whole.get("header-mem"), whole.get(YARDSTICK), MIN_WHOLE_RUN_VS_POOL, True, "images/s",
           f" ({_fmt(header.get('full', {}).get('wall_s'), '.1f')} s vs "
           f"{_fmt(pool.get('full', {}).get('wall_s'), '.1f')} s)")
    versus(f"whole run at N/4, --validate header >= {MIN_WHOLE_RUN_VS_POOL}x the pool loop's", "header-mem",
           quarter.get("header-mem"), quarter.get(YARDSTICK), MIN_WHOLE_RUN_VS_POOL, True, "images/s")
    versus(f"CPU per extra image, --validate header <= {MAX_CPU_PER_IMAGE_VS_POOL}x the pool loop's", "header-mem",
           header.get("cpu_us_per_extra_image"), pool.get("cpu_us_per_extra_image"), MAX_CPU_PER_IMAGE_VS_POOL,
           False, "us")
    ceiling = marginal_ceiling(header.get("cpu_us_per_extra_image"), b0.get("cpu_us_per_extra_image"), cores)
    versus(f"marginal rate, --validate header >= {MIN_MARGINAL_VS_POOL}x the pool loop's", "header-mem",
           header.get("marginal_images_per_s"), pool.get("marginal_images_per_s"), MIN_MARGINAL_VS_POOL, True,
           "images/s", f" (at most {ceiling:.2f}x B0's on {cores} cores at this CPU per image)" if ceiling else "")
    versus(f"--validate decode CPU per image <= {MAX_DECODE_CPU_VS_B1}x B1's", "decode-mem",
           summary.get("decode-mem", {}).get("cpu_us_per_extra_image"), b1.get("cpu_us_per_extra_image"),
           MAX_DECODE_CPU_VS_B1, False, "us")
    present = [m for m in DEFAULT_MODES if m in summary]
    peaks = [(summary[m]["full"]["peak_tree_rss_mb"], m) for m in present]
    value, mode = max(peaks) if peaks else (None, None)
    add(f"peak tree RSS at N < {MAX_TREE_RSS_MB} MB", mode, value, MAX_TREE_RSS_MB,
        None if value is None else value < MAX_TREE_RSS_MB, f"{_fmt(value, '.0f')} MB")
    growths = [(summary[m]["rss_growth"], m) for m in present]
    value, mode = max(growths) if growths else (None, None)
    add(f"peak tree RSS growth N/4 -> N < {MAX_RSS_GROWTH:.0%}", mode, value, MAX_RSS_GROWTH,
        None if value is None else value < MAX_RSS_GROWTH,
        (f"{100 * value:+.1f}%" if value is not None else "n/a")
        + (f" ({summary[mode]['quarter']['peak_tree_rss_mb']:.0f} -> "
           f"{summary[mode]['full']['peak_tree_rss_mb']:.0f} MB)" if mode else ""))
    ratios = [(summary[m]["full"]["output_over_input"], m) for m in present]
    value, mode = max(ratios) if ratios else (None, None)
    add(f"output bytes / input bytes <= {MAX_OUTPUT_OVER_INPUT}", mode, value, MAX_OUTPUT_OVER_INPUT,
        None if value is None else value <= MAX_OUTPUT_OVER_INPUT, _fmt(value, ".4f"))
    return results


def marginal_ceiling(ours_us: float | None, loop_us: float | None, cores: int | None) -> float | None:
    """The most our marginal rate can be, as a multiple of the loop's, with CPU per extra image `ours_us` spread
    over `cores` with none idle, against the one-process loop's `loop_us` (its wall is its CPU): cores * loop_us /
    ours_us. On 2 cores, 2.0x the loop's rate needs a CPU per image at or below the loop's."""
    if not (ours_us and loop_us and cores):
        return None
    return cores * loop_us / ours_us


def print_report(summary: dict[str, dict], results: list[dict], images: int) -> None:
    print(f"\n{'config':<11} {'images':>6} {'wall s':>7} {'CPU s':>7} {'CPU/wall':>8} {'tree RSS MB':>11} "
          f"{'max proc MB':>11} {'procs':>5} {'out/in':>7}")
    for name, row in summary.items():
        for size in ("quarter", "full"):
            r = row[size]
            print(f"{name:<11} {r['images']:>6} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} "
                  f"{r['cpu_s'] / r['wall_s']:>8.2f} {r['peak_tree_rss_mb']:>11.0f} {r['max_process_rss_mb']:>11.0f} "
                  f"{r['max_processes']:>5} {r['output_over_input']:>7.4f}")
    print(f"\n{'config':<11} {'marginal img/s':>14} {'start-up s':>10} {'whole-run img/s':>15} "
          f"{'CPU us/img':>10} {'RSS N/4 -> N MB':>17} {'growth':>7} {'x B0':>6} {'x B1':>6} {'x pool':>6}")
    for name, row in summary.items():
        q, f = row["quarter"], row["full"]
        rss = f"{q['peak_tree_rss_mb']:.0f} -> {f['peak_tree_rss_mb']:.0f}"
        print(f"{name:<11} {_fmt(row['marginal_images_per_s'], '14.0f'):>14} {_fmt(row['startup_s'], '10.1f'):>10} "
              f"{f['images'] / f['wall_s']:>15.0f} {row['cpu_us_per_extra_image']:>10.0f} {rss:>17} "
              f"{100 * row['rss_growth']:>+6.1f}% "
              f"{_fmt(row['vs_b0'], '6.2f', '-'):>6} {_fmt(row['vs_b1'], '6.2f', '-'):>6} "
              f"{_fmt(row['vs_' + YARDSTICK], '6.2f', '-'):>6}")
    if any(row["marginal_images_per_s"] is None for row in summary.values()):
        print("n/a: wall(N) was not above wall(N/4); the extra images cost less than the run-to-run noise "
              "(use a larger --images)")
    note = "" if images == TARGET_IMAGES else f" (defined for N={TARGET_IMAGES}; this run has N={images})"
    print(f"\ntargets, on the default local mode (in_memory){note}:")
    for t in results:
        verdict = "n/a " if t["passed"] is None else ("PASS" if t["passed"] else "FAIL")
        print(f"  [{verdict}] {t['target']:<44} {t['detail']}  [{t['mode'] or '-'}]")


def machine() -> dict:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"cores": os.cpu_count(), "usable_cores": len(os.sched_getaffinity(0)), "cpu": model,
            "memory_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
            "load_average": os.getloadavg(), "python": sys.version.split()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=TARGET_IMAGES, help=f"N (default {TARGET_IMAGES})")
    parser.add_argument("--repeats", type=int, default=2, help="alternating repetitions; medians are reported")
    parser.add_argument("--workdir", default="/tmp/shardsmith-bench", help="corpus cache, outputs and logs")
    parser.add_argument("--corpus", choices=sorted(KINDS), default="synthetic",
                        help="which corpus to make (tests/benchmarks/corpora.py); default synthetic")
    parser.add_argument("--manifest", help="measure on this CSV manifest's images instead (header split,image_uri,"
                                           "label); N is its row count")
    parser.add_argument("--only", default=",".join(CONFIGS), help=f"comma list of: {', '.join(CONFIGS)}")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--markdown", help="also write the README's Performance table here")
    parser.add_argument("--report", metavar="JSON", help="run nothing: judge and print the runs saved by --json")
    args = parser.parse_args()
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        summary, corpus = saved["summary"], argparse.Namespace(**saved["corpus"])
        results = targets(summary, saved.get("workers"))
        print_report(summary, results, corpus.full_images)
        text = markdown(summary, results, saved["machine"], corpus, argparse.Namespace(**saved["args"]))
        if args.markdown:
            Path(args.markdown).write_text(text)
        return
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or not names:
        parser.error(f"unknown config(s) {unknown}; choose from {', '.join(CONFIGS)}")
    if args.images < MIN_IMAGES:
        parser.error(f"--images must be at least {MIN_IMAGES}")
    become_subreaper()
    info = machine()
    workers = info["usable_cores"]
    print(f"machine: {info['cores']} cores ({workers} usable), {info['memory_gib']:.0f} GiB, {info['cpu']}, "
          f"load average {' '.join(f'{x:.2f}' for x in info['load_average'])}, Python {info['python']}")
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    corpus = (corpus_of_manifest(Path(args.manifest), workdir) if args.manifest
              else make_corpus(workdir, args.images, args.corpus))
    print(f"corpus: {describe(corpus)}; N/4 manifest {corpus.quarter_images} images, "
          f"{corpus.quarter_bytes / 1e6:.0f} MB")
    warm_page_cache(corpus.full)
    jobs = [(name, size) for name in names for size in ("quarter", "full")]
    runs: list[Run] = []
    for repetition in range(args.repeats):
        for name, size in jobs if repetition % 2 == 0 else jobs[::-1]:
            manifest, images, input_bytes = ((corpus.quarter, corpus.quarter_images, corpus.quarter_bytes)
                                             if size == "quarter" else
                                             (corpus.full, corpus.full_images, corpus.full_bytes))
            run = measure(CONFIGS[name], manifest, images, input_bytes, workdir, repetition, workers)
            runs.append(run)
            print(f"  rep {repetition + 1}/{args.repeats}  {name:<11} {images:>6} images  wall {run.wall_s:6.1f} s  "
                  f"CPU {run.cpu_s:6.1f} s  tree RSS {run.peak_tree_rss_mb:5.0f} MB", flush=True)
    summary = summarize(runs, names, corpus)
    results = targets(summary, workers)
    print_report(summary, results, args.images)
    info["load_average_after"] = os.getloadavg()
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in info['load_average_after'])}; "
          f"logs in {workdir / 'logs'}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({
            "machine": info, "args": vars(args), "workers": workers,
            "corpus": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(corpus).items()},
            "runs": [asdict(r) for r in runs], "summary": summary, "targets": results}, indent=1))
        print(f"results: {args.json}")
    if args.markdown:
        Path(args.markdown).write_text(markdown(summary, results, info, corpus, args))
        print(f"markdown: {args.markdown}")


def markdown(summary: dict[str, dict], results: list[dict], info: dict, corpus, args) -> str:
    """The README's Performance table: the same medians and verdicts as the printed report."""
    lines = [
        f"{info['cores']} cores, {info['memory_gib']:.0f} GiB, {info['cpu']}, Python {info['python']}; "
        f"N = {describe(corpus)}, medians of "
        f"{args.repeats} alternating runs at N/4 and N.",
        "",
        "| run | marginal images/s | x B0 | x pool | start-up s | wall at N s | whole-run images/s | CPU at N s "
        "| CPU us per extra image | peak tree RSS N/4 -> N MB | out/in |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in summary.items():
        q, f = row["quarter"], row["full"]
        lines.append(
            f"| {name} | {_fmt(row['marginal_images_per_s'], '.0f')} | {_fmt(row['vs_b0'], '.2f', '-')} "
            f"| {_fmt(row['vs_' + YARDSTICK], '.2f', '-')} | {_fmt(row['startup_s'], '.1f')} | {f['wall_s']:.1f} "
            f"| {f['images'] / f['wall_s']:.0f} | {f['cpu_s']:.1f} | {row['cpu_us_per_extra_image']:.0f} "
            f"| {q['peak_tree_rss_mb']:.0f} -> {f['peak_tree_rss_mb']:.0f} "
            f"| {f['output_over_input']:.4f} |")
    lines += ["", "| target (default local mode) | measured | verdict |", "|---|---|---|"]
    for t in results:
        verdict = "n/a" if t["passed"] is None else ("met" if t["passed"] else "**missed**")
        lines.append(f"| {t['target']} | {t['detail']} ({t['mode'] or '-'}) | {verdict} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- the loop (B0 and B1)

def loop_main(argv: list[str]) -> None:
    """The script everyone writes first: manifest order, tf.train.Example, TFRecordWriter; in one process, or
    (`--processes N`) parallelised the way a user would: a multiprocessing pool of N processes, each importing
    TensorFlow once, one shard file per task."""
    parser = argparse.ArgumentParser(prog=f"compare.py {LOOP_COMMAND}")
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--validate", choices=("header", "decode"), default="header")
    parser.add_argument("--num_shards", type=int, default=LOOP_SHARDS)
    parser.add_argument("--processes", type=int, default=1)
    args = parser.parse_args(argv)

    manifest = Path(args.manifest)
    with manifest.open(newline="") as f:
        rows = list(csv.DictReader(f))
    label_ids = {label: i for i, label in enumerate(sorted({r["label"] for r in rows if r["split"] == "train"}))}
    by_split: dict[str, list[dict]] = {}
    for row in rows:
        by_split.setdefault(row["split"], []).append(row)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tasks = []
    for split, split_rows in by_split.items():
        n = len(split_rows)
        for shard in range(args.num_shards):
            path = out / f"bench-{split}.tfrecord-{shard:05d}-of-{args.num_shards:05d}"
            tasks.append((str(path), split_rows[shard * n // args.num_shards:(shard + 1) * n // args.num_shards],
                          str(manifest.parent), args.validate, label_ids))
    if args.processes <= 1:
        written = sum(map(_loop_shard, tasks))
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(args.processes, initializer=_import_tensorflow) as pool:
            written = sum(pool.imap_unordered(_loop_shard, tasks))
    print(f"wrote {written} records to {out}")


def _import_tensorflow() -> None:
    import tensorflow  # noqa: F401


def _loop_shard(task: tuple) -> int:
    """Writes one shard file of the loop; returns its records."""
    import hashlib

    import tensorflow as tf
    from PIL import Image

    def bytes_feature(value: bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))

    def int_feature(value: int):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))

    path, rows, folder, validate, label_ids = task
    with tf.io.TFRecordWriter(path) as writer:
        for row in rows:
            data = (Path(folder) / row["image_uri"]).read_bytes()
            with Image.open(io.BytesIO(data)) as image:
                width, height = image.size
                channels, fmt = len(image.getbands()), image.format.lower()
                if validate == "decode":
                    image.load()
            example = tf.train.Example(features=tf.train.Features(feature={
                "image/encoded": bytes_feature(data),
                "image/format": bytes_feature(fmt.encode()),
                "image/height": int_feature(height),
                "image/width": int_feature(width),
                "image/channels": int_feature(channels),
                "image/class/label": int_feature(label_ids[row["label"]]),
                "image/class/text": bytes_feature(row["label"].encode()),
                "image/filename": bytes_feature(row["image_uri"].encode()),
                "image/key/sha256": bytes_feature(hashlib.sha256(data).hexdigest().encode()),
            }))
            writer.write(example.SerializeToString())
    return len(rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == LOOP_COMMAND:
        loop_main(sys.argv[2:])
    else:
        main()
