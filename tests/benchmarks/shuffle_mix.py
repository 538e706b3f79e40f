"""How well a reader's shuffle buffer mixes labels: shards in manifest order versus shardsmith's placement.

Simulates, on manifest rows only (no images), a label-sorted manifest of N rows and K equal labels written
into S shards three ways:
  chunked     manifest order cut into S consecutive pieces (the usual converter script loop);
  round-robin records dealt round-robin to shards in manifest order (what WriteToTFRecord(num_shards=S) does
              with a label-sorted input: even counts, but every shard is label-sorted);
  shardsmith  placement by transforms.place (the functions the pipeline runs: keyed-hash rank, stratified
              dealing, keyed-hash order inside each shard).
and reads each back the way a typical tf.data input pipeline does: interleave over the shard files
(cycle_length C, block_length 1), shuffle(B), batch(32). Reports the mean number of distinct labels per
batch and the share of batches holding at most 2 labels; `ideal` draws batches uniformly at random.

    python tests/benchmarks/shuffle_mix.py --rows 100000 --labels 10 --shards 64
"""

from __future__ import annotations

import argparse
import random
from collections import Counter, deque

from shardsmith.placement import group_key  # noqa: E402
from shardsmith.rows import ManifestRow
from transforms.place import DealRowsFn, ShardSpec, make_plan

BATCH = 32


def manifest(num_rows: int, num_labels: int) -> list[ManifestRow]:
    per_label = num_rows // num_labels
    return [
        ManifestRow("m.csv", 0, i + 2, f"img/{label:03d}/{i:07d}.jpg", "", "train", f"l{label:03d}", 1, label)
        for label in range(num_labels)
        for i in range(label * per_label, (label + 1) * per_label)
    ]


def chunked_shards(rows: list[ManifestRow], num_shards: int) -> list[list[int]]:
    size = -(-len(rows) // num_shards)
    return [[row.label_id for row in rows[i:i + size]] for i in range(0, len(rows), size)]


def round_robin_shards(rows: list[ManifestRow], num_shards: int) -> list[list[int]]:
    shards: list[list[int]] = [[] for _ in range(num_shards)]
    for i, row in enumerate(rows):
        shards[i % num_shards].append(row.label_id)
    return shards


def shardsmith_shards(rows: list[ManifestRow], num_shards: int, seed: int) -> list[list[int]]:
    groups: dict = {}
    for row in rows:
        groups.setdefault(group_key(row, seed), []).append(row)
    plan = make_plan(((k, (len(v), len(v))) for k, v in groups.items()), ShardSpec((("*", num_shards),)))
    placed: list[list] = [[] for _ in range(num_shards)]
    deal = DealRowsFn(seed)
    deal.start_bundle()
    pieces = [piece for key, members in groups.items() for piece in deal.process((key, [members]), plan)]
    for (_, shard), dealt in pieces + [held.value for held in deal.finish_bundle()]:
        placed[shard].extend(dealt)
    return [[p.row.label_id for p in sorted(shard, key=lambda p: p.order_key)] for shard in placed]


def read_like_tf_data(shards: list[list[int]], cycle_length: int, buffer: int, rng: random.Random) -> list[int]:
    """interleave(cycle_length, block_length=1) over the files in order, then a shuffle buffer."""
    pending = deque(iter(s) for s in shards)
    active = [pending.popleft() for _ in range(min(cycle_length, len(pending)))]
    interleaved = []
    while active:
        for it in list(active):
            value = next(it, None)
            if value is None:
                active.remove(it)
                if pending:
                    active.append(pending.popleft())
            else:
                interleaved.append(value)
    out, window = [], []
    for value in interleaved:
        if len(window) < buffer:
            window.append(value)
            continue
        i = rng.randrange(len(window))
        out.append(window[i])
        window[i] = value
    rng.shuffle(window)
    return out + window


def batch_mix(labels: list[int]) -> tuple[float, float]:
    batches = [labels[i:i + BATCH] for i in range(0, len(labels) - BATCH + 1, BATCH)]
    distinct = [len(Counter(b)) for b in batches]
    return sum(distinct) / len(distinct), sum(d <= 2 for d in distinct) / len(distinct)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--labels", type=int, default=10)
    parser.add_argument("--shards", type=int, default=64)
    parser.add_argument("--cycle_length", type=int, default=4)
    parser.add_argument("--buffer", type=int, default=1024)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()
    rows = manifest(args.rows, args.labels)
    rng = random.Random(0)
    ideal = [row.label_id for row in rows]
    rng.shuffle(ideal)
    print(f"{args.rows} rows, {args.labels} labels (sorted manifest), {args.shards} shards; reader: "
          f"interleave(cycle_length={args.cycle_length}) + shuffle({args.buffer}) + batch({BATCH})")
    print(f"{'written as':<12} {'labels per batch':>17} {'batches with <=2 labels':>24}")
    for name, labels in (
        ("chunked", read_like_tf_data(chunked_shards(rows, args.shards), args.cycle_length, args.buffer, rng)),
        ("round-robin", read_like_tf_data(round_robin_shards(rows, args.shards), args.cycle_length, args.buffer,
                                          rng)),
        ("shardsmith", read_like_tf_data(shardsmith_shards(rows, args.shards, args.seed), args.cycle_length,
                                         args.buffer, rng)),
        ("ideal", ideal),
    ):
        mean, few = batch_mix(labels)
        print(f"{name:<12} {mean:>17.2f} {few:>24.1%}")


if __name__ == "__main__":
    main()
