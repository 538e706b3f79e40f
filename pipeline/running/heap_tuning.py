"""The launcher's heap on glibc: large buffers kept in mappings of their own, so that what a stage frees goes
back to the system before the next stage grows.

glibc's malloc serves a request of at least its mmap threshold (128 KiB by default) with a mapping of its own,
returned when freed; but each time such a block is freed it raises the threshold to that block's size (up to
32 MiB). After the first few, the local runner's megabyte buffers (a GroupByKey's encoded output, a stage's
grouped values) come from the heap instead, where a freed block stays mapped while anything above it lives: a
local build's launcher then keeps each stage's high-water mark. Setting the threshold fixes it at 128 KiB.

Measured with tests/benchmarks/launcher_memory.py on the ImageNet-shaped build (docs/performance.md, "A million
rows"): the launcher's peak RSS 430 -> 363 MB at 100,000 rows. No effect where the C library is not glibc.
"""

from __future__ import annotations

import ctypes

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
LARGE_BLOCK_BYTES = 128 * 1024  # glibc's default threshold, kept from rising


def keep_large_blocks_mapped() -> bool:
    """Fixes this process's mmap threshold at LARGE_BLOCK_BYTES; False where the C library has no mallopt or
    refuses it (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES) == 1
