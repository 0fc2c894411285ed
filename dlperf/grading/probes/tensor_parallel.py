"""Probe and rules of the ``tensor_parallel`` exercise: one tensor-parallel attention block on one rank.

It runs beside the student's code on every rank of a relayed process group
(:class:`autograder.trusted.Ranks` with collectives) and holds no expected
value.  The block is driven in two calls, so that the relay's log of each call
holds one pass's collectives only: :func:`forward` makes the rank's tensors
(copies of what the checker shares, as leaves that need gradients), calls the
student's ``parallel_attention`` and keeps the graph; :func:`backward` takes
the gradient of the output and returns every leaf's gradient.  :func:`fg` runs
the two conjugate operators alone (part 1's self-check).

:data:`RULES` is the reading of the two solution cells, the same for the
self-check and for the grader (:mod:`dlperf.grading.reading`): tensor
arithmetic and softmax, the process group's rank, size and collectives,
autograd functions (a class whose base is ``torch.autograd.Function``); not
the course library's or PyTorch's tensor-parallel layers (``dlperf.parallel``,
``torch.distributed.tensor``, ``torch.distributed.nn``: the exercise is what
they do).
"""

from __future__ import annotations

from typing import Any

import torch

from dlperf.grading.reading import DEFAULT_BUILTINS, STANDARD_LIBRARY, Rules

__all__ = ["NAMES", "RULES", "backward", "fg", "forward"]

#: The block's tensors, in the order ``parallel_attention`` takes them.
NAMES = ("x", "wq", "bq", "wk", "bk", "wv", "bv", "wo", "bo")

_RUN: dict[str, Any] = {}


def forward(mod: Any, heads: int, *tensors: torch.Tensor) -> Any:
    """``mod.parallel_attention(x, wq, bq, ..., bo, heads)`` on this rank's copies of ``tensors`` (leaves that need
    gradients; ``heads``: this rank's heads); the output (detached) is returned, the graph kept for
    :func:`backward`."""
    _RUN.clear()
    leaves = [t.detach().clone().requires_grad_(True) for t in tensors]
    out = mod.parallel_attention(*leaves, heads)
    _RUN.update(leaves=leaves, out=out)
    return out.detach().clone() if isinstance(out, torch.Tensor) else out


def backward(mod: Any, grad_out: torch.Tensor) -> list[Any]:
    """The backward pass of :func:`forward`'s output with ``grad_out``; every leaf's gradient (``None`` where it
    has none), in :data:`NAMES`' order."""
    leaves, out = _RUN.pop("leaves"), _RUN.pop("out")
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise TypeError("parallel_attention's output is not connected to its inputs (it has no gradient): it must "
                        "be computed from them by operations autograd records")
    out.backward(grad_out)
    return [None if t.grad is None else t.grad.detach().clone() for t in leaves]


def fg(mod: Any, x: torch.Tensor, grad_out: torch.Tensor) -> dict[str, Any]:
    """``copy_to_parallel`` and ``reduce_from_parallel`` alone on this rank's ``x``: each one's output and the
    gradient it passes back for ``grad_out``."""
    out: dict[str, Any] = {}
    for name in ("copy_to_parallel", "reduce_from_parallel"):
        leaf = x.detach().clone().requires_grad_(True)
        y = getattr(mod, name)(leaf)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"{name} returned a {type(y).__name__}, not a tensor")
        out[name] = y.detach().clone()
        if y.requires_grad:
            y.backward(grad_out)
        out[name + ".grad"] = None if leaf.grad is None else leaf.grad.detach().clone()
    return out


# ---------------------------------------------------------------------------------------------
# The reading of the two solution cells (an allow-list: what is not named here is refused)
# ---------------------------------------------------------------------------------------------

