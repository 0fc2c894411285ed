"""Probes and public rules of the ``flash_attention`` exercise (the self-check and the grader use the same code).

The student writes FlashAttention-2's forward kernel ``flash_fwd_kernel`` in Triton; there is no launcher
to write.  The grader launches the kernel itself, as the ``triton_softmax`` exercise does:

* Only the ``@triton.jit`` functions of the kernel's cell, its imports and plain constants
  (:func:`~dlperf.grading.probes.triton_softmax.kernel_source`) are loaded, in a process of their own
  where Triton's interpreter was chosen first (:func:`prepare`, which also makes the interpreter's
  ``bfloat16`` products and casts behave as a GPU's: :func:`dlperf.kernels.flash.fix_bf16_interpreter`).
* :func:`launch` launches ``flash_fwd_kernel[(cdiv(N, BLOCK_M), H)](q, k, v, out, lse, N, scale, CAUSAL,
  BLOCK_M, BLOCK_N, HEAD_DIM)`` (:data:`PARAMETERS`, in that order) on memory the grader owns, each tensor
  followed by a tail of canaries (:func:`buffer`), and counts the bytes the programs load and store
  (:func:`dlperf.kernels.traffic.count_traffic`).  Because the kernels' bodies may use only ``tl``
  (:data:`RULES`), nothing in that process can change the count.
* The grader reads ``out`` and ``lse`` from that memory and compares them with attention computed in
  ``float64`` (:func:`reference`, :func:`values_problem`); the inputs and the canaries must be as they
  were; the bytes must be the closed form :func:`dlperf.kernels.flash.flash_bytes`'s: loads within
  :data:`TRAFFIC_FACTOR` of it, stores exactly it (the output and the log-sum-exp, nothing of size
  ``N x N``): :func:`traffic_problem`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import torch

from dlperf.grading.probes import triton_softmax as _softmax
from dlperf.grading.reading import STANDARD_LIBRARY, Rules, cells_of, findings_case, read

__all__ = ["BYTES_RULES", "KERNEL_RULES", "PARAMETERS", "RULES", "TOLERANCE", "TRAFFIC_FACTOR", "buffer", "inputs",
           "inputs_problem", "kernel_source", "launch", "launch_kernel", "prepare", "reading", "reading_case",
           "reference", "shaped", "traffic_problem", "values_problem"]

PARAMETERS = ("q_ptr", "k_ptr", "v_ptr", "out_ptr", "lse_ptr", "seq_len", "scale", "CAUSAL", "BLOCK_M", "BLOCK_N",
              "HEAD_DIM")
# |got - expected| <= atol + rtol |expected|: the output (in the inputs' dtype), and the log-sum-exp (float32)
TOLERANCE = {torch.float16: (4e-3, 4e-3), torch.bfloat16: (2e-2, 2e-2), "lse": (1e-4, 1e-4)}
TRAFFIC_FACTOR = 1.1        # loads at most this times flash_bytes's; stores exactly flash_bytes's
IN_FILL = 30.0              # the canaries after q, k and v: a kernel that reads them gets wrong scores
OUT_FILL = -7.0             # the canaries after out and lse: they must still be there afterwards
TAIL = 4096                 # canaries after every tensor (elements): more than an unmasked block reads past the end

_UNCOUNTED = "the traffic counter does not see it (the exercise uses masked tl.load and tl.store only)"
KERNEL_RULES = _softmax.KERNEL_RULES.extended(
    what="a @triton.jit kernel (tl's operations, the kernel's arguments and locals, other @triton.jit functions)",
    names={"triton.language.dot", "triton.language.trans", "triton.language.permute", "triton.language.view",
           "triton.language.math.exp", "triton.language.math.exp2", "triton.language.math.log",
           "triton.language.math.log2"},
    explain={"triton.language.softmax": "the online softmax (running max, running sum, rescaling) is the exercise",
             ".softmax": "the online softmax (running max, running sum, rescaling) is the exercise",
             "torch": "a kernel computes with tl only (torch cannot run inside a compiled kernel)",
             "triton.language.make_block_ptr": _UNCOUNTED, "triton.language.advance": _UNCOUNTED},
)
RULES = Rules(
    what="flash_fwd_kernel's cell",
    imports=frozenset({"triton", "triton.language", "math"}),
    names=frozenset({"triton.jit", "triton.language.constexpr", "triton.language.float16", "triton.language.float32",
                     "triton.language.bfloat16", "math.*"}),
    decorators=frozenset(),
    classes=False,
    within={"triton.jit": KERNEL_RULES},
    explain={"torch": "the kernel's cell holds the kernel only: the grader launches it (torch belongs to your own "
                      "cells)",
             "dlperf": "the course's reference kernel is what you write"},
)


BYTES_RULES = Rules(
    what="kernel_bytes's cell (plain Python: arithmetic, loops, math)",
    imports=STANDARD_LIBRARY["imports"],
    names=STANDARD_LIBRARY["names"],
    classes=False,
    explain={"dlperf": "the closed form is what you write (dlperf.kernels.flash.flash_bytes is the chapter's)",
             "torch": "the bytes are arithmetic on the sizes: no tensor is needed",
             "triton": "the bytes are arithmetic on the sizes: triton.cdiv is -(-a // b)"},
)


def kernel_source(cell: str) -> str:
    """What the grader loads of the kernel's cell: its imports, ``@triton.jit`` functions and plain constants
    (:func:`dlperf.grading.probes.triton_softmax.kernel_source`)."""
    return _softmax.kernel_source(cell)


def reading(cell: str) -> list[str]:
    """The grader's reading of the kernel's cell: :data:`RULES` on what the grader loads of it, and the kernel."""
    kernel = _softmax.kernel_source(cell)
    found = [s.replace("cell 1", "your kernel's cell", 1) if s.startswith("cell 1") else s
             for s in read([("kernel", kernel)], RULES)]
    if not any("does not parse" in s for s in found) and "flash_fwd_kernel" not in _softmax.kernel_names(cell):
        found.append("your kernel's cell has no `@triton.jit` `def flash_fwd_kernel(...)` at its top level: the "
                     "grader loads only the cell's @triton.jit functions, imports and constants")
    return found


def reading_case(kernel: Any) -> Callable[[], tuple[Any, Any, bool]]:
    """A self-check case: the grader's reading of the kernel's cell."""
    return findings_case(lambda: reading(cells_of(kernel)[0][1]))


def prepare(interpret: bool | None = True) -> str:
    """The host's Triton mode, chosen before any kernel is decorated (the interpreter), with the
    interpreter's ``bfloat16`` made to behave as a GPU's."""
    chosen = _softmax.prepare(interpret)
    from dlperf.kernels.mode import select_mode

    if select_mode(verbose=False).interpreted:
        from dlperf.kernels.flash import fix_bf16_interpreter

        fix_bf16_interpreter()
    return chosen


# ---------------------------------------------------------------------------------------------
# Inputs, buffers, the reference
# ---------------------------------------------------------------------------------------------


def inputs(heads: int, n: int, d: int, dtype: torch.dtype, seed: int) -> tuple[torch.Tensor, ...]:
    """``q``, ``k``, ``v``: ``heads x n x d`` of ``dtype``, contiguous; the queries spread wide (x 2) so that the
    running maximum grows from key block to key block and the scores are large enough to be hurt by
    ``float16`` rounding."""
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(heads, n, d, generator=gen, dtype=torch.float64) for _ in range(3))
    return (2.0 * q).to(dtype), k.to(dtype), v.to(dtype)


def buffer(t: torch.Tensor, fill: float) -> torch.Tensor:
    """``t``'s elements, contiguous, followed by :data:`TAIL` canaries ``fill``: a flat tensor."""
    flat = torch.full((t.numel() + TAIL,), fill, dtype=t.dtype)
    flat[: t.numel()] = t.reshape(-1)
    return flat


