"""Python's garbage collection while a build's pipeline runs, tuned for its rows: many small objects that live
until their stage ends. The command (pipeline/cli.py's main) freezes what existed before it and unfreezes
everything when it ends; this adds what happens between.

Measured with tests/benchmarks/launcher_cpu.py, which prints the launcher's full (generation 2) collections of
each build, on 5,000 and 20,000 rows of the photo corpus.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

# Allocations between two collections of the youngest generation while the pipeline runs (Python's default is
# 700). The run's rows outlive the collections that find them, so each one only promotes them; fewer, larger
# young collections promote them in bulk, and the oldest generation, whose collections walk every object the run
# made, fills more slowly: a 20,000-row build's launcher made 2 full collections while it ran, and makes none
# now (5 in all, those of its imports, at 5,000 rows and at 20,000).
RUN_ALLOCATIONS_PER_COLLECTION = 10_000


@contextlib.contextmanager
def run_collections() -> Iterator[None]:
    """Inside the block (the graph made and run):

    - Beam's modules, which the command imported after main() froze what came before it, are frozen out of
      the run's collections. With them, a 20,000-row build's full collections took 1.3-1.5 s of the launcher's
      CPU; without them, 0.3-0.4 s. The graph is made inside the block, so it is collected after the run as
      before.
    - The youngest generation is collected every RUN_ALLOCATIONS_PER_COLLECTION allocations.

    The previous thresholds are restored on the way out; the freeze is undone by main()."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(RUN_ALLOCATIONS_PER_COLLECTION, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
