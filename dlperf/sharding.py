"""ZeRO and FSDP on real ranks: what each rank holds, and what travels between them, measured.

The memory chapter states what ZeRO's stages save (:func:`dlperf.memory.model_state_bytes`)
and what they send (:func:`dlperf.memory.zero_communication_bytes`).  This module checks both
on real process groups, with PyTorch's own implementations, started by
:func:`dlperf.launch.launch` (gloo on CPU, NCCL with one GPU per rank):

* ``"ddp"``: :class:`~torch.nn.parallel.DistributedDataParallel` and Adam, every rank holds
  everything (ZeRO's stage 0);
* ``"zero1"``: DDP with :class:`~torch.distributed.optim.ZeroRedundancyOptimizer` around
  Adam, each rank keeps the optimizer state of its share of the parameters (stage 1);
* ``"fsdp"``: FSDP2's :func:`~torch.distributed.fsdp.fully_shard` on every layer and on the
  model, parameters, gradients and Adam's state sharded (stage 3);
* ``"fsdp-keep"``: the same with ``reshard_after_forward=False``: a layer's gathered parameters
  are kept from its forward to its backward (one all-gather per layer instead of two, ZeRO-2's
  traffic, more memory between the passes);
* ``"fsdp-bf16"``: the same as ``"fsdp"`` with ``MixedPrecisionPolicy(param_dtype=torch.bfloat16)``:
  the sharded parameters stay in float32, they are gathered and computed with in bfloat16.

Each rank trains the same small MLP from the same seed on its slice of a global batch, and
reports what it *holds* (bytes of the tensors it keeps: local shards only, for a ``DTensor``)
and what its last training step *sent*: the process-group operations that
:func:`dlperf.trace.record` (``torch.profiler``) recorded (``c10d::allreduce_``, ``c10d::_allgather_base_``, ...), with
their sizes.  Neither number comes from a formula, so comparing them with the formulas checks
the formulas.  :func:`reference` trains the same model on the whole global batch in one
process: all three must end with its parameters (up to rounding).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .trace import Collective, record

__all__ = ["KINDS", "RankReport", "make_model", "rank_batch", "rank_device", "reference", "run", "worker", "workers"]

KINDS = ("ddp", "zero1", "fsdp", "fsdp-keep", "fsdp-bf16")


@dataclass
class RankReport:
    """What one rank held after its last step and what that step sent (see the module's docstring)."""

    rank: int
    world: int
    kind: str
    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    step: list[Collective] = field(default_factory=list)
    final: dict[str, torch.Tensor] | None = None   # full parameters (rank 0 only)


def make_model(width: int, depth: int, seed: int) -> nn.Sequential:
    """``depth`` blocks of Linear(width, width) + ReLU and a last Linear(width, width), from ``seed``."""
    if width < 1 or depth < 0:
        raise ValueError(f"width must be positive and depth non-negative, got width={width}, depth={depth}")
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, width))
    return nn.Sequential(*layers)


def _global_batch(step: int, rows: int, width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)


