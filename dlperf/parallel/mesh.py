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

from . import planner as PL
from .tensor import make_mlp

__all__ = ["GROUPS", "LAYOUTS", "batch", "chapter_worker", "hsdp_worker", "planned", "planner_rows", "preload",
           "ring_bytes", "state_on_rank", "train_reference", "train_worker"]


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


def state_on_rank(model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of the model state this rank holds, read from its own tensors after a step.

    ``params``, ``grads``: the local shards (``DTensor.to_local()``) of the parameters and of their
    gradients; ``optimizer``: the optimizer's state tensors with a parameter's shape (AdamW's two
    moments, local shards too); ``step counters``: its scalar ``step`` tensors, one per parameter
    tensor whatever its size.  ``params padded``: the storage behind the local parameter shards:
    FSDP2 shards dimension 0 in chunks of ``ceil(rows / n)`` and pads the last ranks' chunks to that
    size, so this exceeds ``params`` when a sharded dimension does not divide by ``n``.
    """
    from torch.distributed.tensor import DTensor

    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if isinstance(t, DTensor) else t

    def size(t: torch.Tensor) -> int:
        return local(t).numel() * local(t).element_size()

    params = list(model.parameters())
    held = {"params": sum(size(p) for p in params),
            "grads": sum(size(p.grad) for p in params if p.grad is not None),
            "optimizer": 0, "step counters": 0,
            "params padded": sum(local(p).untyped_storage().nbytes() for p in params)}
    for p in params:
        for name, value in opt.state[p].items():
            if isinstance(value, torch.Tensor):
                held["step counters" if name == "step" else "optimizer"] += size(value)
    return held


def _results(model: torch.nn.Module, opt: torch.optim.Optimizer, step: Any, steps: int,
             coords: tuple[int, ...]) -> dict[str, Any]:
    """Run the last step under the profiler and collect what a rank reports: parameters (whole,
    ``full_tensor()``), placements and local shapes of each, :func:`state_on_rank`, and the
    process-group operations of that step, by kind and, in order, as ``(kind, bytes of the whole
    tensor)`` (:class:`dlperf.trace.Collective`)."""
    from ..trace import record

    seen = record(step, steps - 1, warmup=0, shapes=True).collectives()
    return {
        "rank": dist.get_rank(), "coords": coords,
        "params": {n: p.full_tensor().detach().clone() for n, p in model.named_parameters()},
        "placements": {n: str(p.placements) for n, p in model.named_parameters()},
        "local_shapes": {n: tuple(p.to_local().shape) for n, p in model.named_parameters()},
        "state": state_on_rank(model, opt),
        "collectives": dict(Counter(c.kind for c in seen)),
        "collective_bytes": [(c.kind, c.nbytes) for c in seen],
    }


def train_worker(hidden: int, ffn: int, tokens: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """One rank of the ``2 x 2`` mesh: TP inside a row, FSDP2 down a column; ``steps`` AdamW steps.

    Returns what :func:`_results` collects: the trained parameters, placements and local shapes, the
    model state this rank holds (:func:`state_on_rank`) and the collectives of the last step."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


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
    return _results(model, opt, step, steps, (dp, mesh["tp"].get_local_rank()))


def hsdp_worker(hidden: int, ffn: int, tokens: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Hybrid sharded data parallelism (HSDP) on a ``2 x 2`` mesh ``("replicate", "shard")``:
    ``fully_shard`` with a 2-D mesh shards the parameters over ``"shard"`` and replicates them over
    ``"replicate"``; every one of the four ranks sees its own quarter of the batch.  A step
    all-gathers the parameters and reduce-scatters the gradients inside a ``"shard"`` group, then
    all-reduces the gradient shards across ``"replicate"``.  Returns what :func:`train_worker` does."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard


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
    return _results(model, opt, step, steps, tuple(int(c) for c in mesh.get_coordinate()))


def chapter_worker(hidden: int, ffn: int, tokens: int, steps: int, seed: int = 0) -> dict[str, Any]:
    """Both meshes in one process group: ``{"tp_fsdp": train_worker(...), "hsdp": hsdp_worker(...)}``."""
    return {"tp_fsdp": train_worker(hidden, ffn, tokens, steps, seed),
            "hsdp": hsdp_worker(hidden, ffn, tokens, steps, seed)}


# --------------------------------------------------------------------------------------------
# The planner's view of the same runs
# --------------------------------------------------------------------------------------------

#: The two layouts as :class:`dlperf.parallel.planner.Strategy`: FSDP2 (ZeRO-3) over 2 ``dp`` ranks x TP 2;
#: HSDP, ZeRO-3 inside groups of 2 of the 4 ranks.  Both keep float32 weights and gradients.
LAYOUTS = {"tp_fsdp": PL.Strategy(dp=2, tp=2, zero=3), "hsdp": PL.Strategy(dp=4, zero=3, shard=2)}

#: The process group each collective of a step runs on, by layout and kind (its number of ranks).
GROUPS = {"tp_fsdp": {"all-gather": 2, "reduce-scatter": 2, "all-reduce": 2},
          "hsdp": {"all-gather": 2, "reduce-scatter": 2, "all-reduce": 2}}


def planned(layout: str, hidden: int, ffn: int) -> tuple[Any, tuple[float, float]]:
    """What the planner says one rank of ``layout`` holds and sends for :func:`make_mlp` ``(hidden, ffn)``.

    Megatron's split: the first weight and bias column-parallel and the second weight row-parallel
    (``2 h f + f`` parameters divided over ``tp``), the second bias replicated (``h``):
    :func:`~dlperf.parallel.planner.tensor_parallel_params`; then
    :func:`~dlperf.parallel.planner.rank_state_bytes` in float32 (AdamW: 4 + 4 + 8 bytes per
    parameter) and :func:`~dlperf.parallel.planner.data_parallel_bytes` with float32 gradients and
    parameters gathered once per step (FSDP2 does not free a root module's parameters after the
    forward pass).  Returns ``(MemoryBreakdown, (gradient bytes, parameter bytes))``.
    """
    st = LAYOUTS[layout]
    params = PL.tensor_parallel_params(2 * hidden * ffn + ffn, hidden, st.tp)
    state = PL.rank_state_bytes(params, st, precision="fp32")
    sent = PL.data_parallel_bytes(params, st.dp, st.zero, reduce_dtype="fp32", param_dtype="fp32",
                                  shard=st.shard, reshard_after_forward=False)
    return state, sent


def ring_bytes(collectives: list[tuple[str, int]], groups: dict[str, int]) -> dict[str, float]:
    """Bytes one rank sends, by kind, for the ``(kind, whole bytes)`` a rank recorded, with ring algorithms on
    the ``groups[kind]`` ranks: ``(n-1)/n`` of the whole for an all-gather or a reduce-scatter,
    ``2 (n-1)/n`` for an all-reduce."""
    sent: dict[str, float] = {}
    for kind, nbytes in collectives:
        n = groups[kind]
        sent[kind] = sent.get(kind, 0.0) + (2 if kind == "all-reduce" else 1) * (n - 1) / n * nbytes
    return sent


def planner_rows(ranks: list[dict[str, Any]], hidden: int, ffn: int) -> list[list[Any]]:
    """The chapter's table: per layout, what rank 0 held and sent beside what the planner says, in bytes."""
    rows = []
    for layout, label in (("tp_fsdp", "FSDP2 x TP"), ("hsdp", "HSDP")):
        state, (grads, params) = planned(layout, hidden, ffn)
        held = ranks[0][layout]["state"]
        for kind in ("params", "grads", "optimizer"):
            rows.append([label, f"{kind} held", held[kind], f"{getattr(state, kind):g}"])
        rows.append([label, "Adam's step counters held", held["step counters"], "not counted"])
        sent = ring_bytes(ranks[0][layout]["collective_bytes"], GROUPS[layout])
        data = sent["reduce-scatter"] + (sent["all-reduce"] if layout == "hsdp" else 0.0)
        rows.append([label, "gradients sent (ring)", f"{data:g}", f"{grads:g}"])
        rows.append([label, "parameters sent (ring)", f"{sent['all-gather']:g}", f"{params:g}"])
    return rows
