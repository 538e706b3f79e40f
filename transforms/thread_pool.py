"""A DoFn base for stages that overlap I/O latency (object-store lookups and reads) with a thread pool."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import apache_beam as beam


class ThreadPoolDoFn(beam.DoFn):
    """A DoFn that overlaps I/O latency with a thread pool of `pool_size` threads, one pool per DoFn instance,
    created in setup() and dropped in teardown(). The pool is never pickled: a runner that serializes a DoFn
    again after setup or teardown (Dask's does) gets one without it, and setup() makes a new one."""

    pool_size = 16

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None

    def setup(self):
        self._pool = ThreadPoolExecutor(self.pool_size)

    def teardown(self):
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None

    def __getstate__(self):
        return {**self.__dict__, "_pool": None}
