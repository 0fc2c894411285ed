"""Data-parallel training computed in one process: the reference of the relayed exercises (``zero1``, ``ddp_buckets``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

__all__ = ["train_averaged"]


def train_averaged(model: nn.Module, opt: torch.optim.Optimizer, batch_of: Callable[[int, int], tuple[torch.Tensor, ...]],
                   n: int, steps: int) -> list[torch.Tensor]:
    """``steps`` steps of ``n``-rank data parallelism, in this process: each step, every rank's mean-squared-error
    gradient on ``batch_of(rank, step)``, summed in rank order (as the relay sums), divided by ``n``, written into
    ``.grad``, then ``opt.step()``.  Returns the parameters afterwards."""
    params = list(model.parameters())
    for step in range(steps):
        total = None
        for rank in range(n):
            model.zero_grad(set_to_none=True)
            x, y = batch_of(rank, step)
            F.mse_loss(model(x), y).backward()
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            total = flat if total is None else total + flat
        assert total is not None
        total /= n
        with torch.no_grad():
            for p, g in zip(params, total.split([p.numel() for p in params])):
                p.grad.copy_(g.view_as(p))
        opt.step()
    return [p.detach().clone() for p in params]
