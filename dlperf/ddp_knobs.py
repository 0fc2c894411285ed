"""DDP's options, measured on real ranks: what each one changes in a training step.

:class:`~torch.nn.parallel.DistributedDataParallel` has a handful of options that the DDP
chapter explains; this module shows each one at work on a process group started by
:func:`dlperf.launch.launch` (gloo on CPU, NCCL with one GPU per rank).  Every rank trains the
same MLP (:func:`dlperf.sharding.make_model`) from the same seed on its slice of a global batch
under one configuration (a :class:`Knobs`), and reports what it observed, not what the
documentation says:

* the all-reduces of its last step, recorded by :func:`dlperf.trace.record`: how many, and how
  many elements each (one per bucket: ``bucket_cap_mb`` at work);
* whether the gradients live inside DDP's bucket buffers (``gradient_as_bucket_view=True``: the
  ``.grad`` tensors are views of the buckets, so the gradients are not stored twice), found by
  comparing the storage of each ``.grad`` with the buckets a communication hook saw;
* the largest difference of a parameter from one-process training
  (:func:`dlperf.sharding.reference`), which a lossy communication hook such as
  ``bf16_compress_hook`` makes non-zero;
* for a model with a layer the forward pass does not use: the error DDP raises without
  ``find_unused_parameters=True``, or that training works with it.
"""

from __future__ import annotations

import contextlib

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .sharding import make_model, rank_batch, rank_device, reference
from .trace import Collective, record

__all__ = ["Knobs", "KnobReport", "run", "worker"]


@dataclass(frozen=True)
class Knobs:
    """One DDP configuration: the constructor's options, a communication hook, and an unused layer or not.

    ``hook`` is ``None`` (DDP's own all-reduce), ``"bf16"`` (``bf16_compress_hook``: gradients
    sent in bfloat16 and cast back) or ``"powersgd"`` (``powerSGD_hook``, rank 1: each weight
    matrix's gradient sent as two vectors, with error feedback, after ``powersgd_start`` - 1 steps
    of plain all-reduce).  ``unused_layer`` adds a layer that ``forward`` never calls;
    ``static_graph`` tells DDP that the graph is the same every step.
    """

    name: str
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = False
    find_unused_parameters: bool = False
    static_graph: bool = False
    hook: str | None = None
    unused_layer: bool = False
    powersgd_start: int = 2


@dataclass
class KnobReport:
    """What rank 0 saw under one :class:`Knobs` (see the module's docstring)."""

    knobs: Knobs
    allreduces: list[Collective] = field(default_factory=list)
    hook_sent: list[int] = field(default_factory=list)   # elements of each dist.all_reduce the hook called
    grads_in_buckets: int = 0
    grads: int = 0
    error: str | None = None
    final: dict[str, torch.Tensor] | None = None


class _WithUnused(nn.Module):
    """The MLP and a layer that ``forward`` never calls (its parameters get no gradient)."""

    def __init__(self, mlp: nn.Sequential, width: int):
        super().__init__()
        self.mlp = mlp
        self.unused = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)


def _recording_hook(seen: list[tuple[int, int]], hook: Any):
    """A communication hook that notes each bucket's storage (address, bytes) and then runs ``hook``."""

    def recording(state, bucket):  # unannotated: DDP checks real annotations, and this module's are strings
        storage = bucket.buffer().untyped_storage()
        seen.append((storage.data_ptr(), storage.nbytes()))
        return hook(state, bucket)

    return recording


@contextlib.contextmanager
def _counting_allreduce(sent: list[int]):
    """Count the elements of every ``dist.all_reduce`` called from Python meanwhile (the hooks' own calls:
    PowerSGD's second and third are chained in callbacks, which the profiler's trace does not show)."""
    original = dist.all_reduce

    def counting(tensor, *args, **kwargs):
        sent.append(tensor.numel())
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counting
    try:
        yield
    finally:
        dist.all_reduce = original


def _inside(ptr: int, regions: list[tuple[int, int]]) -> bool:
    return any(start <= ptr < start + size for start, size in regions)


