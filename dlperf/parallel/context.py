"""Context parallelism by hand: ring attention over the ranks of a group, forward and backward.

The sequence of ``n`` tokens is split over ``R`` ranks.  Each rank keeps the queries of its own
tokens and, at first, the keys and values of the same tokens.  Attention needs every query to meet
every key (every earlier key, with a causal mask), so the key/value blocks travel around a ring:
at step ``s`` rank ``r`` holds the block of rank ``r - s`` (mod ``R``), computes the partial
attention of its queries over it, merges it into its running result with the log-sum-exp rule of
:func:`dlperf.attention.merge`, and passes the block on to rank ``r + 1`` while receiving the next
one from rank ``r - 1``.  After ``R`` steps every query has seen every key, and no rank ever held
more than two other key/value blocks or an ``n/R x n/R`` tile of scores (Liu, Zaharia & Abbeel, "Ring
Attention with Blockwise Transformers for Near-Infinite Context", 2023).  The transfer of the next
block is posted before the computation on the current one (``dist.batch_isend_irecv``), so that the
two can overlap.

**Traffic.**  Each rank sends its K/V block ``R - 1`` times (the last step needs no transfer):
``(R - 1) * 2 * heads * (n / R) * d * element_size`` bytes per rank, whatever the layout.  The
backward pass (:func:`ring_attention_backward`) sends the K/V blocks around again and each
block's dK/dV accumulator with them: ``2R - 1`` blocks of that size.

**Causal load balance.**  With a causal mask, query ``i`` only needs keys ``0..i``.  Cut the
sequence into ``R`` contiguous chunks and rank ``r`` needs ``r + 1`` of the ``R`` key blocks: the
last rank does ``R`` times the work of the first, and every step of the ring waits for the slowest
rank.  The *zig-zag* layout cuts the sequence into ``2R`` chunks and gives rank ``r`` chunks ``r``
and ``2R - 1 - r`` (an early and a late one): every rank then computes ``2R + 1`` of the
``(n / 2R)^2`` tiles of scores, the same on every rank (Llama 3 trains with this layout; Dubey et
al., "The Llama 3 Herd of Models", 2024, §3.3.2).  The work counted here is the number of
query-key score entries a rank computes (a tile entirely above the diagonal is skipped).

Positions are global: a tile of query chunk ``a`` and key chunk ``b`` (chunks of ``c`` tokens) is
skipped when ``b > a``, masked with :func:`dlperf.attention.causal_mask` at offsets ``a c`` and
``b c`` when ``b = a``, and computed whole when ``b < a``.  Two wrong variants exist for the
tests and the chapter to catch: ``variant="local_offsets"`` masks every block as if it started at
position 0 (a classic bug), ``variant="no_rescale"`` adds each block's ``exp(s - m_block)`` sums
without rescaling them to a common maximum (the bug the log-sum-exp merge exists to avoid).
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from ..attention import Partial, attention, causal_mask, merge, partial
from .tensor import Traffic

__all__ = [
    "LAYOUTS",
    "chapter_worker",
    "chunk_size",
    "critical_path",
    "layout",
    "positions",
    "reference",
    "reference_grads",
    "ring_attention",
    "ring_attention_backward",
    "ring_backward_bytes",
    "ring_bytes",
    "ring_inputs",
    "shard",
    "tile",
    "tile_work",
    "torch_context_parallel",
    "unshard",
]

LAYOUTS = ("contiguous", "zigzag")


def layout(world: int, scheme: str) -> list[list[int]]:
    """The chunks each rank holds: ``contiguous`` ``R`` chunks, rank ``r`` chunk ``r``; ``zigzag``
    ``2R`` chunks, rank ``r`` chunks ``r`` and ``2R - 1 - r``."""
    if scheme == "contiguous":
        return [[r] for r in range(world)]
    if scheme == "zigzag":
        return [[r, 2 * world - 1 - r] for r in range(world)]
    raise ValueError(f"scheme is one of {LAYOUTS}, got {scheme!r}")


def chunk_size(seq_len: int, world: int, scheme: str) -> int:
    chunks = world * len(layout(world, scheme)[0])
    if seq_len % chunks:
        raise ValueError(f"{seq_len} tokens do not split into {chunks} chunks ({scheme}, {world} ranks)")
    return seq_len // chunks


def positions(seq_len: int, world: int, rank: int, scheme: str) -> torch.Tensor:
    """The global positions of rank ``rank``'s tokens, in the order the rank holds them."""
    c = chunk_size(seq_len, world, scheme)
    return torch.cat([torch.arange(i * c, (i + 1) * c) for i in layout(world, scheme)[rank]])


