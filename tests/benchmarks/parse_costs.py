"""What a line manifest's rows cost to parse, per row, on each side of shardsmith/shard_writer/parallel_parse.py: the
launcher reads the lines, sends a chunk and takes its rows back; a writer process parses the chunk and looks up
each row's file. Each step is timed alone in this process, on chunks of CHUNK_LINES lines (medians of
`--repeats`). Not run by CI.

    python tests/benchmarks/parse_costs.py \
        --manifest /tmp/shardsmith-bench/corpus-photos-n20000/manifest.csv --repeats 5

The manifest's files should exist (compare.py's corpus), so that the lookups are those of a real build.
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from shardsmith.manifest import ManifestFormat, ManifestParser, manifest_lines, resolve_sources  # noqa: E402
from shardsmith.shard_writer.parallel_parse import CHUNK_LINES, parse_chunk  # noqa: E402

MAX_LINES = 20_480


def _per_row_us(step, rows: int, repeats: int) -> float:
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) / rows * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifest", type=Path, required=True, help="a CSV or JSON Lines manifest")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    source = resolve_sources([str(args.manifest)])[0]
    line_parser = ManifestParser(ManifestFormat()).line_parser(source)
    numbered = list(itertools.islice(manifest_lines(source.path), MAX_LINES + 1))
    parse_chunk(line_parser, numbered[:1], False)  # the first line: a header, or the layout of a file without one
    chunks = [numbered[i:i + CHUNK_LINES] for i in range(1, len(numbered), CHUNK_LINES)]
    rows = sum(map(len, chunks))
    results = [parse_chunk(line_parser, chunk, True) for chunk in chunks]
    jobs = [pickle.dumps((parse_chunk, line_parser, chunk, True), protocol=pickle.HIGHEST_PROTOCOL) for chunk in chunks]
    replies = [pickle.dumps(("ok", result), protocol=pickle.HIGHEST_PROTOCOL) for result in results]
    r = args.repeats
    launcher = [
        ("read the lines (manifest_lines)",
         _per_row_us(lambda: list(itertools.islice(manifest_lines(source.path), MAX_LINES + 1)), len(numbered), r)),
        ("pickle a chunk's job", _per_row_us(
            lambda: [pickle.dumps((parse_chunk, line_parser, c, True), protocol=pickle.HIGHEST_PROTOCOL)
                     for c in chunks], rows, r)),
        ("unpickle its rows", _per_row_us(lambda: [pickle.loads(reply) for reply in replies], rows, r)),
    ]
    process = [
        ("unpickle the job", _per_row_us(lambda: [pickle.loads(job) for job in jobs], rows, r)),
        ("parse the lines", _per_row_us(lambda: [parse_chunk(line_parser, c, False) for c in chunks], rows, r)),
        ("parse them and look up each file", _per_row_us(
            lambda: [parse_chunk(line_parser, c, True) for c in chunks], rows, r)),
        ("pickle the rows", _per_row_us(
            lambda: [pickle.dumps(("ok", result), protocol=pickle.HIGHEST_PROTOCOL) for result in results], rows, r)),
    ]
    print(f"{rows} rows of {args.manifest}, chunks of {CHUNK_LINES} lines, medians of {r}; us per row")
    for side, steps in (("the launcher", launcher), ("a writer process", process)):
        print(f"\n{side}:")
        for name, us in steps:
            print(f"  {name:<36} {us:6.2f}")
    print(f"\nthe launcher's steps: {sum(us for _, us in launcher):.2f} us a row; a writer process's (with the "
          f"lookups): {sum(us for name, us in process if name != 'parse the lines'):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
