"""What load()'s resume check costs (docs/performance.md, "Reading"). Not run by CI.

    python tests/benchmarks/resume_check_cost.py --elements 200000 --rounds 3

load() ends with shardsmith.read.load.resumed_only_on: a scan that keeps the build and split in the iterator's
saved state and compares them each element, in the thread that asks for it. This reads --elements small elements
((an 8x8x3 image, a label), as load() yields with batch_size=None) through a prefetched tf.data pipeline with and
without that stage, alternating, each round in this process, and prints the time per element of each and the
difference: what the check adds to every element (a batch, or a record with batch_size=None).
"""

from __future__ import annotations

import argparse
import statistics
import time


def elements_per_second(with_check: bool, elements: int) -> float:
    import tensorflow as tf

    from shardsmith.read.load import resumed_only_on

    dataset = (tf.data.Dataset.range(elements).map(lambda i: (tf.zeros([8, 8, 3], tf.uint8), i))
               .prefetch(tf.data.AUTOTUNE))
    if with_check:
        dataset = resumed_only_on(dataset, "/benchmark", "20261129T000000Z-00000000", "train")
    iterator = iter(dataset)
    next(iterator)
    start = time.perf_counter()
    count = sum(1 for _ in iterator)
    return count / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    runs: dict[str, list[float]] = {"without": [], "with": []}
    for round_number in range(args.rounds):
        order = ("without", "with") if round_number % 2 == 0 else ("with", "without")
        for name in order:
            rate = elements_per_second(name == "with", args.elements)
            runs[name].append(1e6 / rate)
            print(f"round {round_number + 1} {name:>7} the check: {1e6 / rate:.1f} us an element", flush=True)
    without, with_check = statistics.median(runs["without"]), statistics.median(runs["with"])
    print(f"median: {without:.1f} us an element without the check, {with_check:.1f} with it: "
          f"{with_check - without:+.1f} us an element")


if __name__ == "__main__":
    main()
