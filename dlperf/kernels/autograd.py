"""A Triton kernel in autograd: the GELU (tanh form) with its own backward kernel.

:class:`TritonGELU` is a :class:`torch.autograd.Function` whose ``forward`` launches :func:`gelu_fwd_kernel`
and saves the input, and whose ``backward`` launches :func:`gelu_bwd_kernel`, which recomputes what it needs
from ``x`` and multiplies by the incoming gradient in the same pass.  With ``u = c (x + a x^3)``,
``c = sqrt(2 / pi)``, ``a = 0.044715`` and ``t = tanh(u)``:

    gelu(x)  = x (1 + t) / 2                                = x sig(2u)
    gelu'(x) = (1 + t) / 2 + x (1 - t^2) c (1 + 3 a x^2) / 2  = sig + 2 x sig (1 - sig) c (1 + 3 a x^2)

with ``sig = sigmoid(2u)``, since ``(1 + tanh u) / 2 = sigmoid(2u)``.  The kernels use the right-hand forms:
``1 + t`` computed from ``t`` loses the small values of ``x`` far below zero to cancellation (1e-6 absolute
error at ``x = -10`` in float32), ``sigmoid`` keeps them.

Traffic with ``s`` bytes per element, ``n`` elements: the forward reads ``x`` and writes ``y`` (``2 n s``);
the backward reads ``x`` and the gradient and writes the input's gradient (``3 n s``).  Eager PyTorch runs the
same formula as a chain of operators, each reading and writing a whole tensor, and autograd saves their
intermediates for the backward pass.

``torch.compile`` cannot see inside an ``autograd.Function``'s kernels; :func:`register_op` registers the forward
as an operator with ``torch.library.triton_op``, which Dynamo and inductor understand (compiled GPUs only:
with Triton's interpreter, tracing the operator fails).
"""

from __future__ import annotations

from typing import Any

from .mode import select_mode

MODE = select_mode(verbose=False)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["MODE", "TritonGELU", "gelu", "gelu_and_grad", "gelu_bwd_kernel", "gelu_fwd_kernel", "register_op"]

@triton.jit
def gelu_fwd_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    sig = tl.sigmoid(2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x))   # (1 + tanh u) / 2
    tl.store(y_ptr + offs, (x * sig).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_bwd_kernel(x_ptr, dy_ptr, dx_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    dy = tl.load(dy_ptr + offs, mask=mask).to(tl.float32)
    sig = tl.sigmoid(2.0 * 0.7978845608028654 * (x + 0.044715 * x * x * x))   # recomputed, not saved
    slope = sig + 2.0 * x * sig * (1.0 - sig) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
    tl.store(dx_ptr + offs, (dy * slope).to(dx_ptr.dtype.element_ty), mask=mask)


def _launch(kernel: Any, *tensors: torch.Tensor, block: int = 1024) -> None:
    n = tensors[0].numel()
    with _quiet_overflow():
        kernel[(triton.cdiv(n, block),)](*tensors, n, BLOCK=block)


def _quiet_overflow() -> Any:
    """In Triton's interpreter, ``tl.sigmoid`` of a large negative argument computes ``exp`` of a large
    positive one with numpy, which overflows to ``inf`` (the sigmoid is then 0, as on a GPU) and warns."""
    import contextlib

    if not MODE.interpreted:
        return contextlib.nullcontext()
    import numpy as np

    return np.errstate(over="ignore")


class TritonGELU(torch.autograd.Function):
    """GELU (tanh form) whose forward and backward are the two kernels above."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        _launch(gelu_fwd_kernel, x, y)
        ctx.save_for_backward(x)                 # the input only: the backward recomputes tanh
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        dx = torch.empty_like(x)
        _launch(gelu_bwd_kernel, x, dy.contiguous(), dx)
        return dx


def gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU (tanh form) with Triton kernels forward and backward."""
    return TritonGELU.apply(x)


def gelu_and_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``gelu(x)`` and its gradient for an incoming gradient of ones: one forward and one backward launch
    (a launcher :func:`dlperf.kernels.traffic.count` can run in an interpreter process by its name)."""
    x = x.detach().requires_grad_()
    y = gelu(x)
    y.backward(torch.ones_like(y))
    return y.detach(), x.grad


def register_op(name: str = "dlperf::triton_gelu") -> Any:
    """The forward as a custom operator that ``torch.compile`` can trace (``torch.library.triton_op``), with
    :class:`TritonGELU`'s backward registered for it.  Returns the operator."""
    from torch.library import triton_op, wrap_triton

    @triton_op(name, mutates_args={})
    def op(x: torch.Tensor) -> torch.Tensor:
        y = torch.empty_like(x)
        n = x.numel()
        wrap_triton(gelu_fwd_kernel)[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y

    def setup(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    def backward(ctx: Any, dy: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        dx = torch.empty_like(x)
        wrap_triton(gelu_bwd_kernel)[(triton.cdiv(x.numel(), 1024),)](x, dy.contiguous(), dx, x.numel(),
                                                                      BLOCK=1024)
        return dx

    op.register_autograd(backward, setup_context=setup)
    return op
