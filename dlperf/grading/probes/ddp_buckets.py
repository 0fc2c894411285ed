"""Probe of the ``ddp_buckets`` exercise: drives the student's ``BucketedDDP`` on one rank, one call per step.

It runs beside the student's code, on every rank of a relayed process group
(:class:`autograder.trusted.Ranks` with collectives), and holds no expected
value.  The checker drives the run call by call -- :func:`setup` (the model and
the wrapper), :func:`step` once per training step, :func:`result` -- so that
each call's collectives and timeline at the relay are one step's, cut by the
checker itself.  Each :func:`step` call carries a *key* the checker draws for
that rank and that step; the probe's marks in the rank's timeline
(:func:`dlperf.grading.relay.mark`) carry it, and the checker accepts only marks
that do: ``grad i`` from a gradient hook registered before the student's code (so
it runs first on parameter ``i``, and the student's hooks on it run before the
next mark), ``backward`` when ``backward()`` has returned and ``synchronized``
when ``finish_gradient_synchronization()`` has.  The relay puts these marks
between the collectives the rank posts and waits for, in the order the rank did
them: that is how the checker sees whether an all-reduce started while the
backward pass was still computing gradients.

:func:`build`, :func:`batch` and :data:`MODELS` are public: the checker builds
the same models and data from the same seeds and trains them itself.  So is
:data:`RULES`, the reading of the solution cells that the checker and the
notebook's self-check both apply (:mod:`dlperf.grading.reading`).
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - the usual name
from torch import nn

from dlperf.grading.reading import STANDARD_LIBRARY, Rules
from dlperf.grading.relay import mark

from .mlp import BATCH, batch

__all__ = ["BATCH", "MODELS", "RULES", "batch", "build", "result", "setup", "step"]

_DDP = "torch's DistributedDataParallel does the exercise's work: write the bucketing yourself"

RULES = Rules(
    what="assign_buckets and BucketedDDP",
    imports={"torch", "torch.distributed", "torch.nn", "torch._utils", *STANDARD_LIBRARY["imports"]},
    names={
        "torch.distributed.all_reduce", "torch.distributed.broadcast", "torch.distributed.get_world_size",
        "torch.distributed.get_rank", "torch.distributed.barrier", "torch.distributed.ReduceOp.SUM",
        "torch.nn.Module", "torch.nn", "torch.Tensor", "torch.no_grad",
        "torch.cat", "torch.stack", "torch.zeros", "torch.zeros_like", "torch.empty", "torch.empty_like",
        "torch.ones", "torch.ones_like", "torch.tensor", "torch.flatten", "torch.split", "torch.float32",
        "torch._utils._flatten_dense_tensors", "torch._utils._unflatten_dense_tensors",
        *STANDARD_LIBRARY["names"],
    },
    decorators={"staticmethod", "classmethod", "property", "torch.no_grad", *STANDARD_LIBRARY["decorators"]},
    explain={
        "torch.nn.parallel": _DDP, "torch.nn.parallel.DistributedDataParallel": _DDP,
        "torch.distributed.group": "the process group itself is the grader's relay: call the collectives",
        "torch.distributed.all_reduce_coalesced": "all-reduce each bucket's flat tensor with dist.all_reduce",
    },
)

MODELS = ("mlp", "reordered", "tied", "unused")


class _Reordered(nn.Module):
    """The MLP of ``dims``, its layers registered last first, then the others in forward order: the backward
    pass computes the gradients of parameters 0 and 1 first, then the last layer's... (not the reverse of
    ``parameters()``)."""

    def __init__(self, dims: Sequence[int]):
        super().__init__()
        n = len(dims) - 1
        self.layers = nn.ModuleDict()
        for i in [n - 1, *range(n - 1)]:
            self.layers[f"l{i}"] = nn.Linear(dims[i], dims[i + 1])
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.n):
            x = self.layers[f"l{i}"](x if i == 0 else torch.tanh(x))
        return x


class _Tied(nn.Module):
    """``dims = [d, h, h, d]``: ``Linear(d, h)``, ``Linear(h, h)``, and an output layer that uses the first
    layer's weight, transposed, with a bias of its own (registered on the model itself, so it is parameter 0
    and its gradient comes first): one parameter used twice, whose gradient is complete only at the end of
    the backward pass."""

    def __init__(self, dims: Sequence[int]):
        super().__init__()
        d, h = dims[0], dims[1]
        if list(dims) != [d, h, h, d]:
            raise ValueError("the tied model's dims are [d, h, h, d]")
        self.first = nn.Linear(d, h)
        self.mid = nn.Linear(h, h)
        self.out_bias = nn.Parameter(torch.zeros(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = torch.tanh(self.mid(torch.tanh(self.first(x))))
        return F.linear(z, self.first.weight.t(), self.out_bias)


class _Unused(nn.Module):
    """The MLP of ``dims`` with one more layer, ``aux``, registered after the first and never used: its
    parameters get no gradient (their hooks never run)."""

    def __init__(self, dims: Sequence[int]):
        super().__init__()
        self.first = nn.Linear(dims[0], dims[1])
        self.aux = nn.Linear(dims[1], dims[1])
        self.rest = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[1:-1], dims[2:]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x)
        for layer in self.rest:
            x = layer(torch.tanh(x))
        return x


def _mlp(dims: Sequence[int]) -> nn.Module:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        if i:
            layers.append(nn.Tanh())
        layers.append(nn.Linear(a, b))
    return nn.Sequential(*layers)


def build(model: str, dims: Sequence[int], seed: int, rank: int = 0) -> nn.Module:
    """The model ``model`` (one of :data:`MODELS`) for ``dims``, its parameters drawn from ``seed`` and
    ``rank``: every rank starts from other values, so only rank 0's reach training if the wrapper broadcasts
    them.  ``mlp``: ``Linear, Tanh, Linear, ...`` (gradients in the reverse of parameter order);
    ``reordered``: the same layers registered in another order than they are used; ``tied``: one weight
    used by two layers; ``unused``: one layer that forward never calls."""
    maker = {"mlp": _mlp, "reordered": _Reordered, "tied": _Tied, "unused": _Unused}[model]
    net = maker(dims)
    gen = torch.Generator().manual_seed(int(seed) + 7777 * int(rank))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return net


# This rank's run between the checker's calls: the probe's own, never handed to the student's code.
_RUN: dict[str, Any] = {}


def setup(mod: Any, model: str, dims: Sequence[int], seed: int, bucket_cap_bytes: int, lr: float) -> dict[str, Any]:
    """Build this rank's model, register the probe's gradient marks (before the student's code, so each runs
    first on its parameter), and wrap it: ``mod.BucketedDDP(model, bucket_cap_bytes)`` (its broadcasts are
    this call's collectives)."""
    _RUN.clear()
    net = build(model, dims, seed, dist.get_rank())
    params = list(net.parameters())
    run = _RUN
    run.update({"key": None, "dims": list(dims), "seed": int(seed), "params": params})
    for i, p in enumerate(params):
        p.register_hook(lambda grad, i=i: (mark(f"grad {i}", key=run["key"]), grad)[1])
    run["ddp"] = mod.BucketedDDP(net, bucket_cap_bytes)
    run["opt"] = torch.optim.SGD(params, lr=lr)
    mark("built", flush=True)
    return {"parameters": len(params)}


def _census(params: Sequence[torch.Tensor]) -> dict[str, int]:
    gc.collect()
    objects = gc.get_objects()
    hooks = sum(len(p._backward_hooks or {}) + len(p._post_accumulate_grad_hooks or {}) for p in params)
    return {"tensors": sum(1 for o in objects if isinstance(o, torch.Tensor)),
            "handles": sum(1 for o in objects if isinstance(o, dist.Work)), "hooks": hooks}


def step(mod: Any, k: int, key: str) -> dict[str, Any]:
    """Training step ``k``: gradients set to ``None``, forward through the wrapper on this rank's batch,
    ``backward()``, ``finish_gradient_synchronization()``, ``torch.optim.SGD``'s step.  Every mark carries
    ``key``.  Returns what is alive in this process afterwards (tensors, ``dist.Work`` handles, hooks on the
    parameters), to see that nothing grows from step to step."""
    run = _RUN
    run["key"] = str(key)
    run["opt"].zero_grad(set_to_none=True)
    x, y = batch(run["dims"], run["seed"], dist.get_rank(), int(k))
    F.mse_loss(run["ddp"](x), y).backward()
    mark("backward", key=run["key"])
    run["ddp"].finish_gradient_synchronization()
    mark("synchronized", key=run["key"])
    run["opt"].step()
    del x, y
    census = _census(run["params"])
    mark("done", flush=True, key=run["key"])
    run["key"] = None
    return census


def result(mod: Any) -> dict[str, Any]:
    """This rank's parameters."""
    params = _RUN.get("params", [])
    return {"params": [p.detach().clone() for p in params]}