def shard(x: torch.Tensor, world: int, rank: int, scheme: str) -> torch.Tensor:
    """Rank ``rank``'s tokens of ``x`` (``... x n x d``, tokens on dimension -2)."""
    return x[..., positions(x.shape[-2], world, rank, scheme), :].contiguous()


def unshard(pieces: list[torch.Tensor], scheme: str) -> torch.Tensor:
    """The whole sequence from every rank's piece (the inverse of :func:`shard`)."""
    world = len(pieces)
    n = sum(p.shape[-2] for p in pieces)
    out = pieces[0].new_empty((*pieces[0].shape[:-2], n, pieces[0].shape[-1]))
    for rank, piece in enumerate(pieces):
        out[..., positions(n, world, rank, scheme), :] = piece
    return out


def tile_work(seq_len: int, world: int, scheme: str, causal: bool = True) -> list[list[int]]:
    """Score entries (per head) rank ``r`` computes at step ``s`` of the ring, ``[r][s]``, from the
    layout alone: the formula the ranks' counts are checked against.  A tile on the diagonal
    counts whole (its masked half is computed, then masked)."""
    c = chunk_size(seq_len, world, scheme)
    chunks = layout(world, scheme)
    return [[c * c * sum(1 for a in chunks[r] for b in chunks[(r - s) % world] if not causal or b <= a)
             for s in range(world)] for r in range(world)]


def critical_path(work: list[list[int]]) -> int:
    """Score entries on the ring's critical path: every step waits for its busiest rank."""
    return sum(max(rank[s] for rank in work) for s in range(len(work[0])))


