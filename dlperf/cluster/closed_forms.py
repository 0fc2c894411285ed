"""Closed forms of the collectives' times in the alpha-beta model, bus bandwidth, and ZeRO placement."""

from __future__ import annotations


import torch

from .machine import Cluster


# --------------------------------------------------------------------------------------------
# Closed forms
# --------------------------------------------------------------------------------------------


def transfer_time(nbytes: float, alpha: float, beta: float) -> float:
    """The alpha-beta model of one message: ``alpha + nbytes / beta`` seconds."""
    return alpha + nbytes / beta


def ring_reduce_scatter_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring reduce-scatter of ``nbytes`` per rank: ``(n-1) alpha + (n-1)/n * S / beta``."""
    return (n - 1) * alpha + (n - 1) / n * nbytes / beta


def ring_all_gather_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring all-gather to ``nbytes`` per rank (the gathered size): ``(n-1) alpha + (n-1)/n * S / beta``."""
    return (n - 1) * alpha + (n - 1) / n * nbytes / beta


def ring_allreduce_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring allreduce of ``nbytes`` per rank: ``2(n-1) alpha + 2(n-1)/n * S / beta``.

    The bandwidth term barely grows with ``n`` (it tends to ``2 S / beta``);
    the latency term grows linearly.
    """
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / beta


def naive_allreduce_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Reduce-to-root + broadcast behind a switch (:func:`pcie_switch`): ``2 alpha + 2(n-1) S / beta``.

    The root's port carries ``(n-1) S`` in, then ``(n-1) S`` out.  (On
    :func:`fully_connected` links the root has ``n-1`` links and the time is
    ``2 (alpha + S / beta)`` instead.)  0 for ``n = 1``.
    """
    if n == 1:
        return 0.0
    return 2 * alpha + 2 * (n - 1) * nbytes / beta


def tree_allreduce_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Binary-tree reduce + broadcast on :func:`fully_connected` links: ``2 floor(log2 n) (alpha + S / beta)``."""
    depth = n.bit_length() - 1
    return 2 * depth * (alpha + nbytes / beta)


def parameter_server_time(
    workers: int,
    servers: int,
    nbytes: float,
    alpha: float,
    beta: float,
    *,
    server_beta: float | None = None,
    colocated: bool = False,
) -> float:
    """Sharded parameter server (push + pull), every rank on its own switch port.

    Separate servers (:func:`parameter_server`): a worker's port carries ``S``
    each way, a server's port ``workers * S / k``::

        T = 2 (alpha + max(S / beta, workers * S / (k * server_beta)))

    ``colocated=True`` (servers are ``k`` of the workers, as in
    :func:`pcie_switch`): a server keeps its own shard, so its port carries
    ``(workers - 1) S / k`` in and a worker's ``S`` out (``S - S/k`` if it is a
    server too).  With ``k = workers = n``: ``2 (alpha + (n-1)/n * S / beta)``.
    Exact when ``k`` divides the size.
    """
    k = servers
    if colocated:
        if k > workers:
            raise ValueError("colocated servers are workers: servers <= workers")
        if workers == 1:
            return 0.0
        out_port = nbytes if k < workers else nbytes * (k - 1) / k
        in_port = (workers - 1) * nbytes / k
        return 2 * (alpha + max(out_port, in_port) / beta)
    sbeta = beta if server_beta is None else server_beta
    return 2 * (alpha + max(nbytes / beta, workers * nbytes / (k * sbeta)))


def pipelined_broadcast_time(n: int, nbytes: float, alpha: float, beta: float, chunks: int) -> float:
    """Chain broadcast (or reduce) in ``m = chunks`` pieces: ``(n - 2 + m)(alpha + S / (m beta))``; 0 for ``n = 1``."""
    if n == 1:
        return 0.0
    return (n - 2 + chunks) * (alpha + nbytes / (chunks * beta))


def ring_allreduce_bytes_sent(n: int, numel: int, element_size: int) -> list[int]:
    """Exact bytes each ring position sends in :func:`ring_allreduce` with uneven chunks.

    Position ``p`` sends every chunk but ``p`` in the reduce-scatter and every
    chunk but ``p + 1`` in the all-gather: ``2S - c_p - c_{p+1}`` (``c`` from
    ``tensor_split``), summing to ``2(n-1) S`` over all ranks.
    """
    if n == 1:
        return [0]
    sizes = [len(c) * element_size for c in torch.empty(numel, device="meta").tensor_split(n)]
    total = numel * element_size
    return [2 * total - sizes[p] - sizes[(p + 1) % n] for p in range(n)]


_BUSBW = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "all_to_all": lambda n: (n - 1) / n,
}


def algorithm_bandwidth(nbytes: float, seconds: float) -> float:
    """``algbw = S / t`` with ``S`` the bytes per rank (for all-gather: the gathered size)."""
    return nbytes / seconds


def busbw_factor(n: int, collective: str) -> float:
    """``busbw / algbw`` (nccl-tests, doc/PERFORMANCE.md): allreduce ``2(n-1)/n``;
    reduce_scatter, all_gather, all_to_all ``(n-1)/n``; broadcast, reduce ``1``."""
    if collective not in _BUSBW:
        raise ValueError(f"unknown collective {collective!r}; one of {sorted(_BUSBW)}")
    return _BUSBW[collective](n)


def bus_bandwidth(algbw: float, n: int, collective: str = "allreduce") -> float:
    """Bus bandwidth: ``algbw * busbw_factor(n, collective)``.

    It is comparable with one link's hardware bandwidth whatever ``n`` is: a
    bandwidth-optimal ring allreduce on links of ``beta`` (no latency) has
    busbw exactly ``beta``.
    """
    return algbw * busbw_factor(n, collective)


def place_zero_states(cluster: Cluster, num_params: int, stage: int) -> None:
    """Put each rank's ZeRO-``stage`` model state in ``cluster.memory`` (meta tensors: sizes only).

    Names: ``params`` and ``grads`` (bf16), ``master``, ``exp_avg``,
    ``exp_avg_sq`` (fp32); a sharded state holds ``tensor_split(n)[rank]`` of the
    ``P`` values.  Then ``cluster.memory_bytes(r)`` equals
    :func:`dlperf.memory.zero_memory_bytes` when ``n`` divides ``P``.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage is 0, 1, 2 or 3, got {stage}")
    n = cluster.n
    shard = [len(c) for c in torch.empty(num_params, device="meta").tensor_split(n)]
    sharded = {"params": stage >= 3, "grads": stage >= 2, "master": stage >= 1, "exp_avg": stage >= 1,
               "exp_avg_sq": stage >= 1}
    dtypes = {"params": torch.bfloat16, "grads": torch.bfloat16, "master": torch.float32,
              "exp_avg": torch.float32, "exp_avg_sq": torch.float32}
    for r in range(n):
        for name, is_sharded in sharded.items():
            size = shard[r] if is_sharded else num_params
            cluster.memory[r][name] = torch.empty(size, dtype=dtypes[name], device="meta")
