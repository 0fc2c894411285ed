"""Worker functions for tests/test_launch.py (importable, as spawned workers require)."""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist

from dlperf.launch import init_from_env


def sum_ranks(scale: float) -> dict:
    rank, world, device = init_from_env()
    t = torch.full((5,), float(rank) * scale, device=device)
    dist.all_reduce(t)
    return {"rank": rank, "world": world, "env_rank": int(os.environ["RANK"]), "sum": t.cpu()}


def fail_on_rank(bad: int) -> int:
    rank = dist.get_rank()
    if rank == bad:
        raise ValueError(f"boom on rank {rank}")
    dist.barrier()  # the others wait here for a peer that never comes
    return rank


def exit_on_rank(bad: int) -> int:
    rank = dist.get_rank()
    if rank == bad:
        os._exit(3)
    dist.barrier()
    return rank


def sleep_forever() -> None:
    time.sleep(3600)
