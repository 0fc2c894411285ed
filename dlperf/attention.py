"""Attention's arithmetic in one place: the reference, the one-pass (online) softmax, and merging partial results.

Three constructions of the course compute softmax attention without ever holding a whole row of scores:
FlashAttention's kernel (one program walks the key blocks of a query block), ring attention (each rank holds
one block of keys and values and receives the others around the ring) and split-K decoding.  All three rest on
the same identity, stated here once and used by the kernels' checks, the ring's ranks and the chapters:

For scores ``s_1 .. s_n`` of one query, values ``v_j``, ``m = max_j s_j`` and ``l = sum_j exp(s_j - m)``,

    out = sum_j exp(s_j - m) v_j / l,      lse = m + log l.

A block of keys gives a *partial* ``(out_b, lse_b)`` computed on its keys alone; two partials merge exactly:

    lse = log(exp(lse_a) + exp(lse_b)) = max + log(exp(lse_a - max) + exp(lse_b - max)),
    out = exp(lse_a - lse) out_a + exp(lse_b - lse) out_b,

in any order and any grouping (the merge is associative and commutative), which is what lets a kernel
or a ring visit the key blocks one at a time.  Milakov & Gimelshein, "Online normalizer calculation for
softmax" (2018); Dao et al., "FlashAttention" (2022), section 3.1; Liu et al., "Ring Attention" (2023).

Every function works on ``... x n x d`` tensors (any leading batch and head dimensions) and computes in
float32 whatever the input's dtype (the accumulation the kernels use), returning float32.
"""

from __future__ import annotations

import math

import torch

__all__ = ["Partial", "attention", "block_partial", "causal_mask", "flash_forward", "merge", "online_softmax",
           "partial"]


def causal_mask(n_q: int, n_k: int, q_offset: int = 0, k_offset: int = 0,
                device: torch.device | str | None = None) -> torch.Tensor:
    """``True`` where query ``q_offset + i`` may see key ``k_offset + j`` (``j <= i`` in global positions)."""
    i = torch.arange(n_q, device=device)[:, None] + q_offset
    j = torch.arange(n_k, device=device)[None, :] + k_offset
    return j <= i


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
              scale: float | None = None) -> torch.Tensor:
    """Standard attention, ``softmax(q k^T * scale) v``, materialising the ``n_q x n_k`` scores (the reference).

    ``causal``: query ``i`` sees keys ``0..i`` (queries and keys aligned at position 0)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], device=q.device), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.float()


class Partial:
    """Attention of some queries over a subset of the keys: the normalised output and its log-sum-exp.

    ``out``: ``... x n_q x d`` (float32); ``lse``: ``... x n_q`` (``-inf`` where a query saw no key, and
    then ``out`` is 0 there).  An empty partial (:meth:`empty`) is the merge's identity."""

    __slots__ = ("lse", "out")

    def __init__(self, out: torch.Tensor, lse: torch.Tensor) -> None:
        self.out, self.lse = out, lse

    @classmethod
    def empty(cls, like_q: torch.Tensor, d_v: int | None = None) -> Partial:
        shape = like_q.shape[:-1]
        d_v = like_q.shape[-1] if d_v is None else d_v
        return cls(torch.zeros(*shape, d_v, device=like_q.device),
                   torch.full(shape, float("-inf"), device=like_q.device))

    def __iter__(self):
        yield self.out
        yield self.lse


