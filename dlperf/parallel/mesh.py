"""Two dimensions at once: a ``DeviceMesh`` of data-parallel x tensor-parallel ranks.

Four ranks form a ``2 x 2`` mesh with dimensions ``("dp", "tp")``.  The two ranks of a row of the
mesh share a data-parallel index and split every weight matrix between them with
``parallelize_module`` (Megatron's column- and row-parallel pair, :mod:`dlperf.parallel.tensor`);
the two ranks of a column share a tensor-parallel index, see different halves of the batch, and
shard their (already tensor-parallel) parameters once more with FSDP2's ``fully_shard``: each rank
stores a quarter of every weight matrix.  In a step, FSDP all-gathers the parameters over ``dp``
before use and reduce-scatters (averaging) the gradients over ``dp`` after the backward pass; TP's
all-reduces run over ``tp``.  In a real cluster ``tp`` is placed inside a server (fast links, a
collective in every layer) and ``dp`` across servers (a collective per layer per step).

:func:`train_worker` trains the MLP of :func:`dlperf.parallel.tensor.make_mlp` this way and
:func:`train_reference` trains it in one process on the whole batch; the parameters after the
same steps must agree.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist

from .tensor import make_mlp

__all__ = ["batch", "chapter_worker", "hsdp_worker", "preload", "train_reference", "train_worker"]


def preload() -> None:
    """Import what the ranks need before forking them: ``parallelize_module`` imports
    ``torch._dynamo`` on first use (seconds of CPU), and forked ranks inherit what the parent
    process has imported instead of each paying for it."""
    import torch._dynamo  # noqa: F401
    import torch.distributed.device_mesh  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
    import torch.distributed.tensor.parallel  # noqa: F401


def batch(tokens: int, hidden: int, step: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and regression targets of step ``step``, the same on every rank."""
    g = torch.Generator().manual_seed(40_009 + 1000 * seed + step)
    return torch.randn(tokens, hidden, generator=g), torch.randn(tokens, hidden, generator=g)


def _optimizer(params: Any) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1)


def train_reference(hidden: int, ffn: int, tokens: int, steps: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """The same training in one process: the whole batch, mean squared error, AdamW."""
    model = make_mlp(hidden, ffn, seed)
    opt = _optimizer(model.parameters())
    for step in range(steps):
        x, y = batch(tokens, hidden, step, seed)
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def train_worker(hidden: int, ffn: int, tokens: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """One rank of the ``2 x 2`` mesh: TP inside a row, FSDP2 down a column; ``steps`` AdamW steps.

    Returns the trained parameters (whole, ``full_tensor()``), each weight's placements and local
    shape, and the process-group operations ``torch.profiler`` saw in the last step, by kind."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from ..trace import record

    # FSDP2 warns that the root returns a view (harmless here: nothing writes to it in place), and
    # full_tensor() of a parameter sharded twice along dim 0 logs that it needs two all-gathers.
    warnings.filterwarnings("ignore", message=".*view tensor.*")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    model = make_mlp(hidden, ffn, seed)
    plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}   # Megatron's pair, on tp
    parallelize_module(model, mesh["tp"], plan)
    fully_shard(model, mesh=mesh["dp"])
    opt = _optimizer(model.parameters())
    dp = mesh["dp"].get_local_rank()

    def step(i: int) -> None:
        x, y = batch(tokens, hidden, i, seed)
        x, y = x.chunk(2)[dp], y.chunk(2)[dp]      # this dp index's half of the batch
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()    # FSDP averages the gradients over dp
        opt.step()

    for i in range(steps - 1):
        step(i)
    seen = record(step, steps - 1, warmup=0, shapes=True).collectives()
    return {
        "rank": dist.get_rank(), "coords": (dp, mesh["tp"].get_local_rank()),
        "params": {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()},
        "placements": {n: str(p.placements) for n, p in model.named_parameters()},
        "local_shapes": {n: tuple(p.to_local().shape) for n, p in model.named_parameters()},
        "collectives": dict(Counter(c.kind for c in seen)),
    }


def hsdp_worker(hidden: int, ffn: int, tokens: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Hybrid sharded data parallelism (HSDP) on a ``2 x 2`` mesh ``("replicate", "shard")``:
    ``fully_shard`` with a 2-D mesh shards the parameters over ``"shard"`` and replicates them over
    ``"replicate"``; every one of the four ranks sees its own quarter of the batch.  A step
    all-gathers the parameters and reduce-scatters the gradients inside a ``"shard"`` group, then
    all-reduces the gradient shards across ``"replicate"``.  Returns what :func:`train_worker` does."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from ..trace import record

    warnings.filterwarnings("ignore", message=".*view tensor.*")
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    model = make_mlp(hidden, ffn, seed)
    fully_shard(model, mesh=mesh)
    opt = _optimizer(model.parameters())
    rank = dist.get_rank()

    def step(i: int) -> None:
        x, y = batch(tokens, hidden, i, seed)
        x, y = x.chunk(4)[rank], y.chunk(4)[rank]  # a quarter of the batch on every rank
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()    # averaged over all four ranks
        opt.step()

    for i in range(steps - 1):
        step(i)
    seen = record(step, steps - 1, warmup=0, shapes=True).collectives()
    return {
        "rank": rank, "coords": tuple(int(c) for c in mesh.get_coordinate()),
        "params": {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()},
        "placements": {n: str(p.placements) for n, p in model.named_parameters()},
        "local_shapes": {n: tuple(p.to_local().shape) for n, p in model.named_parameters()},
        "collectives": dict(Counter(c.kind for c in seen)),
    }


def chapter_worker(hidden: int, ffn: int, tokens: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Both meshes in one process group: ``{"tp_fsdp": train_worker(...), "hsdp": hsdp_worker(...)}``."""
    return {"tp_fsdp": train_worker(hidden, ffn, tokens, steps, seed),
            "hsdp": hsdp_worker(hidden, ffn, tokens, steps, seed)}
