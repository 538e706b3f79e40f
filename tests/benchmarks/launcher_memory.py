"""Where a local build's launcher holds memory, stage by stage (docs/performance.md, "A million rows"). Not run
by CI.

    python tests/benchmarks/launcher_memory.py --manifest /tmp/shardsmith-bench/imagenet/day1-1000000.csv
    python tests/benchmarks/launcher_memory.py --compact OUT     # a version built with --incremental

Runs `shardsmith build` (or `shardsmith compact OUT`, into a hard-linked copy of OUT) in this process on Beam's
local runner and, after every bundle the runner executes, records the launcher's RSS and what the runner's
buffers between stages hold: for each PCollection buffered, its encoded bytes (a ListBuffer: elements waiting
for the next stage) or its decoded values (a GroupingBuffer: a GroupByKey's table, which keeps what it groups as
Python objects until the group is read; counted, and sized with sys.getsizeof one level deep). Prints the stages
in the order they ran with the RSS as each started and its peak while it ran (the rise is what the stage holds:
its input, in about three copies, and its output; the runner takes a stage's inputs out of its buffers as it
starts, so they are not among the buffers listed), and the largest buffers at the moment RSS peaked. Writer
processes are not counted: this is the launcher's share.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


def _buffers(context) -> list[tuple[str, str, int]]:
    """(pcollection, kind, bytes or an estimate) for every buffer the runner holds now."""
    from apache_beam.runners.portability.fn_api_runner.execution import GroupingBuffer, ListBuffer

    held = []
    for buffer_id, buffer in list(context.pcoll_buffers.items()):
        name = buffer_id.decode("utf-8", "replace")[-70:]
        if isinstance(buffer, ListBuffer):
            size = sum(len(b) for b in buffer._inputs) + sum(len(b) for g in buffer._grouped_output or [] for b in g)
            held.append((name, "encoded", size))
        elif isinstance(buffer, GroupingBuffer):
            values = [v for vs in buffer._table.values() for v in vs]
            size = sum(_deep_size(v) for v in values) + sum(
                len(b) for g in buffer._grouped_output or [] for b in g)
            held.append((name, f"grouped ({len(values):,} values)", size))
    return held


def _deep_size(value, depth: int = 2) -> int:
    size = sys.getsizeof(value)
    data = getattr(value, "data", None)
    if isinstance(data, bytes):
        return size + len(data)
    if depth and isinstance(value, list | tuple):
        return size + sum(_deep_size(v, depth - 1) for v in value)
    if depth and hasattr(value, "__slots__"):
        return size + sum(_deep_size(getattr(value, s, None), depth - 1) for s in value.__slots__)
    return size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", type=Path)
    parser.add_argument("--compact", type=Path, help="compact a copy of this folder instead of building")
    parser.add_argument("--extra", nargs="*", default=["--validate", "header", "--no_card", "--incremental"])
    parser.add_argument("--tracemalloc", action="store_true",
                        help="also each stage's peak of live Python memory, and where the live memory was "
                             "allocated after the stage that left most of it (several times slower)")
    args = parser.parse_args()
    import psutil
    from apache_beam.runners.portability.fn_api_runner import fn_runner

    from pipeline import cli

    process = psutil.Process()
    timeline: list[tuple[str, float, float]] = []  # (stage, RSS as it started, peak while it ran)
    peak: dict = {"rss": 0.0, "stage": "", "buffers": []}
    original = fn_runner.FnApiRunner._execute_bundle
    traced: dict = {"stages": {}, "most": 0, "snapshot": None, "after": ""}
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(8)

    def execute_bundle(self, context, bundle_context_manager, bundle_input):
        before = process.memory_info().rss / 2**20
        during = {"rss": 0.0}
        done = threading.Event()

        def sample() -> None:  # the highest RSS while the bundle runs, not only after it
            while not done.wait(0.05):
                during["rss"] = max(during["rss"], process.memory_info().rss / 2**20)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            result = original(self, context, bundle_context_manager, bundle_input)
        finally:
            done.set()
            sampler.join()
        rss = max(during["rss"], process.memory_info().rss / 2**20)
        stage = bundle_context_manager.stage.name
        if args.tracemalloc:
            current, stage_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            before = traced["stages"].get(stage, (0, 0))
            traced["stages"][stage] = (max(before[0], stage_peak), current)
            if current > traced["most"]:
                traced.update(most=current, snapshot=tracemalloc.take_snapshot(), after=stage)
        if not timeline or timeline[-1][0] != stage:
            timeline.append((stage, before, rss))
        else:
            timeline[-1] = (stage, timeline[-1][1], max(rss, timeline[-1][2]))
        if rss > peak["rss"]:
            peak.update(rss=rss, stage=stage, buffers=_buffers(context))
        return result

    fn_runner.FnApiRunner._execute_bundle = execute_bundle
    with tempfile.TemporaryDirectory() as folder:
        if args.compact:
            import shutil

            shutil.copytree(args.compact, f"{folder}/out", copy_function=os.link)  # compaction rewrites none
            cli.run(["compact", f"{folder}/out", "--no_card"])
        else:
            cli.run(["build", "--manifest", str(args.manifest), "--output_dir", f"{folder}/out", "--name", "probe",
                     *args.extra])
    # The runner takes a stage's inputs out of its buffers as the stage starts: what a stage holds shows as the
    # rise from its start to its peak, not in the buffers listed below.
    print("\nlauncher RSS as each stage started -> its peak while it ran (MB), in the order they ran:")
    for stage, before, rss in timeline:
        print(f"  {before:6.0f} -> {rss:6.0f}  {stage[:100]}")
    print(f"\npeak {peak['rss']:.0f} MB after {peak['stage'][:110]}; buffers then:")
    for name, kind, size in sorted(peak["buffers"], key=lambda b: -b[2])[:12]:
        print(f"  {size / 2**20:8.1f} MB  {kind:<28} {name}")
    if args.tracemalloc:
        print("\nlive Python memory per stage (MB): its peak while it ran, what was live after it")
        for stage, (stage_peak, current) in traced["stages"].items():
            print(f"  {stage_peak / 2**20:8.1f} {current / 2**20:8.1f}  {stage[:100]}")
        print(f"\nmost live after {traced['after'][:100]}: {traced['most'] / 2**20:.1f} MB, allocated at")
        for stat in traced["snapshot"].statistics("traceback")[:8]:
            print(f"  {stat.size / 2**20:8.1f} MB  {stat.count:>9} blocks")
            for line in stat.traceback.format()[-6:]:
                print(f"      {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