def rank_device() -> torch.device:
    """This rank's device: its GPU under NCCL (one per rank), else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def rank_batch(step: int, rows: int, width: int, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's slice (``rows`` rows) of the global batch of ``step``: what :func:`reference` sees whole."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x, y = _global_batch(step, rows * world, width, seed)
    return x[rank * rows:(rank + 1) * rows].to(device), y[rank * rows:(rank + 1) * rows].to(device)


def reference(steps: int, width: int, depth: int, rows: int, world: int, seed: int = 0,
              lr: float = 1e-2) -> dict[str, torch.Tensor]:
    """Parameters after ``steps`` Adam steps in one process on the whole global batch (``rows`` per rank).

    The ranks' mean losses over equal slices, averaged by DDP or FSDP, have the gradient of the
    mean loss over the global batch: this is the single-process training they must equal.
    """
    model = make_model(width, depth, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = _global_batch(step, rows * world, width, seed)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _local(t: torch.Tensor) -> torch.Tensor:
    """The part of ``t`` this rank stores: the local shard of a ``DTensor``, else ``t`` itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _held_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(_local(t).numel() * _local(t).element_size() for t in tensors)


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The state tensors an optimizer keeps (Adam: both moments; its step counters are 0-d, left out)."""
    inner = getattr(optimizer, "optim", optimizer)   # ZeroRedundancyOptimizer keeps its shard's optimizer here
    return [v for state in inner.state.values() for v in state.values() if torch.is_tensor(v) and v.dim() > 0]


def worker(kind: str, steps: int, width: int, depth: int, rows: int, seed: int = 0, lr: float = 1e-2) -> RankReport:
    """One rank's training under ``kind`` (see :data:`KINDS`); the last of ``steps`` steps is profiled.

    Runs inside a process group (:func:`dlperf.launch.launch` starts it).  The report's bytes are
    measured on the tensors this rank keeps after its last step, before any ``zero_grad``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind is one of {KINDS}, got {kind!r}")
    if steps < 1:
        raise ValueError(f"train at least one step, got steps={steps}")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = rank_device()
    model = make_model(width, depth, seed).to(device)
    if kind.startswith("fsdp"):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        mesh = init_device_mesh(device.type, (world,))
        options: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": kind != "fsdp-keep"}
        if kind == "fsdp-bf16":
            options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, **options)   # one unit per layer: gathered and freed together
        fully_shard(model, **options)
        trained: nn.Module = model
        optimizer: torch.optim.Optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    else:
        trained = nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        if kind == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
        else:
            optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    def step(i: int) -> None:
        x, y = rank_batch(i, rows, width, seed, device)
        optimizer.zero_grad()
        # .float(): under FSDP's bf16 policy the output is bfloat16, and torch 2.11 refuses the mixed-dtype
        # loss's backward ("Found dtype Float but expected BFloat16"; seen on an H200, 2026-11-26)
        nn.functional.mse_loss(trained(x).float(), y).backward()
        optimizer.step()

    for i in range(steps - 1):
        step(i)
    trace = record(step, steps - 1, warmup=0, shapes=True)
    report = RankReport(
        rank=rank, world=world, kind=kind,
        params_bytes=_held_bytes(model.parameters()),
        grads_bytes=_held_bytes(p.grad for p in model.parameters() if p.grad is not None),
        optimizer_bytes=_held_bytes(_optimizer_tensors(optimizer)),
        step=trace.collectives(),
    )
    # The full parameters, for the comparison with one process (FSDP gathers them: every rank must take part).
    full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().cpu().clone()
            for k, v in model.state_dict().items()}
    if rank == 0:
        report.final = full
    return report


def workers(kinds: tuple[str, ...], steps: int, width: int, depth: int, rows: int, seed: int = 0,
            lr: float = 1e-2) -> dict[str, RankReport]:
    """:func:`worker` for each of ``kinds`` in turn, in one process group (one launch, not one per kind)."""
    return {kind: worker(kind, steps, width, depth, rows, seed, lr) for kind in kinds}


def run(kinds: tuple[str, ...] = KINDS, world: int = 2, *, steps: int = 3, width: int = 64, depth: int = 2,
        rows: int = 8, seed: int = 0, lr: float = 1e-2, timeout: float = 300.0) -> dict[str, dict[str, Any]]:
    """Train under each of ``kinds`` on ``world`` ranks, and in one process; per kind, the reports and the difference.

    Returns ``{kind: {"reports": [RankReport per rank], "max_diff": float, "num_params": int}}``,
    ``max_diff`` the largest difference between a parameter trained on the ranks and in one process.
    """
    from .launch import launch

    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"kinds are some of {KINDS}, got {kinds!r}")
    per_rank = launch(workers, nprocs=world, args=(tuple(kinds), steps, width, depth, rows, seed, lr),
                      timeout=timeout, verbose=False)
    expected = reference(steps, width, depth, rows, world, seed, lr)
    results = {}
    for kind in kinds:
        reports = [r[kind] for r in per_rank]
        got = reports[0].final
        assert got is not None
        if got.keys() != expected.keys():
            raise RuntimeError(f"{kind}: the trained model's parameters are {sorted(got)}, expected {sorted(expected)}")
        results[kind] = {"reports": reports, "num_params": sum(v.numel() for v in expected.values()),
                         "max_diff": max((got[k] - expected[k]).abs().max().item() for k in expected)}
    return results
