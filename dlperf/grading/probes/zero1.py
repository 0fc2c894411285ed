"""Probe of the ``zero1`` exercise: drives the student's ``ShardedOptimizer`` on one rank, and the reading's rules.

It runs beside the student's code, on every rank of a relayed process group
(:class:`autograder.trusted.Ranks` with collectives), and holds no expected
value.  :func:`build` and :func:`batch` are public: the checker builds the same
model and data from the same seed and trains it itself with ``torch.optim``.

The training is driven one call at a time (:func:`start`, :func:`step` per
step, :func:`finish`) so that between two calls, while the rank is idle and
its optimizer alive, the checker can read the rank's resident memory from the
kernel (``/proc/<pid>/status``), outside this process.  :func:`train` is the
same in one call.

:data:`RULES` is the reading of the solution cells, the same for the
self-check and for the grader (:mod:`dlperf.grading.reading`).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812 - the usual name

from dlperf.grading.reading import DEFAULT_BUILTINS, STANDARD_LIBRARY, Rules

from .mlp import BATCH, batch, build

__all__ = ["BATCH", "OPTIMIZERS", "RULES", "batch", "build", "finish", "partitions", "start", "state_bytes", "step",
           "train"]

OPTIMIZERS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}

# ---------------------------------------------------------------------------------------------
# The reading of the two solution cells (an allow-list: what is not named here is refused)
# ---------------------------------------------------------------------------------------------

_TORCH = {
    "torch.no_grad", "torch.enable_grad", "torch.Tensor", "torch.is_tensor", "torch.numel",
    "torch.zeros", "torch.zeros_like", "torch.ones", "torch.ones_like", "torch.empty", "torch.empty_like",
    "torch.full", "torch.full_like", "torch.tensor", "torch.cat", "torch.stack", "torch.split", "torch.flatten",
    "torch.float32", "torch.float64", "torch.float16", "torch.bfloat16", "torch.int64", "torch.int32", "torch.long",
    "torch.float", "torch.double",
    "torch.nn.Parameter", "torch.nn.Module", "torch.nn.utils.parameters_to_vector",
    "torch.nn.utils.vector_to_parameters",
    "torch.optim.Optimizer", "torch.optim.SGD", "torch.optim.Adam", "torch.optim.AdamW",
}
_DIST = {
    "torch.distributed.get_rank", "torch.distributed.get_world_size", "torch.distributed.is_initialized",
    "torch.distributed.broadcast", "torch.distributed.barrier", "torch.distributed.all_reduce",
    "torch.distributed.all_gather", "torch.distributed.all_gather_into_tensor", "torch.distributed.ReduceOp",
    "torch.distributed.ReduceOp.SUM",
}
# Attributes of values (tensors, parameters, the inner optimizer, lists, dicts, a collective's Work); the
# names the student's own class defines (self.owners, self.optimizer, ...) are always allowed.
_ATTRIBUTES = {
    # tensors and parameters
    "grad", "data", "numel", "nelement", "element_size", "shape", "size", "dim", "dtype", "device",
    "requires_grad", "requires_grad_", "detach", "detach_", "clone", "copy_", "zero_", "fill_", "add_", "sub_",
    "mul_", "div_", "addcmul_", "addcdiv_", "lerp_", "sqrt", "sqrt_", "add", "sub", "mul", "div", "neg",
    "view", "view_as", "reshape", "reshape_as", "flatten", "split", "narrow", "contiguous", "is_contiguous",
    "sum", "abs", "max", "min", "norm", "item", "tolist", "is_leaf", "T",
    # the inner optimizer
    "step", "zero_grad", "param_groups", "state", "add_param_group", "state_dict", "load_state_dict", "defaults",
    # a collective's Work (async_op=True)
    "wait", "is_completed",
    # lists, dicts, sets, tuples, strings
    "append", "extend", "insert", "pop", "index", "count", "sort", "reverse", "items", "keys", "values", "get",
    "setdefault", "update", "add", "discard", "remove", "clear", "copy", "join", "format",
    # math, itertools and friends reached through a call result
    "real", "imag", "bit_length",
}

RULES = Rules(
    what="partition and ShardedOptimizer",
    imports={"torch", "torch.distributed", "torch.nn", "torch.optim", *STANDARD_LIBRARY["imports"]},
    names={*_TORCH, *_DIST, *STANDARD_LIBRARY["names"]},
    builtins=DEFAULT_BUILTINS,
    attributes=_ATTRIBUTES,
    decorators={"staticmethod", "classmethod", "property", "torch.no_grad", *STANDARD_LIBRARY["decorators"]},
    classes=True,
    explain={
        "torch.distributed.optim": "torch.distributed.optim holds ZeroRedundancyOptimizer, which is what you "
                                   "write here",
        "gc": "the garbage collector is not needed to shard an optimizer",
        "torch.distributed.send": "point-to-point messages are not part of ZeRO-1 (one broadcast per parameter)",
        "torch.distributed.recv": "point-to-point messages are not part of ZeRO-1 (one broadcast per parameter)",
        "torch.distributed.isend": "point-to-point messages are not part of ZeRO-1 (one broadcast per parameter)",
        "torch.distributed.irecv": "point-to-point messages are not part of ZeRO-1 (one broadcast per parameter)",
        "torch.save": "the optimizer state stays in the rank's memory",
        "torch.load": "the optimizer state stays in the rank's memory",
        "torch.cuda": "the exercise runs on the CPU (the rank's memory is what is measured)",
        ".cuda": "the exercise runs on the CPU (the rank's memory is what is measured)",
        ".to": "the parameters, gradients and state stay where they are (the rank's memory is measured)",
    },
)


# ---------------------------------------------------------------------------------------------
# Driving the student's optimizer
# ---------------------------------------------------------------------------------------------

_RUN: dict[str, Any] = {}


def _exact_memory() -> None:
    """glibc: every block from 64 KiB up gets a mapping of its own, unmapped when freed (no dynamic
    threshold, no cached heap top), so that the resident memory the checker reads between two calls
    is what is alive, not what an allocator kept: the same in the student's rank and in the checker's
    calibration run."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None)
        libc.mallopt(-3, 64 * 1024)     # M_MMAP_THRESHOLD
        libc.mallopt(-1, 128 * 1024)    # M_TRIM_THRESHOLD


