"""Probe of the ``zero1`` exercise: trains a small seeded model with the student's ``ShardedOptimizer`` on one rank.

It runs beside the student's code, on every rank of a relayed process group
(:class:`autograder.trusted.Ranks` with collectives), and holds no expected
value.  :func:`build` and :func:`batch` are public: the checker builds the same
model and data from the same seed and trains it itself with ``torch.optim``.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - the usual name

from .mlp import BATCH, batch, build

__all__ = ["BATCH", "OPTIMIZERS", "batch", "build", "state_bytes", "train"]

OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}


def state_bytes(optimizer: Any) -> int:
    """Bytes of every tensor in ``optimizer.state`` (moments, momentum buffers, step counters)."""
    total = 0
    for entry in optimizer.state.values():
        for value in entry.values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
    return total


def train(mod: Any, dims: Sequence[int], seed: int, steps: int, optimizer: str, kwargs: dict[str, Any]
          ) -> dict[str, Any]:
    """``steps`` steps of data-parallel training with ``mod.ShardedOptimizer`` on this rank.

    Each step: ``zero_grad()``, forward and backward on this rank's batch, one
    ``all_reduce`` of all the gradients (flattened, in parameter order), divided by
    the number of ranks, written back into ``.grad``, then the student's ``step()``.
    Returns this rank's parameters afterwards and what its optimizers hold: every
    ``torch.optim.Optimizer`` alive in this process (``self.optimizer`` and any
    other), the parameters they hold (``owned``: indices into the parameter list,
    read from their ``param_groups``) and have state for (``with_state``), and the
    bytes of that state.
    """
    n = dist.get_world_size()
    model = build(dims, seed)
    params = list(model.parameters())
    opt = mod.ShardedOptimizer(params, OPTIMIZERS[optimizer], **kwargs)
    rank = dist.get_rank()
    for step in range(steps):
        opt.zero_grad()
        x, y = batch(dims, seed, rank, step)
        F.mse_loss(model(x), y).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)
        flat /= n
        with torch.no_grad():
            for p, g in zip(params, flat.split([p.numel() for p in params])):
                p.grad.copy_(g.view_as(p))
        opt.step()
    optimizers = [o for o in gc.get_objects() if isinstance(o, torch.optim.Optimizer)]
    held = [q for o in optimizers for group in o.param_groups for q in group["params"]]
    with_state = [q for o in optimizers for q in o.state]
    return {"params": [p.detach().clone() for p in params],
            "optimizers": len(optimizers),
            "inner": type(getattr(opt, "optimizer", None)).__name__,
            "owned": [i for i, p in enumerate(params) if any(p is q for q in held)],
            "with_state": [i for i, p in enumerate(params) if any(p is q for q in with_state)],
            "state_bytes": sum(state_bytes(o) for o in optimizers)}
