"""The seeded model and batches of the relayed data-parallel exercises (``zero1``, ``ddp_buckets``).

Public: a probe builds them on every rank, and the checker builds the same ones from the same seeds
to train them in one process.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["BATCH", "batch", "build"]

BATCH = 4


def build(dims: Sequence[int], seed: int) -> nn.Module:
    """``Linear(dims[0], dims[1]), Tanh, Linear(dims[1], dims[2]), ...``, its parameters drawn from ``seed``."""
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        if i:
            layers.append(nn.Tanh())
        layers.append(nn.Linear(a, b))
    model = nn.Sequential(*layers)
    gen = torch.Generator().manual_seed(int(seed))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def batch(dims: Sequence[int], seed: int, rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank ``rank``'s batch of step ``step``: inputs and regression targets."""
    gen = torch.Generator().manual_seed(int(seed) * 7919 + 104729 * rank + step)
    return torch.randn(BATCH, dims[0], generator=gen), torch.randn(BATCH, dims[-1], generator=gen)
