"""The fixed cost of one build on Beam's local runner: N builds of the demo dataset (124 rows, `shardsmith sample`)
in one process, as the test suite runs them, timed after the first (which pays for the imports). Not run by CI.

    python tests/benchmarks/build_overhead.py --builds 6
    python tests/benchmarks/build_overhead.py --builds 3 --profile /tmp/build.prof --repo ../main

Prints each build's wall time, the medians of builds 2..N (wall, CPU of the process and of its writer processes,
constructing the graph (build_graph), running it), and the size of the graph: applied transforms (composites and
their parts; leaves) and the stages the FnApiRunner runs after fusion. `--repo` measures another checkout of
shardsmith (a main worktree, for a before/after on the same machine); `--with_tensorflow` imports TensorFlow first,
as every test worker has (a build's garbage collections then have far more to look at); other flags go to
`shardsmith build`. Each build is `shardsmith build` as the command runs it (`cli.main`).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEMO = Path(tempfile.gettempdir()) / "shardsmith-bench" / "demo" / "manifest.csv"
BUILD_FLAGS = ["--num_shards", "train=4,validation=2,test=2", "--max_error_fraction", "0.1",
               "--runner", "FnApiRunner"]


class _Timings:
    """Wraps build_graph and the runner's run_pipeline to time them and count what they made."""

    def __init__(self):
        self.graph_s: list[float] = []
        self.run_s: list[float] = []
        self.transforms = (0, 0)
        self.stages = 0

    def install(self) -> None:
        from apache_beam.runners.portability.fn_api_runner import fn_runner

        import pipeline.graph as graph

        original_graph, original_run = graph.build_graph, fn_runner.FnApiRunner.run_pipeline
        timings = self

        def timed_graph(pipeline, *args, **kwargs):
            started = time.perf_counter()
            out = original_graph(pipeline, *args, **kwargs)
            timings.graph_s.append(time.perf_counter() - started)
            timings.transforms = _transform_counts(pipeline)
            return out

        def timed_run(runner, pipeline, options):
            started = time.perf_counter()
            result = original_run(runner, pipeline, options)
            timings.run_s.append(time.perf_counter() - started)
            return result

        original_stages = fn_runner.FnApiRunner.run_stages

        def counted_stages(runner, stage_context, stages):
            timings.stages = len(stages)
            return original_stages(runner, stage_context, stages)

        graph.build_graph = timed_graph
        fn_runner.FnApiRunner.run_pipeline = timed_run
        fn_runner.FnApiRunner.run_stages = counted_stages


def _transform_counts(pipeline) -> tuple[int, int]:
    """(every applied transform, composites and their parts; the leaves among them, which the runner runs)."""
    applied = []

    def walk(node):
        for part in node.parts:
            applied.append(part)
            walk(part)

    walk(pipeline.transforms_stack[0])
    return len(applied), sum(1 for t in applied if not t.parts)


def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have ended (the shard writers end with the build)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--builds", type=int, default=6, help="builds in one process (default 6; >= 2)")
    parser.add_argument("--manifest", type=Path, default=DEMO, help=f"default: {DEMO} (made by `sample`)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the checkout to measure (default: this one)")
    parser.add_argument("--profile", type=Path, help="write a cProfile of builds 2..N here")
    parser.add_argument("--with_tensorflow", action="store_true",
                        help="import TensorFlow first, as a test worker (and a notebook that trains) has")
    args, extra = parser.parse_known_args()  # other flags go to the build (Beam's among them)
    sys.path.insert(0, str(args.repo.resolve()))
    if args.with_tensorflow:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow  # noqa: F401
    from pipeline import cli

    if not args.manifest.exists():
        cli.run(["sample", str(args.manifest.parent)])

    timings = _Timings()
    timings.install()
    walls, cpus = [], []
    profiler = cProfile.Profile() if args.profile else None
    with tempfile.TemporaryDirectory() as work:
        for i in range(args.builds):
            out = Path(work) / f"out{i}"
            if profiler and i:
                profiler.enable()
            started, cpu_started = time.perf_counter(), _cpu_s()
            cli.main(["build", "--manifest", str(args.manifest), "--output_dir", str(out), "--name", "demo",
                      *BUILD_FLAGS, *extra])
            walls.append(time.perf_counter() - started)
            cpus.append(_cpu_s() - cpu_started)
            if profiler:
                profiler.disable()
    if profiler:
        profiler.dump_stats(str(args.profile))
    later = slice(1, None)
    print(f"builds: {', '.join(f'{w:.2f}' for w in walls)} s")
    print(f"median of builds 2..{args.builds}: {statistics.median(walls[later]):.2f} s wall, "
          f"{statistics.median(cpus[later]):.2f} s CPU (this process and its finished children), "
          f"build_graph {statistics.median(timings.graph_s[later]):.2f} s, "
          f"run {statistics.median(timings.run_s[later]):.2f} s")
    print(f"graph: {timings.transforms[0]} applied transforms ({timings.transforms[1]} leaves); "
          f"{timings.stages} stages after fusion")


if __name__ == "__main__":
    main()
