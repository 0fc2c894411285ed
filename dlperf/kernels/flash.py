"""FlashAttention's forward pass in Triton, and the closed forms of the bytes it and standard attention move.

The kernel follows FlashAttention-2's loop order (Dao, "FlashAttention-2", 2023, algorithm 1; Dao et al.,
"FlashAttention", 2022, for the tiling and the online softmax): **one program per block of ``BLOCK_M``
queries of one head**, which keeps its queries, a running maximum ``m``, a running sum ``l`` and an
output accumulator ``acc`` (all ``float32``) on the chip and walks the keys and values in blocks of
``BLOCK_N``.  For each key block it computes the ``BLOCK_M x BLOCK_N`` scores, rescales ``l`` and ``acc``
by ``exp(m_old - m_new)`` where the maximum grew, and adds the new block's exponentials and their product
with the values.  The output is normalised once, at the end, and the log-sum-exp ``lse = m + log l`` of
every query is stored for the backward pass.  The identity behind it is :mod:`dlperf.attention`'s.

* **Causal** (query ``i`` sees keys ``j <= i``, queries and keys aligned at position 0, as
  ``F.scaled_dot_product_attention(is_causal=True)``): a query block stops at its last query, so key
  blocks wholly above the diagonal are never loaded; the block on the diagonal is masked.
* **Ragged lengths**: the last query block and the last key block may stick out past ``n_q`` and ``n_k``;
  their lanes are masked (loads move nothing, masked scores are ``-inf``).
* **Precision**: ``float16``/``bfloat16`` inputs, products accumulated in ``float32``; the probabilities
  are cast to the values' dtype for the second product, as FlashAttention does.  The output has the
  inputs' dtype, ``lse`` is ``float32``.

Memory traffic, ``s`` bytes per element, ``G`` heads (batch x heads), head dimension ``d``, what
:mod:`dlperf.kernels.traffic` counts (:func:`flash_bytes`, :func:`standard_bytes`):

* **FlashAttention** (this kernel), ``T = ceil(n_q / BLOCK_M)`` query blocks: every program loads its queries
  once and the keys and values it visits; it stores its output and its ``lse`` (4 bytes a query)::

      loads  = G s d (n_q + 2 sum_t K_t),   stores = G n_q (s d + 4),

  where ``K_t`` is the number of keys program ``t`` loads: ``n_k`` without a mask; causal,
  ``min(ceil(min((t + 1) BLOCK_M, n_k) / BLOCK_N) BLOCK_N, n_k)``.  For ``n_q = n_k = n`` a multiple of
  ``BLOCK_M`` (itself a multiple of ``BLOCK_N``), ``sum_t K_t`` is ``T n`` without a mask and
  ``n (T + 1) / 2`` causal.  Nothing of size ``n_q x n_k`` is ever stored: the total stored is the output.
* **Standard attention** (:func:`standard_attention`, eager PyTorch, one pass per operation): the queries
  scaled (read and write ``n_q d``), ``S = Q K^T`` (read ``Q`` and ``K``, write ``S``), ``P = softmax(S)``
  (read ``S``, write ``P``), ``O = P V`` (read ``P`` and ``V``, write ``O``)::

      bytes = G s (4 n_q d + 2 n_k d + 4 n_q n_k),

  of which ``4 n_q n_k s`` per head is the ``n_q x n_k`` matrix written twice and read twice.  A causal
  mask changes nothing of it but adds passes of its own (the whole matrix is still formed).

So the ratio is about ``4 n_q n_k / (2 T n_k d) = 2 BLOCK_M / d`` for long sequences: the keys and values
are read ``T`` times instead of the scores being written and read four times.
"""

from __future__ import annotations

import math

from .mode import select_mode

MODE = select_mode(verbose=False)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

__all__ = ["MODE", "fix_bf16_interpreter", "flash_attention", "flash_fwd_kernel", "flash_bytes", "flash_keys_loaded",
           "standard_attention", "standard_bytes"]