_TORCH = {
    "torch.Tensor", "torch.no_grad", "torch.is_tensor", "torch.autograd.Function",
    "torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.ones", "torch.ones_like",
    "torch.full", "torch.tensor", "torch.arange", "torch.cat", "torch.stack", "torch.split", "torch.chunk",
    "torch.unbind", "torch.exp", "torch.log", "torch.sqrt", "torch.rsqrt", "torch.maximum", "torch.amax",
    "torch.sum", "torch.where", "torch.logsumexp", "torch.softmax", "torch.matmul", "torch.bmm", "torch.einsum",
    "torch.addmm", "torch.baddbmm", "torch.clamp", "torch.float32", "torch.float64", "torch.float",
    "torch.double", "torch.bool", "torch.long", "torch.int64", "torch.inf",
}
_DIST = {
    "torch.distributed.get_rank", "torch.distributed.get_world_size", "torch.distributed.is_initialized",
    "torch.distributed.all_reduce", "torch.distributed.ReduceOp", "torch.distributed.ReduceOp.SUM",
    "torch.distributed.barrier",
    # the relay computes and counts these; the traffic check says why the block needs none of them
    "torch.distributed.all_gather", "torch.distributed.all_gather_into_tensor", "torch.distributed.broadcast",
    "torch.distributed.reduce_scatter", "torch.distributed.reduce_scatter_tensor",
    "torch.distributed.send", "torch.distributed.recv", "torch.distributed.isend", "torch.distributed.irecv",
    "torch.distributed.batch_isend_irecv", "torch.distributed.P2POp",
}
_ATTRIBUTES = {
    # tensors
    "shape", "size", "dim", "ndim", "dtype", "device", "numel", "float", "double", "to", "clone", "detach",
    "contiguous", "transpose", "mT", "T", "t", "permute", "unsqueeze", "squeeze", "view", "view_as", "reshape",
    "reshape_as", "expand", "expand_as", "flatten", "unflatten", "split", "chunk", "narrow", "unbind", "exp",
    "log", "sqrt", "amax", "max", "sum", "mean", "matmul", "mul", "add", "sub", "div", "neg", "mul_", "add_",
    "sub_", "div_", "copy_", "zero_", "fill_", "softmax", "logsumexp", "masked_fill", "new_empty", "new_zeros",
    "new_ones", "tolist", "item",
    # autograd functions and their context
    "apply", "save_for_backward", "saved_tensors", "needs_input_grad", "mark_dirty", "set_materialize_grads",
    # a collective's request (async_op=True)
    "wait", "is_completed",
    # lists, tuples, dicts
    "append", "extend", "pop", "index", "items", "keys", "values", "get", "copy",
}

_LIBRARY = ("the course library has Megatron's f and g and the tensor-parallel layers ready-made "
            "(dlperf.parallel.tensor): write them yourself (torch and torch.distributed are all the cells need)")

RULES = Rules(
    what="copy_to_parallel, reduce_from_parallel and parallel_attention",
    imports={"torch", "torch.distributed", *STANDARD_LIBRARY["imports"]},
    names={*_TORCH, *_DIST, *STANDARD_LIBRARY["names"]},
    builtins=DEFAULT_BUILTINS,
    attributes=_ATTRIBUTES,
    decorators={"staticmethod", *STANDARD_LIBRARY["decorators"]},
    classes=True,
    explain={**{name: _LIBRARY for name in ("dlperf", "dlperf.parallel", "dlperf.parallel.tensor", "autograder",
                                            "autograder.exercises")},
             "torch.nn": "torch.nn.functional.scaled_dot_product_attention and nn.MultiheadAttention compute the "
                         "block at once; a head's attention is a matrix product, a softmax and another product",
             "torch.nn.functional": "its attention computes the block at once; a head's attention is a matrix "
                                    "product, a softmax and another product",
             "torch.distributed.nn": "its functional all_reduce is f and g ready-made: the exercise is to write them",
             "torch.distributed.tensor": "PyTorch's tensor parallelism (DTensor, parallelize_module) is the library "
                                         "version of this exercise"},
)
