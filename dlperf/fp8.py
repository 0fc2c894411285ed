"""Eight-bit floating point: the two formats, how a tensor is scaled into them, and what that costs.

Two FP8 formats (Micikevicius et al., "FP8 Formats for Deep Learning", arXiv:2209.05433, 2022), both on
the tensor cores of NVIDIA's Hopper and later GPUs and in PyTorch as ``torch.float8_e4m3fn`` and
``torch.float8_e5m2``:

* **E4M3** (4 exponent bits, 3 mantissa bits; ``fn``: finite, no infinities, one NaN pattern, which buys
  the largest value 448): more precision, less range.  The paper and NVIDIA's Transformer Engine
  (``recipe.Format.HYBRID``) use it for the forward pass: weights and activations.
* **E5M2** (5 and 2, IEEE-like, with infinities; largest 57344): more range, less precision, for the
  gradients of the backward pass, whose magnitudes spread over more powers of two.

An FP8 tensor only works with a **scale**: ``x_fp8 = cast(x * scale)`` with ``scale = max_fp8 / amax``,
so that the largest magnitude lands on the format's largest value, and ``x ~ x_fp8 / scale``.  The
scale's *granularity* decides what one outlier costs: **tensorwise**, one ``amax`` for the whole tensor
(torchao.float8's default recipe); **rowwise**, one per row (torchao's "rowwise" recipe, a scale per
token of the activations and per output channel of the weights); finer tiles (DeepSeek-V3's 1 x 128
groups, arXiv:2412.19437) go further.  Scales are computed here from the tensor itself ("dynamic"
scaling); Transformer Engine's "delayed" scaling takes them from the ``amax`` history of earlier steps.

:func:`quantize` does the scaled cast and returns the dequantised ``float32`` tensor;
:func:`quantization_error` measures relative error and underflow; :func:`capture_linear` collects the
inputs (activations) and output gradients of every ``nn.Linear`` of a model, the tensors an FP8 matrix
product would cast; :func:`scaled_mm` multiplies two matrices in FP8 through ``torch._scaled_mm`` (the
tensor cores' FP8 product on a GPU that has them; PyTorch emulates it on a CPU), with scales per tensor
or per row of ``a`` and column of ``b``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable

import torch
from torch import nn

__all__ = ["FP8", "GRANULARITIES", "capture_linear", "emulated_scaled_mm", "layout", "quantization_error", "quantize",
           "scaled_mm", "scaled_mm_operands"]

FP8 = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2}
GRANULARITIES = ("none", "tensor", "row")
_EPS = 1e-12           # the smallest amax a scale is computed from (an all-zero tensor keeps scale max/EPS)


def layout(dtype: torch.dtype) -> dict[str, float]:
    """Bits, range and precision of a floating-point dtype, from ``torch.finfo``.

    ``subnormal`` is the smallest positive value, ``smallest_normal * eps``; ``digits`` the decimal digits of
    the significand, ``(mantissa + 1) log10 2``; ``binades`` the powers of two from the smallest subnormal
    to the largest value.

    >>> layout(torch.float8_e4m3fn)["max"], layout(torch.float8_e5m2)["max"]
    (448.0, 57344.0)
    """
    fi = torch.finfo(dtype)
    mantissa = round(-math.log2(fi.eps))
    subnormal = fi.smallest_normal * fi.eps
    return {"bits": fi.bits, "exponent": fi.bits - 1 - mantissa, "mantissa": mantissa, "max": fi.max,
            "normal": fi.smallest_normal, "subnormal": subnormal, "eps": fi.eps,
            "digits": (mantissa + 1) * math.log10(2), "binades": math.log2(fi.max / subnormal)}


def quantize(x: torch.Tensor, dtype: torch.dtype, granularity: str = "tensor"):
    """Cast ``x`` to the FP8 ``dtype`` with a scale and back: ``(dequantised float32 tensor, scale)``.

    ``granularity``: ``"none"`` (scale 1: the values as they are), ``"tensor"`` (``scale = max / amax`` of the
    whole tensor) or ``"row"`` (one scale per row, along the last dimension).  Values past the format's
    largest are saturated to it (a plain cast to E4M3 would give NaN there).
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    x = x.float()
    fmax = torch.finfo(dtype).max
    if granularity == "none":
        scale = torch.ones((), device=x.device)
    elif granularity == "tensor":
        scale = fmax / x.abs().amax().clamp(min=_EPS)                 # one number
    else:
        scale = fmax / x.abs().amax(dim=-1, keepdim=True).clamp(min=_EPS)  # one per row
    q = (x * scale).clamp(-fmax, fmax).to(dtype)        # what the tensor cores read
    return q.float() / scale, scale


