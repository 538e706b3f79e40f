"""How well a reader's batches mix labels when a version is made of generations (`--incremental`), against one
placement of the same rows (what compaction or a full build writes) and random batches.

Simulated on manifest rows only, with the placement functions the pipeline runs (shuffle_mix.py's
`shardsmith_shards`): one large generation of N rows in S shards, then G small generations of M rows each, each
placed on its own into as many shards as its size gives at the large one's rows per shard (at least 1). Small
generations come in two kinds: `balanced` (the labels in the large one's proportions) and `skewed` (each night's
rows are all of one label: a new class, or one team's uploads). The version's shards are read the way a tf.data
reader does (interleave cycle_length C, shuffle B, batch 32): in the order metadata.json lists them (the README's
plain tf.data recipe) and with the file list shuffled first (what `shardsmith.load()` does). Reports the mean
number of labels per 32-record batch and its ratio to random batches.

    python tests/benchmarks/generation_mix.py
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

from shardsmith.rows import ManifestRow

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shuffle_mix import batch_mix, read_like_tf_data, shardsmith_shards  # noqa: E402


def rows_of(start: int, labels: list[int]) -> list[ManifestRow]:
    return [ManifestRow("m.csv", 0, start + i + 2, f"img/{label:03d}/{start + i:08d}.jpg", "", "train",
                        f"l{label:03d}", 1, label) for i, label in enumerate(labels)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="the large generation's rows")
    parser.add_argument("--shards", type=int, default=64, help="the large generation's shards")
    parser.add_argument("--labels", type=int, default=10)
    parser.add_argument("--generations", type=int, default=5, help="small generations after the large one")
    parser.add_argument("--small", type=int, nargs="+", default=[200, 2_000, 10_000], help="rows per small one")
    parser.add_argument("--cycle_length", type=int, default=4)
    parser.add_argument("--buffer", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    rng = random.Random(0)
    per_shard = args.rows // args.shards
    large_labels = [i % args.labels for i in range(args.rows)]
    print(f"large generation: {args.rows:,} rows in {args.shards} shards, {args.labels} equal labels; then "
          f"{args.generations} small generations; reader: interleave(cycle_length={args.cycle_length}) + "
          f"shuffle({args.buffer}) + batch(32). Labels per batch (x random batches):\n")
    print("| small generations | rows each | listed order | files shuffled (load()) | one placement (compacted) "
          "| random |\n|---|---:|---:|---:|---:|---:|")
    for kind in ("balanced", "skewed"):
        for small in args.small:
            generations = [rows_of(0, large_labels)]
            for g in range(args.generations):
                labels = ([i % args.labels for i in range(small)] if kind == "balanced"
                          else [g % args.labels] * small)
                generations.append(rows_of(args.rows + g * small, labels))
            shards = []
            for rows in generations:
                shards += shardsmith_shards(rows, max(1, round(len(rows) / per_shard)), args.seed)
            every = [row for rows in generations for row in rows]
            random_order = [row.label_id for row in every]
            rng.shuffle(random_order)
            ideal = batch_mix(random_order)[0]
            listed = batch_mix(read_like_tf_data(shards, args.cycle_length, args.buffer, rng))[0]
            shuffled_files = list(shards)
            rng.shuffle(shuffled_files)
            shuffled = batch_mix(read_like_tf_data(shuffled_files, args.cycle_length, args.buffer, rng))[0]
            one = batch_mix(read_like_tf_data(shardsmith_shards(every, len(shards), args.seed),
                                              args.cycle_length, args.buffer, rng))[0]
            print(f"| {kind} | {small:,} | {listed:.2f} ({listed / ideal:.2f}x) | {shuffled:.2f} "
                  f"({shuffled / ideal:.2f}x) | {one:.2f} ({one / ideal:.2f}x) | {ideal:.2f} |", flush=True)


if __name__ == "__main__":
    main()