def shaped(flat: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The contiguous tensor of ``shape`` at the start of a :func:`buffer` (a view)."""
    return flat[: math.prod(shape)].view(shape)


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T / sqrt(d)) v`` and the log-sum-exp of each query's scores, in float64 (query ``i``
    sees keys ``0..i`` if ``causal``)."""
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double(), torch.logsumexp(s, dim=-1)


# ---------------------------------------------------------------------------------------------
# The launch (in the host: only the allow-listed kernel's cell is loaded there)
# ---------------------------------------------------------------------------------------------


def launch_kernel(kernel: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                  lse: torch.Tensor, causal: bool, block_m: int, block_n: int, count: bool = True) -> dict[str, Any]:
    """``kernel[(cdiv(N, BLOCK_M), H)](q, k, v, out, lse, N, 1/sqrt(d), causal, BLOCK_M, BLOCK_N, d)``, the
    bytes counted when ``count`` (interpreter only): ``{"loaded": bytes, "stored": bytes, "grid": [...]}``."""
    heads, n, d = q.shape
    args = (q, k, v, out, lse, n, 1.0 / math.sqrt(d), bool(causal), block_m, block_n, d)
    fn = getattr(kernel, "fn", None)
    if callable(fn):
        try:
            inspect.signature(fn).bind(*args)
        except TypeError as exc:
            raise TypeError(f"flash_fwd_kernel{inspect.signature(fn)} cannot be launched as the specification's "
                            f"flash_fwd_kernel({', '.join(PARAMETERS)}): {exc}") from None
    grid = (-(-n // block_m), heads)
    if not count:
        kernel[grid](*args)
        return {"grid": list(grid), "loaded": 0, "stored": 0}
    from dlperf.kernels.traffic import count_traffic

    with count_traffic() as traffic:
        kernel[grid](*args)
    return {"grid": list(grid), "loaded": traffic.loaded_bytes, "stored": traffic.stored_bytes}


def launch(mod: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
           causal: bool, block_m: int, block_n: int) -> dict[str, Any]:
    """The host's probe: :func:`launch_kernel` of ``mod.flash_fwd_kernel`` (the kernel's part only is loaded)."""
    return launch_kernel(mod.flash_fwd_kernel, q, k, v, out, lse, causal, block_m, block_n)


# ---------------------------------------------------------------------------------------------
# The verdicts
# ---------------------------------------------------------------------------------------------


def _first_bad(bad: torch.Tensor) -> str:
    h, i = (int(x) for x in bad.nonzero()[0][:2])
    return f"head {h}, query {i}"


def values_problem(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, out_flat: torch.Tensor,
                   lse_flat: torch.Tensor) -> str | None:
    """``None`` when the output and the log-sum-exp (read from their :func:`buffer`) are attention's within
    :data:`TOLERANCE` and their canaries untouched; else what is wrong, as a sentence."""
    heads, n, d = q.shape
    want_out, want_lse = reference(q, k, v, causal)
    got_out, got_lse = shaped(out_flat, (heads, n, d)).double(), shaped(lse_flat, (heads, n)).double()
    rtol, atol = TOLERANCE[q.dtype]
    bad = ~torch.isclose(got_out, want_out, rtol=rtol, atol=atol)
    if bad.any():
        rows = bad.any(-1)
        worst = float((got_out - want_out).abs().nan_to_num(float("inf")).max())
        nan = int(torch.isnan(got_out).sum())
        return (f"the output differs from attention computed in float64 for {int(rows.sum())} of {heads * n} queries "
                f"(first: {_first_bad(rows)}; worst error {worst:.3g}, tolerance {atol:g} + {rtol:g} |value|"
                + (f"; {nan} NaN (a query whose keys were all masked gives 0 / 0)" if nan else "") + ")")
    rtol, atol = TOLERANCE["lse"]
    bad = ~torch.isclose(got_lse, want_lse, rtol=rtol, atol=atol)
    if bad.any():
        h, i = (int(x) for x in bad.nonzero()[0])
        return (f"the log-sum-exp differs for {int(bad.sum())} of {heads * n} queries (first: head {h}, query {i}: "
                f"got {float(got_lse[h, i]):.6g}, expected {float(want_lse[h, i]):.6g}): store m + log(l), the "
                "running maximum plus the log of the running sum, in float32")
    if not _intact(out_flat, heads * n * d) or not _intact(lse_flat, heads * n):
        return "the kernel wrote past the end of out or lse (mask the stores of the last query block)"
    return None


def _intact(flat: torch.Tensor, used: int) -> bool:
    tail = flat[used:]
    want = torch.full_like(tail, OUT_FILL)
    bits = torch.int16 if flat.element_size() == 2 else torch.int32
    return bool(torch.equal(tail.view(bits), want.view(bits)))


def inputs_problem(before: list[torch.Tensor], after: list[torch.Tensor]) -> str | None:
    """``None`` when q, k and v (and their tails) are as they were."""
    for name, a, b in zip("qkv", before, after):
        if not torch.equal(a.view(torch.int16), b.view(torch.int16)):
            return f"the kernel wrote into its input {name} (or past its end)"
    return None


def traffic_problem(report: Any, heads: int, n: int, d: int, itemsize: int, block_m: int, block_n: int,
                    causal: bool) -> str | None:
    """``None`` when the launch loaded at least and at most :data:`TRAFFIC_FACTOR` times what
    :func:`dlperf.kernels.flash.flash_bytes` says, and stored exactly what it says (``out`` and ``lse``)."""
    from dlperf.kernels.flash import flash_bytes, standard_bytes

    if not isinstance(report, dict) or type(report.get("loaded")) is not int or type(report.get("stored")) is not int:
        return "the probe's report is malformed"
    want = flash_bytes(heads, n, n, d, itemsize, block_m, block_n, causal)
    loaded, stored = report["loaded"], report["stored"]
    said = (f"the kernel loaded {loaded:,} B and stored {stored:,} B; FlashAttention loads {want['load']:,} B (each "
            f"program its queries once and the keys and values it needs once) and stores {want['store']:,} B (out "
            f"and lse); standard attention would move {standard_bytes(heads, n, n, d, itemsize):,} B")
    if stored != want["store"]:
        return (f"{said}: store only the output ({itemsize} B per element) and the log-sum-exp (4 B per query), "
                "each once, masked: nothing else goes to global memory")
    if loaded < want["load"]:
        return f"{said}: some queries, keys or values were never loaded"
    if loaded > TRAFFIC_FACTOR * want["load"]:
        return (f"{said}: {loaded / want['load']:.2f}x the loads, at most {TRAFFIC_FACTOR:g}x allowed: load the "
                "queries once per program, each key and value block once, mask the ragged ends"
                + (", and skip the key blocks wholly above the diagonal" if causal else ""))
    return None
