"""Training many small models at once: one after the other, or stacked and batched with ``vmap``.

An ensemble of ``n`` models of the same architecture is ``n`` independent
computations.  Run one after the other, each step of each model pays its own
Python and operator-launch overhead on matrices too small to keep the cores
(or a GPU) busy.  Stacked, the ``n`` copies of each parameter become one
tensor with a leading model dimension (:func:`torch.func.stack_module_state`),
and :func:`torch.func.vmap` runs the model's forward once over that dimension:
a ``Linear`` becomes one batched matrix product for all models.  The backward
pass needs nothing special: model ``i``'s loss depends only on slice ``i`` of
each stacked parameter, so the gradient of the *sum* of the ``n`` losses,
taken with ordinary autograd, holds every model's own gradient in its slice.

Performance contract: the same arithmetic (``n`` models times the work of one),
``n`` times fewer operator launches, and ``n`` times the activation memory of
one model alive at once (sequential training holds one model's activations at
a time).  The results agree with sequential training up to float32 rounding
(a batched product may add in another order); :func:`max_difference` measures
it.  The chapter "Automatic parallelism" (section "Many small models at once")
measures both side by side.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.func import functional_call, stack_module_state, vmap

from .kvstore import make_data, make_model
from .memory import SavedTensors

__all__ = [
    "activation_bytes",
    "demo_data",
    "make_ensemble",
    "max_difference",
    "train_batched",
    "train_sequential",
]


def make_ensemble(n: int, features: int = 16, hidden: int = 32, seed: int = 0) -> list[nn.Module]:
    """``n`` small MLPs (``Linear -> Tanh -> Linear``, :func:`dlperf.kvstore.make_model`).

    Model ``i`` is initialised from seed ``seed + i``.
    """
    return [make_model(features, hidden, seed=seed + i) for i in range(n)]


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean squared error over the last two dimensions (one value per model when stacked)."""
    return ((out - y) ** 2).mean(dim=(-2, -1))


def train_sequential(models: Sequence[nn.Module], X: torch.Tensor, y: torch.Tensor, steps: int,
                     lr: float) -> dict[str, Any]:
    """Full-batch SGD on each model in turn (copies; the models are not changed).

    Returns ``params`` (one dict per model) and ``losses`` (``[n, steps]``).
    """
    params, losses = [], []
    for model in models:
        model = copy.deepcopy(model)
        tensors = list(model.parameters())
        row = []
        for _ in range(steps):
            loss = _loss(model(X), y)
            grads = torch.autograd.grad(loss, tensors)
            with torch.no_grad():
                for p, g in zip(tensors, grads):
                    p.sub_(lr * g)
            row.append(loss.item())
        params.append({k: v.detach() for k, v in model.named_parameters()})
        losses.append(row)
    return {"params": params, "losses": torch.tensor(losses)}


def _stacked(models: Sequence[nn.Module]) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor],
                                                   Any]:
    """Stacked parameters (leaves that require grad), stacked buffers, and the vmapped forward."""
    params, buffers = stack_module_state(list(models))
    base = copy.deepcopy(models[0]).to("meta")  # the architecture only; its weights are never read

    def one(p: dict[str, torch.Tensor], b: dict[str, torch.Tensor],
            x: torch.Tensor) -> torch.Tensor:
        return functional_call(base, (p, b), (x,))

    return params, buffers, vmap(one, in_dims=(0, 0, None))  # every model sees the same x


def train_batched(models: Sequence[nn.Module], X: torch.Tensor, y: torch.Tensor,
                  steps: int, lr: float) -> dict[str, Any]:
    """The same training as :func:`train_sequential`, all models at once.

    Returns ``params`` (stacked: each tensor ``[n, ...]``) and ``losses``
    (``[n, steps]``).
    """
    params, buffers, forward = _stacked(models)
    tensors = list(params.values())
    losses = []
    for _ in range(steps):
        loss = _loss(forward(params, buffers, X), y)       # [n]: one loss per model
        grads = torch.autograd.grad(loss.sum(), tensors)   # slice i: model i's gradient
        with torch.no_grad():
            for p, g in zip(tensors, grads):
                p.sub_(lr * g)
        losses.append(loss.detach())
    final = {k: v.detach() for k, v in params.items()}
    return {"params": final, "losses": torch.stack(losses, 1)}


def max_difference(sequential: dict[str, Any], batched: dict[str, Any]) -> float:
    """Largest absolute difference between the two trainings' final parameters."""
    return max((batched["params"][k][i] - p[k]).abs().max().item()
               for i, p in enumerate(sequential["params"]) for k in p)


def activation_bytes(models: Sequence[nn.Module], X: torch.Tensor, batched: bool) -> int:
    """Bytes autograd saves for backward in one forward pass (parameters excluded).

    ``batched=False``: one model's forward (sequential training holds one at a
    time); ``batched=True``: the vmapped forward of all models.
    """
    if batched:
        params, buffers, forward = _stacked(models)
        with SavedTensors(exclude=list(params.values())) as saved:
            out = forward(params, buffers, X)
            del out
    else:
        model = models[0]
        with SavedTensors(exclude=list(model.parameters())) as saved:
            out = model(X)
            del out
    return saved.nbytes


def demo_data(samples: int = 96, features: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """The regression data of the parameter-server chapter (:func:`dlperf.kvstore.make_data`)."""
    return make_data(samples, features)
