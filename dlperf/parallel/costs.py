"""What each kind of communication of a parallel layout sends and how long it adds to a step.

The formulas :mod:`dlperf.parallel.planner` uses per rank: data parallelism's bytes
(:func:`data_parallel_bytes`, HSDP included), ring attention's (:func:`context_parallel_bytes`) and
expert parallelism's all-to-alls (:func:`expert_parallel_bytes`), and the seconds the last two add to
a step under the alpha-beta model (:func:`context_parallel_exposed_s`,
:func:`expert_parallel_exposed_s`).  Each is checked against bytes counted on real ranks in
``tests/test_planner.py`` and ``tests/test_mesh.py``, and against hand computations.
"""

from __future__ import annotations

__all__ = ["REDUCE_BYTES", "context_parallel_bytes", "context_parallel_exposed_s", "data_parallel_bytes",
           "expert_parallel_bytes", "expert_parallel_exposed_s"]

REDUCE_BYTES = {"fp32": 4, "bf16": 2}


def context_parallel_bytes(seq_len: int, cp: int, kv_hidden: int, micro_batch: int = 1, *,
                           element_size: int = 2, recompute: str = "selective") -> dict[str, float]:
    """Bytes one rank sends per layer and micro-batch for ring attention over ``cp`` ranks.

    A rank holds ``s / c`` tokens; its K and V blocks are ``2 (s/c) b h_kv`` elements (``h_kv``:
    the key/value width, ``h a_kv / a``, on this tensor-parallel rank).  Forward: the blocks go
    ``c - 1`` steps around the ring.  Backward: ``c - 1`` again, and the dK/dV accumulators travel
    with them, ``c`` steps, home at the end: ``2c - 1`` blocks.  Full recomputation runs the forward
    ring once more.  Nothing travels when ``c = 1``.
    """
    block = 2.0 * seq_len / cp * micro_batch * kv_hidden * element_size
    forward = (cp - 1) * block * (2 if recompute == "full" else 1)
    return {"forward": forward, "backward": (2 * cp - 1) * block if cp > 1 else 0.0}


def expert_parallel_bytes(tokens: float, hidden: int, top_k: int, ep: int, *, element_size: int = 2,
                          recompute: str = "selective") -> dict[str, float]:
    """Bytes one rank sends per MoE layer and micro-batch for its ``tokens`` tokens over ``ep`` ranks.

    Each token's vector goes to its ``k`` experts (dispatch) and their outputs come back (combine):
    with even routing and nothing dropped, ``(e - 1)/e`` of the ``k T`` vectors of ``h`` elements
    leave the rank each time.  Backward: the two all-to-alls in reverse, the same bytes; full
    recomputation dispatches and combines again.  Uneven routing moves more to some ranks.
    """
    one = top_k * tokens * hidden * element_size * (ep - 1) / ep
    return {"dispatch": one, "combine": one, "backward": 2 * one,
            "recompute": 2 * one if recompute == "full" else 0.0}


def context_parallel_exposed_s(seq_len: int, cp: int, kv_hidden: float, hidden: float, micro_batch: int = 1,
                               *, tp: int = 1, bandwidth: float, latency: float, flop_rate: float,
                               recompute: str = "selective") -> dict[str, float]:
    """Seconds per layer and micro-batch that ring attention's messages add to a step, causal attention in the
    zig-zag layout: what the attention work of the same ring step does not hide.

    A K/V block is ``B`` bytes (:func:`context_parallel_bytes`), a message takes ``alpha + B / beta``
    (``latency``, ``bandwidth``).  Forward, a rank computes ``c`` ring steps and receives a block during
    ``c - 1`` of them; each step's work is half of a ``(s/c) x (s/c)`` tile (causal; zig-zag gives every step
    the same half): ``w_f = 2 (s/c)^2 b h / t`` FLOPs at ``flop_rate``.  Exposed: ``(c-1) max(0, alpha + B/beta
    - w_f / rate)``.  Backward: ``c`` steps carrying ``2c - 1`` blocks in all (K/V and the dK/dV accumulators),
    each behind twice the forward work: ``c max(0, alpha + (2c-1)/c B/beta - 2 w_f / rate)``.  Full
    recomputation runs the forward ring again.  Attention's FLOPs are not in the planner's ``6P`` compute:
    they serve here only as the time that hides the ring.  Zero when ``c = 1``.
    """
    if cp == 1:
        return {"forward": 0.0, "backward": 0.0}
    block = context_parallel_bytes(seq_len, cp, kv_hidden, micro_batch)["forward"] / (cp - 1)
    work = 2.0 * (seq_len / cp) ** 2 * micro_batch * hidden / tp / flop_rate
    forward = (cp - 1) * max(0.0, latency + block / bandwidth - work)
    backward = cp * max(0.0, latency + (2 * cp - 1) / cp * block / bandwidth - 2 * work)
    return {"forward": forward * (2 if recompute == "full" else 1), "backward": backward}