class _Calibration:
    """The checker's calibration rank: ``torch.optim`` over the parameters the checker names, nothing
    communicated.  It keeps what a ZeRO-1 rank keeps (model, gradients, its shard's state); it does not
    train correctly (no broadcast) and it is not a solution."""

    def __init__(self, params: list[torch.Tensor], optimizer_class: Any, owned: Sequence[int], **kwargs: Any):
        self.params = params
        mine = [params[i] for i in owned]
        self.optimizer = optimizer_class(mine, **kwargs) if mine else None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        if self.optimizer is not None:
            self.optimizer.step()


def start(mod: Any, dims: Sequence[int], seed: int, optimizer: str, kwargs: dict[str, Any],
          owned: Sequence[int] | None = None, collect: bool = True, alone: bool = False) -> None:
    """Build the seeded model on this rank and ``mod.ShardedOptimizer(params, optimizer class, **kwargs)``
    (with ``owned``: the calibration stand-in instead), kept here for :func:`step` and :func:`finish`.
    ``collect``: collect the garbage of earlier runs first (before a run whose memory is read);
    ``alone``: a process without a process group (the calibration), whose steps skip the all-reduce."""
    _RUN.clear()
    if collect:
        gc.collect()
    _exact_memory()
    model = build(dims, seed)
    params = list(model.parameters())
    cls = OPTIMIZERS[optimizer]
    opt = _Calibration(params, cls, owned, **kwargs) if owned is not None else mod.ShardedOptimizer(params, cls,
                                                                                                   **kwargs)
    _RUN.update(model=model, params=params, opt=opt, dims=list(dims), seed=int(seed), steps=0, zero_grad=[],
                alone=bool(alone))


def _grads(params: Sequence[torch.Tensor]) -> str:
    """What the gradients are after ``zero_grad``: ``none``, ``zero`` (tensors of zeros), or what else."""
    if all(p.grad is None for p in params):
        return "none"
    if all(p.grad is not None for p in params):
        return "zero" if all(not bool(p.grad.any()) for p in params) else "not zero"
    return "some none"


