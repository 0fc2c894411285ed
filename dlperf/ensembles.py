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
it.  :func:`train_spread` deals the models to the worker processes of a Dask cluster instead
(each share one after the other, or batched), as the class autograder spreads submissions; :func:`ways`
times the four side by side.  The chapter "Automatic parallelism" (section "Many small models at once")
measures them.
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
    "start_cluster",
    "train_batched",
    "train_sequential",
    "train_spread",
    "ways",
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


# ---------------------------------------------------------------------------------------------
# Spread over processes: a Dask cluster, as the class autograder spreads submissions
# ---------------------------------------------------------------------------------------------


def start_cluster(workers: int) -> Any:
    """A local Dask cluster of ``workers`` processes with one thread each, and its client (close both:
    ``client.close(); client.cluster.close()``).  The autograder spreads submissions over the same kind."""
    from distributed import Client, LocalCluster

    cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0")
    return Client(cluster)


def _train_share(models: Sequence[nn.Module], X: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
                 batched: bool) -> dict[str, Any]:
    """One worker's share, trained in that worker's process with one compute thread."""
    torch.set_num_threads(1)
    if not batched:
        return train_sequential(models, X, y, steps, lr)
    out = train_batched(models, X, y, steps, lr)
    return {"params": [{k: v[i] for k, v in out["params"].items()} for i in range(len(models))],
            "losses": out["losses"]}


def train_spread(models: Sequence[nn.Module], X: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
                 client: Any, batched: bool = False) -> dict[str, Any]:
    """The models dealt round-robin to the workers of the Dask ``client``, each worker's share trained in
    its own process (one after the other, or ``batched``), gathered in the models' order.

    Returns what :func:`train_sequential` returns (``params`` one dict per model, ``losses`` ``[n, steps]``).
    The models and the data are sent to the workers on every call, as a real job would send them.
    """
    workers = list(client.scheduler_info()["workers"])
    shares = [list(range(w, len(models), len(workers))) for w in range(len(workers))]
    futures = {w: client.submit(_train_share, [models[i] for i in share], X, y, steps, lr, batched,
                                workers=[addr], pure=False)
               for w, (addr, share) in enumerate(zip(workers, shares)) if share}
    results = {w: f.result() for w, f in futures.items()}
    params: list[dict[str, torch.Tensor]] = [{} for _ in models]
    losses: list[torch.Tensor] = [torch.empty(0)] * len(models)
    for w, result in results.items():
        for j, i in enumerate(shares[w]):
            params[i] = result["params"][j]
            losses[i] = result["losses"][j]
    return {"params": params, "losses": torch.stack(losses)}


def ways(n: int, hidden: int, client: Any, steps: int = 60, lr: float | None = None, **timing: Any) -> dict[str, Any]:
    """``n`` models of width ``hidden`` trained four ways, timed in alternating rounds
    (:func:`dlperf.bench.benchmark_interleaved`) with one compute thread per process: one after the other,
    batched, spread over the client's workers, and spread with each share batched.  Returns the
    measurements by name and the largest difference of each way's parameters from the sequential ones.
    ``lr`` defaults to 0.1 for width 32, scaled down as ``32 / hidden`` for wider models (at 0.1, full-batch
    SGD on width 2048 diverges, and a diverging run turns float32's different summation orders into large
    differences)."""
    from .bench import benchmark_interleaved

    lr = 0.1 * min(1.0, 32 / hidden) if lr is None else lr

    X, y = demo_data()
    models = make_ensemble(n, hidden=hidden)
    reference = train_sequential(models, X, y, steps, lr)
    batched = train_batched(models, X, y, steps, lr)
    spread = train_spread(models, X, y, steps, lr, client)
    both = train_spread(models, X, y, steps, lr, client, batched=True)
    diffs = {"batched": max_difference(reference, batched),
             "spread": _difference(reference, spread), "spread, batched": _difference(reference, both)}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs = benchmark_interleaved({
            "one after the other": lambda: train_sequential(models, X, y, steps, lr),
            "batched (vmap)": lambda: train_batched(models, X, y, steps, lr),
            "spread over workers": lambda: train_spread(models, X, y, steps, lr, client),
            "spread, each share batched": lambda: train_spread(models, X, y, steps, lr, client, batched=True),
        }, **{"rounds": 2, "repeat": 2, "number": 1, "warmup": 1, **timing})
    finally:
        torch.set_num_threads(threads)
    return {"measurements": dict(zip(("sequential", "batched", "spread", "spread, batched"), runs)),
            "differences": diffs, "n": n, "hidden": hidden, "steps": steps, "lr": lr}


def _difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    return max((q[k] - p[k]).abs().max().item() for p, q in zip(a["params"], b["params"]) for k in p)
