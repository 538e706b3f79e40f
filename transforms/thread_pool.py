"""A DoFn base for stages that overlap I/O latency (object-store lookups and reads) with a thread pool."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import apache_beam as beam


class ThreadPoolDoFn(beam.DoFn):
    """A DoFn that overlaps I/O latency with a thread pool of `pool_size` threads, one pool per DoFn instance,
    created in setup() (never pickled) and shut down in teardown()."""

    pool_size = 16

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None

    def setup(self):
        self._pool = ThreadPoolExecutor(self.pool_size)

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False)