def fix_bf16_interpreter() -> bool:
    """Make the interpreter's ``bfloat16`` behave as a GPU's in products and casts; True where it patched.

    Triton's interpreter keeps ``bfloat16`` blocks as ``uint16`` arrays of their bits.  Two consequences,
    seen with triton 3.9.0 on 2026-11-29, that this kernel would inherit:

    * ``tl.dot`` hands the arrays to ``np.matmul`` as they are, so a product of two ``bfloat16`` blocks
      multiplies integers (results near 1e10 for operands near 1).  Patched: ``bfloat16`` operands are
      widened to ``float32`` first (exact: a ``bfloat16`` is the upper half of a ``float32``), which is
      what the tensor cores do: exact products, ``float32`` sums.
    * ``x.to(tl.bfloat16)`` from ``float32`` truncates the significand, where a GPU (and PyTorch) rounds
      to the nearest even value: an error twice as large.  Patched: round to nearest even.

    Compiled kernels are not affected.
    """
    import numpy as np
    from triton.runtime import interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    original_dot = getattr(builder, "create_dot", None)
    original_cast = getattr(builder, "cast_impl", None)     # where casts go (triton 3.x)
    if original_dot is None or getattr(original_dot, "dlperf_bf16", False):
        return False

    def widen(h):
        if h.dtype.scalar == tl.bfloat16:
            return interpreter.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        return h

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original_dot(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            x = np.ascontiguousarray(src.data, dtype=np.float32)
            bits = x.view(np.uint32).astype(np.uint64)
            rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            rounded = np.where(np.isnan(x), np.uint16(0x7FC0), rounded)
            return interpreter.TensorHandle(rounded, tl.bfloat16)
        return original_cast(self, src, dst_type)

    create_dot.dlperf_bf16 = True  # type: ignore[attr-defined]
    builder.create_dot = create_dot
    if original_cast is not None:   # another Triton may cast elsewhere: then its own rounding stays
        builder.cast_impl = cast_impl
    return True


if MODE.interpreted:
    fix_bf16_interpreter()


@triton.jit
def flash_fwd_kernel(q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, N_Q, N_K, D, scale,
                     stride_qh, stride_qn, stride_kh, stride_kn, stride_vh, stride_vn,
                     stride_oh, stride_on, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    start_m = tl.program_id(0)                  # which block of queries
    head = tl.program_id(1)                     # which (batch, head)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    q_mask = (rows[:, None] < N_Q) & (dims[None, :] < D)
    q_off = head * stride_qh + rows[:, None] * stride_qn + dims[None, :]
    q = tl.load(q_ptr + q_off, mask=q_mask, other=0.0)     # stays on the chip
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)   # running max
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)                 # running sum
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)         # sum of p v
    hi = N_K
    if CAUSAL:                                  # blocks past the last query: skipped
        hi = tl.minimum((start_m + 1) * BLOCK_M, N_K)
    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (cols[:, None] < N_K) & (dims[None, :] < D)
        k_off = head * stride_kh + cols[:, None] * stride_kn + dims[None, :]
        v_off = head * stride_vh + cols[:, None] * stride_vn + dims[None, :]
        k = tl.load(k_ptr + k_off, mask=kv_mask, other=0.0)     # BLOCK_N x BLOCK_D
        v = tl.load(v_ptr + v_off, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale      # BLOCK_M x BLOCK_N scores, float32
        keep = cols[None, :] < N_K              # lanes past the last key
        if CAUSAL:
            keep = keep & (cols[None, :] <= rows[:, None])       # the diagonal block
        s = tl.where(keep, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)             # <= 1: the old maximum was too small
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None]              # rescale what was summed so far
        acc += tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]                    # one normalisation, at the end
    o_off = head * stride_oh + rows[:, None] * stride_on + dims[None, :]
    tl.store(o_ptr + o_off, out.to(o_ptr.dtype.element_ty), mask=q_mask)
    tl.store(lse_ptr + head * N_Q + rows, m_i + tl.log(l_i), mask=rows < N_Q)