def quantization_error(x: torch.Tensor, dequantised: torch.Tensor) -> dict[str, float]:
    """How far ``dequantised`` is from ``x``.

    ``relative``: ``||x - x~|| / ||x||`` (2-norms over the whole tensor); ``worst_row``: the largest of the
    same ratio taken row by row (rows along the last dimension; all-zero rows left out), which shows what
    a tensor's small rows suffer; ``underflow``: the fraction of non-zero values of ``x`` that came back 0.
    """
    x = x.float()
    nonzero = x != 0
    err = (x - dequantised).reshape(-1, x.shape[-1]).norm(dim=-1)
    norm = x.reshape(-1, x.shape[-1]).norm(dim=-1)
    rows = err[norm > 0] / norm[norm > 0]
    return {"relative": ((x - dequantised).norm() / x.norm().clamp(min=1e-30)).item(),
            "worst_row": rows.max().item() if rows.numel() else 0.0,
            "underflow": ((dequantised == 0) & nonzero).sum().item() / max(1, int(nonzero.sum()))}


def capture_linear(model: nn.Module, loss: Callable[[], torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """Run ``loss()`` forward and backward once; for every ``nn.Linear`` of ``model`` return its input
    (``"activation"``), its weight (``"weight"``) and the gradient of the loss with respect to its output
    (``"gradient"``): the three operands an FP8 linear layer casts (forward: activation and weight;
    backward: the gradient).  Hooks are removed afterwards; parameter gradients are left as computed."""
    found: dict[str, dict[str, torch.Tensor]] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            found[name] = {"weight": module.weight.detach().clone()}

            def forward_hook(mod, inputs, output, name=name):
                found[name]["activation"] = inputs[0].detach().clone()

            def backward_hook(mod, grad_input, grad_output, name=name):   # fires on outputs too
                found[name]["gradient"] = grad_output[0].detach().clone()

            handles += [module.register_forward_hook(forward_hook),
                        module.register_full_backward_hook(backward_hook)]
    try:
        with warnings.catch_warnings():    # the inputs need no gradient; the hooks on outputs are what we want
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            loss().backward()
    finally:
        for handle in handles:
            handle.remove()
    return found


def scaled_mm_operands(a: torch.Tensor, b: torch.Tensor, granularity: str = "tensor",
                       dtype: torch.dtype = torch.float8_e4m3fn):
    """The operands of ``torch._scaled_mm`` for ``a @ b`` (``a``: M x K, ``b``: K x N): ``(a8, b8, sa, sb)``.

    ``a8``, ``b8`` are the scaled casts (``b8`` column-major, as ``_scaled_mm`` wants it); ``sa``, ``sb`` the
    *dequantising* scales in float32 (``amax / max_fp8``: the product is ``(a8 @ b8) * sa * sb``), one number
    each (``"tensor"``) or one per row of ``a`` (M x 1) and per column of ``b`` (1 x N) (``"row"``: the sums
    run along K, so a scale along M or N can be taken out of them)."""
    if granularity not in ("tensor", "row"):
        raise ValueError(f"granularity must be 'tensor' or 'row', got {granularity!r}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"a (M x K) @ b (K x N): got {tuple(a.shape)} and {tuple(b.shape)}")
    fmax = torch.finfo(dtype).max
    a, b = a.float(), b.float()
    if granularity == "tensor":
        sa, sb = a.abs().amax() / fmax, b.abs().amax() / fmax
    else:
        sa, sb = a.abs().amax(dim=1, keepdim=True) / fmax, b.abs().amax(dim=0, keepdim=True) / fmax
    sa, sb = sa.clamp(min=_EPS / fmax), sb.clamp(min=_EPS / fmax)
    a8 = (a / sa).clamp(-fmax, fmax).to(dtype)
    b8 = (b / sb).clamp(-fmax, fmax).to(dtype).t().contiguous().t()      # column-major
    return a8, b8, sa, sb


def scaled_mm(a: torch.Tensor, b: torch.Tensor, granularity: str = "tensor",
              dtype: torch.dtype = torch.float8_e4m3fn, out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """``a @ b`` with both operands cast to FP8 (:func:`scaled_mm_operands`), by ``torch._scaled_mm``.

    On a CPU with scales per row, the same product of the same FP8 operands is computed in float32
    (:func:`emulated_scaled_mm`): torch 2.11's CPU backend takes per-tensor scales only (an H200 build,
    2026-11-30: "Now _scaled_mm only supports per-tensor scaling for CPU backend")."""
    a8, b8, sa, sb = scaled_mm_operands(a, b, granularity, dtype)
    if a8.device.type == "cpu" and granularity != "tensor":
        return emulated_scaled_mm(a8, b8, sa, sb, out_dtype)
    return torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=out_dtype)


def emulated_scaled_mm(a8: torch.Tensor, b8: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor,
                       out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """What ``torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb)`` computes: the FP8 values multiplied exactly
    (each product of two FP8 numbers is exact in float32) and summed in float32, then scaled."""
    return ((a8.float() @ b8.float()) * sa * sb).to(out_dtype)