def expert_parallel_exposed_s(tokens: float, hidden: int, top_k: int, ep: int, *, bandwidth: float,
                              latency: float, element_size: int = 2, recompute: str = "selective") -> float:
    """Seconds per MoE layer and micro-batch that expert parallelism's all-to-alls add to a step.

    Each all-to-all is the pairwise exchange of :func:`dlperf.collective_model.predict`,
    ``(e-1)(alpha + S / (e beta))`` for the ``S = k T h`` elements of a rank's assignments (even routing):
    dispatch and combine forward, both again backward, and forward again with full recomputation.  None
    is hidden: the experts wait for the dispatch and the next layer for the combine; hiding them needs
    another micro-batch's compute beside them (DeepSeek-V3's DualPipe), which the planner does not model.
    Zero when ``e = 1``.
    """
    from ..collective_model import predict

    if ep == 1:
        return 0.0
    one = predict("all_to_all", ep, top_k * tokens * hidden * element_size, latency, bandwidth)
    return (6 if recompute == "full" else 4) * one


def data_parallel_bytes(params: float, dp: int, zero: int, *, reduce_dtype: str = "fp32",
                        param_dtype: str = "bf16", shard: int = 0,
                        reshard_after_forward: bool = True) -> tuple[float, float]:
    """Bytes one rank sends per step for data parallelism, ``(gradients, parameters)``; rings.

    Gradients of ``r`` bytes (``reduce_dtype``): an all-reduce, ``2 (d-1)/d r P``, without ZeRO;
    a reduce-scatter, ``(d-1)/d r P``, with it.  Parameters of ``w`` bytes (``param_dtype``, 16-bit
    by default): none without ZeRO (every replica updates its own copy); an all-gather after the
    step, ``(d-1)/d w P``, with ZeRO-1/2; with ZeRO-3 one before the forward pass and, when they
    were freed after it (FSDP's ``reshard_after_forward``, true but for FSDP2's root module), one
    before the backward pass.  With ``reduce_dtype="bf16"`` the sum is
    :func:`dlperf.memory.zero_communication_bytes`.

    **HSDP** (``shard = s``, ``0 < s < d``): ZeRO works inside groups of ``s`` ranks (the
    reduce-scatter and the all-gathers over ``s``), and each rank's gradient shard, ``P / s``, is
    all-reduced across the ``R = d / s`` groups: ``2 (R-1)/R r P / s`` more.
    """
    if reduce_dtype not in REDUCE_BYTES or param_dtype not in REDUCE_BYTES:
        raise ValueError(f"reduce_dtype and param_dtype are in {sorted(REDUCE_BYTES)}, got "
                         f"{reduce_dtype!r}, {param_dtype!r}")
    group = shard or dp
    if dp % group or (shard and not zero):
        raise ValueError(f"HSDP needs ZeRO and groups that divide {dp} ranks, got shard={shard}, zero={zero}")
    share, r, w, P = (group - 1) / group, REDUCE_BYTES[reduce_dtype], REDUCE_BYTES[param_dtype], float(params)
    if zero == 0:
        return 2 * share * r * P, 0.0
    replicas = dp // group
    across = 2 * (replicas - 1) / replicas * r * P / group
    gathers = 2 if zero == 3 and reshard_after_forward else 1
    return share * r * P + across, gathers * share * w * P