def ring_bytes(seq_len: int, world: int, heads: int, head_dim: int, element_size: int = 4) -> int:
    """Bytes one rank sends in a ring pass: ``R - 1`` transfers of its K and V blocks."""
    return (world - 1) * 2 * heads * (seq_len // world) * head_dim * element_size


def ring_inputs(seq_len: int, heads: int, head_dim: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Queries, keys and values ``heads x seq_len x head_dim``, the same on every rank."""
    g = torch.Generator().manual_seed(20_011 + seed)
    return tuple(torch.randn(heads, seq_len, head_dim, generator=g) for _ in range(3))


# --------------------------------------------------------------------------------------------
# The ring
# --------------------------------------------------------------------------------------------


def tile(acc: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, a: int, b: int, c: int,
         causal: bool = True, variant: str = "correct") -> tuple[Any, int]:
    """Merge query chunk ``a``'s attention over key chunk ``b`` (chunks of ``c`` tokens) into
    ``acc``; returns the new accumulator and the score entries computed (per head).

    ``acc`` is a :class:`~dlperf.attention.Partial`, or for ``variant="no_rescale"`` a pair
    (numerator, denominator)."""
    if causal and variant == "local_offsets":
        mask = causal_mask(c, c)                   # WRONG: every block as if it started at 0
    elif causal and b > a:
        return acc, 0                              # entirely in the future: skipped
    else:
        mask = causal_mask(c, c, a * c, b * c) if causal and b == a else None
    if variant != "no_rescale":
        return merge(acc, partial(q, k, v, mask)), c * c
    s = (q.float() @ k.float().transpose(-1, -2)) / q.shape[-1] ** 0.5
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    p = torch.exp(s - s.amax(dim=-1, keepdim=True).clamp_min(-1e30))  # WRONG: this block's max
    return (acc[0] + p @ v.float(), acc[1] + p.sum(dim=-1, keepdim=True)), c * c


def _global(group: Any, rank: int) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def _pass_on(tensor: torch.Tensor, into: torch.Tensor, nxt: int, prv: int, group: Any) -> list[Any]:
    """Send ``tensor`` to the next rank, receive ``into`` from the previous one: the requests."""
    return dist.batch_isend_irecv([dist.P2POp(dist.isend, tensor, nxt, group),
                                   dist.P2POp(dist.irecv, into, prv, group)])


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq_len: int, *,
                   scheme: str = "zigzag", causal: bool = True, variant: str = "correct",
                   traffic: Traffic | None = None, group: Any = None) -> dict[str, Any]:
    """This rank's attention output for its queries ``q`` (its tokens, in :func:`positions` order).

    ``q``, ``k``, ``v``: ``heads x n/R x d``, this rank's shard.  Returns ``{"out", "lse", "work",
    "compute_s", "wait_s"}``: the output shard (float32) and its log-sum-exp, and at each step of
    the ring the score entries computed per head, the CPU seconds spent computing (this thread's
    CPU time: with more ranks than cores, wall-clock time would include the time the operating
    system gave the core to another rank), and the (wall-clock) seconds spent waiting for the next
    block (its transfer, or a slower neighbour).
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    chunks, c = layout(world, scheme), chunk_size(seq_len, world, scheme)
    q_chunks = q.split(c, dim=-2)
    if variant == "no_rescale":
        acc = [(torch.zeros(*qc.shape[:-1], v.shape[-1]), torch.zeros(*qc.shape[:-1], 1)) for qc in q_chunks]
    else:
        acc = [Partial.empty(qc, v.shape[-1]) for qc in q_chunks]
    kv = torch.stack([k, v]).contiguous()          # one message per step: K and V together
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    work, compute_s, wait_s = [], [], []
    for step in range(world):
        pending = []
        if step < world - 1:                # post the next block's transfer first ...
            incoming = torch.empty_like(kv)
            pending = _pass_on(kv, incoming, nxt, prv, group)
            if traffic is not None:
                traffic.add("send", "forward", kv)
        start, done = time.thread_time(), 0  # ... then compute on the block held now
        source = (rank - step) % world
        k_chunks, v_chunks = kv[0].split(c, dim=-2), kv[1].split(c, dim=-2)
        for i, a in enumerate(chunks[rank]):
            for kc, vc, b in zip(k_chunks, v_chunks, chunks[source]):
                acc[i], n = tile(acc[i], q_chunks[i], kc, vc, a, b, c, causal, variant)
                done += n
        work.append(done)
        compute_s.append(time.thread_time() - start)
        waited = time.perf_counter()
        for req in pending:
            req.wait()
        wait_s.append(time.perf_counter() - waited)
        if pending:
            kv = incoming
    times = {"work": work, "compute_s": compute_s, "wait_s": wait_s}
    if variant == "no_rescale":
        return {"out": torch.cat([n / d.clamp_min(1e-30) for n, d in acc], -2), **times}
    return {"out": torch.cat([p.out for p in acc], dim=-2), "lse": torch.cat([p.lse for p in acc], dim=-1),
            **times}


def ring_attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                            lse: torch.Tensor, dout: torch.Tensor, seq_len: int, *,
                            scheme: str = "zigzag", causal: bool = True,
                            traffic: Traffic | None = None, group: Any = None) -> dict[str, torch.Tensor]:
    """The gradients ``dq``, ``dk``, ``dv`` of this rank's shard, from the forward pass's ``out``
    and ``lse`` and the output's gradient ``dout`` (all this rank's tokens).

    FlashAttention's backward, one key/value block at a time (Dao 2023, Algorithm 2): with
    ``P = exp(S - lse)`` recomputed from the saved log-sum-exp and ``D = rowsum(dO * O)``,
    ``dV += P^T dO``, ``dS = P * (dO V^T - D)``, ``dQ += dS K / sqrt(d)``, ``dK += dS^T Q / sqrt(d)``.
    The key/value blocks go around the ring as in the forward pass, and each block's ``dK, dV``
    accumulator travels with it, one step behind: after ``R`` exchanges it is back on the block's
    own rank, complete.  Traffic per rank: ``R - 1`` K/V blocks and ``R`` dK/dV blocks.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    chunks, c = layout(world, scheme), chunk_size(seq_len, world, scheme)
    scale = 1.0 / q.shape[-1] ** 0.5
    q, out, dout = q.float(), out.float(), dout.float()
    rowsum = (dout * out).sum(dim=-1)                       # D, per query
    dq = torch.zeros_like(q)
    kv = torch.stack([k, v]).float().contiguous()
    dkv = torch.zeros_like(kv)                              # the accumulator of the block held
    nxt, prv = _global(group, (rank + 1) % world), _global(group, (rank - 1) % world)
    for step in range(world):
        pending = []
        if step < world - 1:                       # the next K/V block, while computing
            incoming = torch.empty_like(kv)
            pending = _pass_on(kv, incoming, nxt, prv, group)
            if traffic is not None:
                traffic.add("send", "backward", kv)
        source = (rank - step) % world
        for i, a in enumerate(chunks[rank]):
            rows = slice(i * c, (i + 1) * c)
            for j, b in enumerate(chunks[source]):
                if causal and b > a:
                    continue
                cols = slice(j * c, (j + 1) * c)
                kj, vj = kv[0][..., cols, :], kv[1][..., cols, :]
                s = (q[..., rows, :] @ kj.transpose(-1, -2)) * scale
                if causal and b == a:
                    s = s.masked_fill(~causal_mask(c, c, a * c, b * c), float("-inf"))
                p = torch.exp(s - lse[..., rows, None])
                dkv[1][..., cols, :] += p.transpose(-1, -2) @ dout[..., rows, :]
                dp = dout[..., rows, :] @ vj.transpose(-1, -2)
                ds = p * (dp - rowsum[..., rows, None])
                dq[..., rows, :] += (ds @ kj) * scale
                dkv[0][..., cols, :] += (ds.transpose(-1, -2) @ q[..., rows, :]) * scale
        for req in pending:
            req.wait()
        arrived = torch.empty_like(dkv)            # the accumulator follows its block
        for req in _pass_on(dkv, arrived, nxt, prv, group):
            req.wait()
        if traffic is not None:
            traffic.add("send", "backward", dkv)
        dkv = arrived
        if pending:
            kv = incoming
    return {"dq": dq, "dk": dkv[0], "dv": dkv[1]}


def ring_backward_bytes(seq_len: int, world: int, heads: int, head_dim: int, element_size: int = 4) -> int:
    """Bytes one rank sends in the backward ring: ``R - 1`` K/V blocks and ``R`` dK/dV blocks."""
    return (2 * world - 1) * 2 * heads * (seq_len // world) * head_dim * element_size


# --------------------------------------------------------------------------------------------
# Worker (run inside a process group: dlperf.launch.launch("dlperf.parallel.context:...", R))
# --------------------------------------------------------------------------------------------


def torch_context_parallel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> dict[str, Any]:
    """PyTorch's own context parallelism on the same inputs (whole on every rank): causal
    ``scaled_dot_product_attention`` under ``torch.distributed.tensor.experimental.context_parallel``.

    Returns ``{"out": the whole output}`` or, where this PyTorch cannot run it on this device,
    ``{"error": "<exception type>: <its message>"}``."""
    import torch.nn.functional as F
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.experimental import context_parallel
    from torch.distributed.tensor.experimental._attention import context_parallel_unshard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    bufs = [t[None].clone() for t in (q, k, v)]          # batch x heads x n x d, sharded in place
    try:
        with context_parallel(mesh, buffers=bufs, buffer_seq_dims=[2, 2, 2]):
            out = F.scaled_dot_product_attention(*bufs, is_causal=True)
        (out,) = context_parallel_unshard(mesh, [out], [2])
        return {"out": out[0].detach().clone()}
    except Exception as exc:  # noqa: BLE001 - the chapter reports what this version says
        return {"error": f"{type(exc).__name__}: {exc}".splitlines()[0]}


def chapter_worker(seq_len: int, heads: int, head_dim: int, torch_api: bool = False, seed: int = 0,
                   repeat: int = 3, variants: tuple[str, ...] = ("local_offsets", "no_rescale")
                   ) -> dict[str, Any]:
    """Everything the chapter and the tests run on the ranks, in one process group.

    For each layout, causal ring attention ``repeat`` times (output, work, traffic, and the
    fastest pass's compute time per step and wall time), the non-causal ring once, each wrong
    ``variant`` once on the zig-zag layout, and with ``torch_api`` PyTorch's own
    :func:`torch_context_parallel`.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    q, k, v = ring_inputs(seq_len, heads, head_dim, seed)
    res: dict[str, Any] = {"rank": rank, "world": world}
    for scheme in LAYOUTS:
        mine = [shard(t, world, rank, scheme) for t in (q, k, v)]
        runs = []
        for _ in range(repeat):
            traffic = Traffic()
            dist.barrier()
            start = time.perf_counter()
            run = ring_attention(*mine, seq_len, scheme=scheme, traffic=traffic)
            run["wall_s"] = time.perf_counter() - start
            run["traffic"] = list(traffic.calls)
            runs.append(run)
        best = min(runs, key=lambda r: sum(r["compute_s"]))
        res[scheme] = {"out": best["out"], "work": best["work"], "traffic": best["traffic"],
                       "compute_s": best["compute_s"], "wait_s": best["wait_s"],
                       "wall_s": min(r["wall_s"] for r in runs),
                       "positions": positions(seq_len, world, rank, scheme)}
    dout = ring_inputs(seq_len, heads, head_dim, seed + 1)[0]     # the gradient arriving at the output
    for scheme in LAYOUTS:
        mine = [shard(t, world, rank, scheme) for t in (q, k, v)]
        fwd = ring_attention(*mine, seq_len, scheme=scheme)
        traffic = Traffic()
        grads = ring_attention_backward(*mine, fwd["out"], fwd["lse"], shard(dout, world, rank, scheme),
                                        seq_len, scheme=scheme, traffic=traffic)
        res[scheme]["grads"] = grads
        res[scheme]["backward_traffic"] = list(traffic.calls)
    mine = [shard(t, world, rank, "contiguous") for t in (q, k, v)]
    res["full"] = ring_attention(*mine, seq_len, scheme="contiguous", causal=False)["out"]
    mine = [shard(t, world, rank, "zigzag") for t in (q, k, v)]
    for variant in variants:
        res[variant] = ring_attention(*mine, seq_len, scheme="zigzag", variant=variant)["out"]
    if torch_api:
        res["torch"] = torch_context_parallel(q, k, v)
    return res


def reference(seq_len: int, heads: int, head_dim: int, seed: int = 0, causal: bool = True) -> torch.Tensor:
    """Full attention in one process on the same inputs (:func:`dlperf.attention.attention`)."""
    q, k, v = ring_inputs(seq_len, heads, head_dim, seed)
    return attention(q, k, v, causal=causal)


def reference_grads(seq_len: int, heads: int, head_dim: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """``dq``, ``dk``, ``dv`` of causal full attention by autograd, for the workers' output gradient."""
    q, k, v = (t.requires_grad_(True) for t in ring_inputs(seq_len, heads, head_dim, seed))
    dout = ring_inputs(seq_len, heads, head_dim, seed + 1)[0]
    attention(q, k, v, causal=True).backward(dout)
    return {"dq": q.grad, "dk": k.grad, "dv": v.grad}