def partial(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
            scale: float | None = None) -> Partial:
    """The partial result of ``q`` over the keys ``k`` (and values ``v``) alone; ``mask``: which pairs count."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = (q.float() @ k.float().transpose(-1, -2)) * scale
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    seen = torch.isfinite(lse)
    p = torch.exp(s - torch.where(seen, lse, torch.zeros_like(lse))[..., None])
    out = torch.where(seen[..., None], p @ v.float(), torch.zeros(()))
    return Partial(out, lse)


def merge(a: Partial, b: Partial) -> Partial:
    """Two partials over disjoint key sets merged into the partial over their union (exact, associative)."""
    top = torch.maximum(a.lse, b.lse)
    safe = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    wa, wb = torch.exp(a.lse - safe), torch.exp(b.lse - safe)      # exp(-inf) = 0: a side that saw nothing
    total = wa + wb
    lse = torch.where(total > 0, safe + torch.log(total), torch.full_like(total, float("-inf")))
    denom = torch.where(total > 0, total, torch.ones_like(total))[..., None]
    return Partial((wa[..., None] * a.out + wb[..., None] * b.out) / denom, lse)


def block_partial(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, causal: bool = False,
                  scale: float | None = None) -> Partial:
    """Attention computed one key block of ``block`` keys at a time, merged: FlashAttention's loop in PyTorch.

    Equal to :func:`attention` (to rounding) for any block size; no ``n_q x n_k`` tensor is ever formed
    (at most ``n_q x block`` scores at once)."""
    acc = Partial.empty(q, v.shape[-1])
    for start in range(0, k.shape[-2], block):
        kb, vb = k[..., start:start + block, :], v[..., start:start + block, :]
        mask = causal_mask(q.shape[-2], kb.shape[-2], 0, start, device=q.device) if causal else None
        acc = merge(acc, partial(q, kb, vb, mask, scale))
    return acc


def online_softmax(x: torch.Tensor, block: int) -> torch.Tensor:
    """Softmax along the last dimension in one pass over blocks: a running maximum ``m`` and a running sum
    ``l`` rescaled by ``exp(m_old - m_new)`` whenever the maximum grows (Milakov & Gimelshein 2018), then one
    normalisation.  A second pass writes the output; the statistics need only one read of ``x``."""
    x = x.float()
    m = torch.full(x.shape[:-1], float("-inf"))
    l = torch.zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block):
        xb = x[..., start:start + block]
        m_new = torch.maximum(m, xb.amax(dim=-1))
        l = l * torch.exp(m - m_new) + torch.exp(xb - m_new[..., None]).sum(dim=-1)
        m = m_new
    return torch.exp(x - m[..., None]) / l[..., None]


def flash_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                  block_m: int = 64, block_n: int = 64,
                  scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """FlashAttention-2's forward loop in PyTorch, written to be read: ``(out, lse)``, both float32.

    The outer loop is over blocks of ``block_m`` queries (on a GPU, one program each, independent); each
    keeps a running maximum ``m``, a running sum ``l`` and an *unnormalised* accumulator ``acc`` (``sum_j
    exp(s_j - m) v_j``) and walks the keys in blocks of ``block_n``: scores, new maximum, ``l`` and ``acc``
    rescaled by ``exp(m_old - m_new)``, the block's exponentials and their product with the values added.
    One division at the end; ``lse = m + log l`` is what the backward pass keeps.  Causal (query ``i`` sees
    keys ``0..i``): a query block's loop stops after its last query, so key blocks wholly above the diagonal
    are never read, and only the blocks that cross the diagonal are masked.  Ragged ends are slices here;
    a kernel, whose blocks have a fixed size, masks them instead (:mod:`dlperf.kernels.flash`).  At most
    ``block_m x block_n`` scores exist at once.  Equal to :func:`attention` to rounding.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = torch.empty(*q.shape[:-1], v.shape[-1], device=q.device)
    lse = torch.empty(q.shape[:-1], device=q.device)
    for i in range(0, n_q, block_m):                     # one program per query block
        qi = q[..., i:i + block_m, :].float() * scale
        m = torch.full(qi.shape[:-1], -math.inf, device=q.device)     # running maximum
        l = torch.zeros(qi.shape[:-1], device=q.device)               # running sum
        acc = torch.zeros(*qi.shape[:-1], v.shape[-1], device=q.device)
        stop = min(i + block_m, n_k) if causal else n_k  # causal: no key after the last query
        for j in range(0, stop, block_n):
            kj, vj = k[..., j:j + block_n, :].float(), v[..., j:j + block_n, :].float()
            s = qi @ kj.transpose(-1, -2)                # block_m x block_n scores
            if causal and j + block_n > i + 1:           # a block that crosses the diagonal
                s = s.masked_fill(~causal_mask(s.shape[-2], s.shape[-1], i, j, q.device),
                                  -math.inf)
            m_next = torch.maximum(m, s.amax(dim=-1))
            rescale = torch.exp(m - m_next)              # < 1 where the maximum grew
            e = torch.exp(s - m_next[..., None])
            l = l * rescale + e.sum(dim=-1)
            acc = acc * rescale[..., None] + e @ vj
            m = m_next
        out[..., i:i + block_m, :] = acc / l[..., None]  # one normalisation, at the end
        lse[..., i:i + block_m] = m + torch.log(l)
    return out, lse