def _hook(knobs: Knobs, buckets: list[tuple[int, int]]) -> tuple[Any, Any]:
    """(state, hook) for ``register_comm_hook``: ``knobs``'s hook, recording each bucket's storage."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if knobs.hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                            start_powerSGD_iter=knobs.powersgd_start, random_seed=0)
        return state, _recording_hook(buckets, powerSGD_hook.powerSGD_hook)
    if knobs.hook not in (None, "bf16"):
        raise ValueError(f"hook is None, 'bf16' or 'powersgd', not {knobs.hook!r}")
    base = default_hooks.bf16_compress_hook if knobs.hook == "bf16" else default_hooks.allreduce_hook
    return dist.group.WORLD, _recording_hook(buckets, base)


def worker(configs: list[Knobs], steps: int, width: int, depth: int, rows: int, seed: int = 0,
           lr: float = 1e-2) -> list[KnobReport]:
    """Train under each configuration in turn (``steps`` Adam steps, the last one recorded)."""
    rank = dist.get_rank()
    device = rank_device()
    reports = []
    for knobs in configs:
        mlp = make_model(width, depth, seed)
        model: nn.Module = _WithUnused(mlp, width) if knobs.unused_layer else mlp
        model = model.to(device)
        ddp = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=knobs.bucket_cap_mb, gradient_as_bucket_view=knobs.gradient_as_bucket_view,
            find_unused_parameters=knobs.find_unused_parameters, static_graph=knobs.static_graph)
        buckets: list[tuple[int, int]] = []
        ddp.register_comm_hook(*_hook(knobs, buckets))
        optimizer = torch.optim.Adam(model.parameters(), lr=lr)

        def step(i: int) -> None:
            x, y = rank_batch(i, rows, width, seed, device)
            optimizer.zero_grad(set_to_none=False)   # keep the .grad tensors (views of the buckets, or not)
            nn.functional.mse_loss(ddp(x), y).backward()
            optimizer.step()

        report = KnobReport(knobs)
        try:
            for i in range(steps - 1):
                step(i)
            buckets.clear()
            with _counting_allreduce(report.hook_sent):
                report.allreduces = [c for c in record(step, steps - 1, warmup=0, shapes=True).collectives()
                                     if c.kind == "all-reduce"]
        except RuntimeError as err:   # DDP's own errors (an unused parameter without find_unused_parameters)
            first = str(err).strip().splitlines()[0]
            report.error = first.split(". ")[0] + "." if ". " in first else first
        grads = [p.grad for p in mlp.parameters() if p.grad is not None]
        report.grads = len(grads)
        report.grads_in_buckets = sum(_inside(g.untyped_storage().data_ptr(), buckets) for g in grads)
        if rank == 0 and report.error is None:
            report.final = {k: v.detach().cpu().clone() for k, v in mlp.state_dict().items()}
        reports.append(report)
        del ddp
    return reports


def run(configs: list[Knobs], world: int = 2, *, steps: int = 3, width: int = 256, depth: int = 3, rows: int = 8,
        seed: int = 0, lr: float = 1e-2, timeout: float = 300.0) -> list[dict[str, Any]]:
    """Every configuration on ``world`` ranks, in one launch; rank 0's report and the difference to one process.

    Returns, per configuration, ``{"report": KnobReport, "max_diff": float or None}`` (``None``
    where training failed: the report's ``error`` says why).
    """
    from .launch import launch

    names = [c.name for c in configs]
    if not configs or len(set(names)) != len(names):
        raise ValueError(f"give one or more configurations with distinct names, got {names}")
    per_rank = launch(worker, nprocs=world, args=(list(configs), steps, width, depth, rows, seed, lr),
                      timeout=timeout, verbose=False)
    expected = reference(steps, width, depth, rows, world, seed, lr)
    results = []
    for report in per_rank[0]:
        diff = (None if report.final is None else
                max((report.final[k] - expected[k]).abs().max().item() for k in expected))
        results.append({"report": report, "max_diff": diff})
    return results
