"""Where one copy of a dataset runs: its DDP rank and world size, and its DataLoader worker.

Guarantee: a rank and world size not given are torch.distributed's when it is initialised, else (0, 1); a rank
outside 0..world size - 1 is refused.
"""

from __future__ import annotations

import torch
from torch.utils.data import get_worker_info


def distributed(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """(rank, world size): as given, else torch.distributed's when it is initialised, else (0, 1)."""
    if rank is None and world_size is None and torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    rank, world_size = rank or 0, world_size or 1
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    return rank, world_size


def this_worker() -> tuple[int, int]:
    """(this DataLoader worker's id, the number of workers): (0, 1) outside one."""
    worker = get_worker_info()
    return (worker.id, worker.num_workers) if worker is not None else (0, 1)