def flash_attention(q, k, v, causal=False, scale=None, block_m=64, block_n=64,
                    return_lse=False, kernel=None, num_warps=4, num_stages=2):
    """``softmax(q k^T * scale) v`` by :func:`flash_fwd_kernel`: one program per
    query block and head.  ``q``: ``... x n_q x d``; ``k``, ``v``: ``... x n_k x d``.

    Returns the output (``q``'s dtype) and, with ``return_lse``, the log-sum-exp of
    each query's scores (``... x n_q``, float32).  ``kernel``: a variant with the
    same signature (the tests launch a wrong one).  Compiled, ``tl.dot`` needs
    blocks of at least 16 (the head dimension is padded to a power of two >= 16).
    """
    _check(q, k, v, block_m, block_n)
    *lead, n_q, d = q.shape
    n_k = k.shape[-2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    q3, k3, v3 = (t.reshape(-1, t.shape[-2], d).contiguous() for t in (q, k, v))
    out = torch.empty_like(q3)                           # (batch x heads) x n_q x d
    lse = torch.empty(q3.shape[:2], dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(n_q, block_m), q3.shape[0])      # query blocks x heads
    (kernel or flash_fwd_kernel)[grid](
        q3, k3, v3, out, lse, n_q, n_k, d, scale, *q3.stride()[:2], *k3.stride()[:2],
        *v3.stride()[:2], *out.stride()[:2], CAUSAL=causal, BLOCK_M=block_m,
        BLOCK_N=block_n, BLOCK_D=max(16, triton.next_power_of_2(d)),
        num_warps=num_warps, num_stages=num_stages)
    out = out.reshape(*lead, n_q, d)
    return (out, lse.reshape(*lead, n_q)) if return_lse else out


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_m: int, block_n: int) -> None:
    if q.shape[:-2] != k.shape[:-2] or k.shape != v.shape or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"shapes do not fit: q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if block_m % block_n:
        raise ValueError(f"block_m ({block_m}) must be a multiple of block_n ({block_n})")


def standard_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                       scale: float | None = None) -> torch.Tensor:
    """Attention as eager PyTorch writes it, one pass per operation, forming the ``n_q x n_k`` matrix.

    In the inputs' dtype (as an eager model in ``float16`` runs it): scale the queries, ``S = Q K^T``,
    (causal: mask ``S``), ``P = softmax(S)``, ``O = P V``."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    *lead, n_q, d = q.shape
    q3, k3, v3 = (t.reshape(-1, t.shape[-2], d) for t in (q, k, v))   # views: (batch x heads) x n x d
    s = torch.bmm(q3 * scale, k3.transpose(1, 2))
    if causal:
        keep = torch.ones(n_q, k.shape[-2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.bmm(torch.softmax(s, dim=-1), v3).reshape(*lead, n_q, d)


def flash_keys_loaded(n_q: int, n_k: int, block_m: int, block_n: int, causal: bool) -> list[int]:
    """``K_t``: the keys (and values) program ``t`` of one head loads, for each query block ``t``."""
    blocks = -(-n_q // block_m)
    if not causal:
        return [n_k] * blocks
    loaded = []
    for t in range(blocks):
        hi = min((t + 1) * block_m, n_k)
        loaded.append(min(-(-hi // block_n) * block_n, n_k))
    return loaded


def flash_bytes(heads: int, n_q: int, n_k: int, d: int, itemsize: int, block_m: int, block_n: int,
                causal: bool = False) -> dict[str, int]:
    """The closed form of :func:`flash_attention`'s traffic: ``{"load": ..., "store": ...}`` in bytes."""
    keys = sum(flash_keys_loaded(n_q, n_k, block_m, block_n, causal))
    return {"load": heads * itemsize * d * (n_q + 2 * keys), "store": heads * n_q * (itemsize * d + 4)}


def standard_bytes(heads: int, n_q: int, n_k: int, d: int, itemsize: int) -> int:
    """The closed form of :func:`standard_attention`'s traffic without a mask (read plus written), in bytes."""
    return heads * itemsize * (4 * n_q * d + 2 * n_k * d + 4 * n_q * n_k)
