"""Probe of the ``ddp_buckets`` exercise: trains a small seeded model with the student's ``BucketedDDP`` on one rank.

It runs beside the student's code, on every rank of a relayed process group
(:class:`autograder.trusted.Ranks` with collectives), and holds no expected
value.  Besides training, it tells the relay *when* things happen on this rank,
with marks in the rank's timeline (:func:`dlperf.grading.relay.mark`): a
gradient hook registered before the student's code sends ``grad i`` as the
backward pass computes the gradient of parameter ``i`` (before the student's own
hooks on it run), and the loop marks the start of each step, the end of
``backward()`` and the end of ``finish_gradient_synchronization()``.  The relay
puts these marks between the collectives the rank posts and waits for, in the
order the rank did them: that is how the checker sees whether an all-reduce
started while the backward pass was still computing gradients.

:func:`build` and :func:`batch` are public: the checker builds the same model
and data from the same seeds and trains it itself, in one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - the usual name
from torch import nn

from dlperf.grading.relay import mark

from . import mlp
from .mlp import BATCH, batch

__all__ = ["BATCH", "batch", "build", "train"]


def build(dims: Sequence[int], seed: int, rank: int = 0) -> nn.Module:
    """The seeded MLP of :func:`dlperf.grading.probes.mlp.build`, drawn from ``seed`` and ``rank``: every rank
    starts from other values, so only rank 0's reach training if the wrapper broadcasts them."""
    return mlp.build(dims, int(seed) + 7777 * rank)


def train(mod: Any, dims: Sequence[int], seed: int, steps: int, bucket_cap_bytes: int, lr: float
          ) -> dict[str, Any]:
    """``steps`` steps of SGD (``lr``) with ``mod.BucketedDDP(model, bucket_cap_bytes)`` on this rank.

    Each step: gradients set to ``None``, forward through the wrapper on this rank's
    batch, ``backward()``, ``finish_gradient_synchronization()``, then
    ``torch.optim.SGD``'s step on the model's parameters.  Marks in the timeline:
    ``built`` after the constructor, ``step k`` at the start of each step, ``grad i``
    when the backward pass has computed parameter ``i``'s gradient, ``backward``
    when ``backward()`` has returned, ``synchronized`` when the wrapper's
    ``finish_gradient_synchronization()`` has.  Returns this rank's parameters.
    """
    rank = dist.get_rank()
    model = build(dims, seed, rank)
    params = list(model.parameters())
    for i, p in enumerate(params):      # before the student's hooks: each fires first on its parameter
        p.register_hook(lambda grad, i=i: (mark(f"grad {i}"), grad)[1])
    ddp = mod.BucketedDDP(model, bucket_cap_bytes)
    mark("built")
    opt = torch.optim.SGD(params, lr=lr)
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        mark(f"step {step}")
        x, y = batch(dims, seed, rank, step)
        F.mse_loss(ddp(x), y).backward()
        mark("backward")
        ddp.finish_gradient_synchronization()
        mark("synchronized")
        opt.step()
    mark("done", flush=True)
    return {"params": [p.detach().clone() for p in params]}