def step(mod: Any) -> str:
    """One training step on this rank: ``zero_grad`` (steps 2, 4, ... ``zero_grad(set_to_none=False)``),
    forward and backward on this rank's batch, one ``all_reduce`` of all the gradients (flattened, in
    parameter order) divided by the number of ranks, written back into ``.grad``, the student's ``step()``.
    Returns what the gradients were right after ``zero_grad`` (``none``, ``zero``, ...)."""
    model, params, opt = _RUN["model"], _RUN["params"], _RUN["opt"]
    k = _RUN["steps"]
    n, rank = (1, 0) if _RUN["alone"] else (dist.get_world_size(), dist.get_rank())
    had = all(p.grad is not None for p in params)
    if k % 2:
        opt.zero_grad(set_to_none=False)
    else:
        opt.zero_grad()
    after = _grads(params)
    _RUN["zero_grad"].append({"set_to_none": not k % 2, "had_grads": had, "after": after})
    x, y = batch(_RUN["dims"], _RUN["seed"], rank, k)
    F.mse_loss(model(x), y).backward()
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    if not _RUN["alone"]:
        dist.all_reduce(flat)
    flat /= n
    with torch.no_grad():
        for p, g in zip(params, flat.split([p.numel() for p in params])):
            p.grad.copy_(g.view_as(p))
    del flat, x, y
    opt.step()
    _RUN["steps"] = k + 1
    return after


def state_bytes(optimizer: Any) -> int:
    """Bytes of every tensor in ``optimizer.state`` (moments, momentum buffers, step counters)."""
    total = 0
    for entry in optimizer.state.values():
        for value in entry.values():
            if isinstance(value, torch.Tensor):
                total += value.numel() * value.element_size()
    return total


def finish(mod: Any) -> dict[str, Any]:
    """This rank's parameters and what its optimizers hold, then everything dropped.

    ``owned``: the parameters (indices) that the ``torch.optim.Optimizer`` objects alive in this process
    hold (``self.optimizer`` and any other); ``with_state``: those they have state for; ``state_bytes``:
    the bytes of that state; ``zero_grad``: per step, whether ``zero_grad`` was asked to set the gradients
    to None, whether every parameter had one before it, and what it left (:func:`step`); ``cuda``: whether CUDA was
    started here (the rank's memory is measured in the host's memory).  A census taken in this process:
    the checker also measures the rank's memory from outside it.
    """
    params, opt = _RUN["params"], _RUN["opt"]
    optimizers = [o for o in gc.get_objects() if isinstance(o, torch.optim.Optimizer)]
    held = [q for o in optimizers for group in o.param_groups for q in group["params"]]
    with_state = [q for o in optimizers for q in o.state]
    result = {"params": [p.detach().clone() for p in params],
              "optimizers": len(optimizers),
              "inner": type(getattr(opt, "optimizer", None)).__name__,
              "owned": [i for i, p in enumerate(params) if any(p is q for q in held)],
              "with_state": [i for i, p in enumerate(params) if any(p is q for q in with_state)],
              "state_bytes": sum(state_bytes(o) for o in optimizers),
              "zero_grad": list(_RUN["zero_grad"]),
              "cuda": bool(torch.cuda.is_initialized())}
    del opt, optimizers, held, with_state
    _RUN.clear()
    return result


def train(mod: Any, dims: Sequence[int], seed: int, steps: int, optimizer: str, kwargs: dict[str, Any]
          ) -> dict[str, Any]:
    """:func:`start`, ``steps`` x :func:`step`, :func:`finish`, in one call."""
    start(mod, dims, seed, optimizer, kwargs, collect=False)
    for _ in range(steps):
        step(mod)
    return finish(mod)


def partitions(mod: Any, cases: Sequence[tuple[Sequence[int], int]]) -> list[Any]:
    """``mod.partition(sizes, world_size)`` for each case: the owners, or the exception's name and message."""
    out: list[Any] = []
    for sizes, n in cases:
        try:
            got = mod.partition(list(sizes), int(n))
            out.append([int(o) if isinstance(o, int) and not isinstance(o, bool) else repr(o)[:40] for o in got]
                       if isinstance(got, (list, tuple)) else repr(got)[:80])
        except Exception as exc:  # noqa: BLE001 - reported to the checker as the case's result
            out.append(f"raised {type(exc).__name__}: {str(exc)[:200]}")
    return out
