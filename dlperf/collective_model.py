"""The model of a collective's cost: nccl-tests' bandwidths and the alpha-beta fit of measured times.

:mod:`dlperf.collectives` measures; this module says what the measurements mean.

**Bandwidths** (nccl-tests, ``doc/PERFORMANCE.md`` and ``src/*.cu``):
``algbw = S / t`` and ``busbw = algbw * factor`` with, for ``n`` ranks,

=================  ==========  ============================================
operation          factor      ``S``, the size of the row
=================  ==========  ============================================
``all_reduce``     2(n-1)/n    the buffer of each rank (input = output)
``reduce_scatter`` (n-1)/n     the whole input of a rank, ``n * recvcount``
``all_gather``     (n-1)/n     the whole output of a rank, ``n * sendcount``
``broadcast``      1           the buffer
``all_to_all``     (n-1)/n     the whole send buffer, ``n`` times the block
                               that goes to each peer
=================  ==========  ============================================

``busbw`` is comparable with the bandwidth of one link whatever ``n`` is: an
algorithm that uses the links optimally reaches the link's bandwidth.  Sizes
of the last three are rounded down to a multiple of ``n`` elements (as
nccl-tests does); the row states the size that was used.

**The fit.**  In the alpha-beta model (:mod:`dlperf.cluster`) an operation
that takes ``k_alpha`` steps and moves ``k_beta * S`` bytes through each
rank's link costs ``t(S) = k_alpha alpha + k_beta S / beta``.  The ``k_beta``
are the busbw factors above (so the fitted ``beta`` is the bus bandwidth at
large sizes); ``k_alpha`` is the step count of the algorithm that reaches
them: a ring's ``2(n-1)`` for ``all_reduce``, ``n-1`` for ``reduce_scatter``
and ``all_gather``, ``n-1`` pairwise rounds for ``all_to_all``, and ``n-1``
hops of a pipelined chain for ``broadcast``.  :func:`fit_alpha_beta` fits
``alpha`` and ``beta`` by least squares of the *relative* error (weights
``1/t``, so small messages, where alpha shows, count as much as large ones),
keeping both non-negative; :meth:`Fit.compare` sets the fitted model's
prediction, computed with the simulator's closed forms
(:func:`dlperf.cluster.ring_allreduce_time` and its siblings), beside each
measurement.  ``beta`` means something only when the largest sizes take
clearly longer than the smallest (the bandwidth term shows); a sweep of tiny
messages determines ``alpha`` alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from . import cluster
from .bench import format_seconds

__all__ = ["OPS", "Fit", "algbw", "busbw", "busbw_factor", "cost_model", "fit_alpha_beta", "predict"]

OPS: tuple[str, ...] = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all")
_CLUSTER_NAME = {"all_reduce": "allreduce", "reduce_scatter": "reduce_scatter", "all_gather": "all_gather",
                 "broadcast": "broadcast", "all_to_all": "all_to_all"}


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; one of {', '.join(OPS)}")


def _check_ranks(n: int) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"the number of ranks must be a positive integer, not {n!r}")


# --------------------------------------------------------------------------- bandwidths


def busbw_factor(op: str, n: int) -> float:
    """``busbw / algbw`` for ``op`` on ``n`` ranks, nccl-tests' correction (see the module docstring)."""
    _check_op(op)
    _check_ranks(n)
    return cluster.busbw_factor(n, _CLUSTER_NAME[op])


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth ``S / t`` in bytes per second (``S`` as nccl-tests defines it for the op)."""
    if not nbytes >= 0:
        raise ValueError(f"a message size must be >= 0 bytes, not {nbytes!r}")
    if not seconds > 0 or math.isinf(seconds):
        raise ValueError(f"a time must be a positive, finite number of seconds, not {seconds!r}")
    return cluster.algorithm_bandwidth(nbytes, seconds)


def busbw(op: str, nbytes: float, seconds: float, n: int) -> float:
    """Bus bandwidth ``algbw * busbw_factor(op, n)`` in bytes per second."""
    return algbw(nbytes, seconds) * busbw_factor(op, n)


# --------------------------------------------------------------------------- the cost model


def cost_model(op: str, n: int) -> tuple[int, float]:
    """``(k_alpha, k_beta)`` of ``t(S) = k_alpha alpha + k_beta S / beta`` for ``op`` on ``n`` ranks.

    ``k_beta`` is the busbw factor; ``k_alpha`` the step count: ``2(n-1)``
    for a ring all-reduce, ``n-1`` for the other four (ring reduce-scatter and
    all-gather, pairwise all-to-all, a pipelined chain broadcast).
    """
    factor = busbw_factor(op, n)
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    return steps, factor


def predict(op: str, n: int, nbytes: float, alpha: float, beta: float) -> float:
    """The model's time for ``op`` of ``nbytes`` on ``n`` ranks, with the simulator's closed forms.

    ``all_reduce``, ``reduce_scatter`` and ``all_gather`` use
    :func:`dlperf.cluster.ring_allreduce_time`,
    :func:`~dlperf.cluster.ring_reduce_scatter_time` and
    :func:`~dlperf.cluster.ring_all_gather_time`; ``all_to_all`` (pairwise
    exchange) is ``(n-1)(alpha + S/(n beta))``; ``broadcast`` (pipelined chain,
    many chunks) ``(n-1) alpha + S / beta``.
    """
    _check_op(op)
    _check_ranks(n)
    if not alpha >= 0 or not beta > 0:
        raise ValueError(f"alpha must be >= 0 and beta > 0, not alpha={alpha!r}, beta={beta!r}")
    if op == "all_reduce":
        return cluster.ring_allreduce_time(n, nbytes, alpha, beta)
    if op == "reduce_scatter":
        return cluster.ring_reduce_scatter_time(n, nbytes, alpha, beta)
    if op == "all_gather":
        return cluster.ring_all_gather_time(n, nbytes, alpha, beta)
    if op == "all_to_all":
        return (n - 1) * (alpha + nbytes / (n * beta))
    return (n - 1) * alpha + (nbytes / beta if n > 1 else 0.0)


@dataclass(frozen=True)
class Fit:
    """``alpha`` (seconds per step) and ``beta`` (bytes per second) fitted to one operation's rows."""

    op: str
    ranks: int
    alpha: float
    beta: float
    sizes: tuple[float, ...]
    times: tuple[float, ...]

    def predict(self, nbytes: float) -> float:
        """The fitted model's time for ``nbytes`` (:func:`predict`)."""
        return predict(self.op, self.ranks, nbytes, self.alpha, self.beta)

    def compare(self) -> list[dict[str, float]]:
        """Per size: the measured time, the model's and ``measured / predicted``."""
        return [{"bytes": s, "measured_s": t, "predicted_s": self.predict(s), "ratio": t / self.predict(s)}
                for s, t in zip(self.sizes, self.times)]

    @property
    def worst_ratio(self) -> float:
        """The measured/predicted ratio furthest from 1 (in either direction)."""
        return max((c["ratio"] for c in self.compare()), key=lambda r: max(r, 1 / r))

    def __str__(self) -> str:
        return (f"{self.op} on {self.ranks} ranks: alpha = {format_seconds(self.alpha)} per step, "
                f"beta = {self.beta / 1e9:.3g} GB/s (bus bandwidth at large sizes); measured/predicted "
                f"from {min(c['ratio'] for c in self.compare()):.2f} to {max(c['ratio'] for c in self.compare()):.2f}")


def fit_alpha_beta(op: str, n: int, sizes: Sequence[float], times: Sequence[float], *,
                   relative: bool = True) -> Fit:
    """Least-squares fit of ``t = k_alpha alpha + k_beta S / beta`` (:func:`cost_model`).

    Writing ``t = a + b S``: with weights ``w_i = 1 / t_i`` (``relative=True``)
    or 1, minimise ``sum w_i^2 (a + b S_i - t_i)^2``; the normal equations of
    the two unknowns are solved exactly.  If the best ``a`` is negative the fit
    is repeated with ``a = 0`` (``alpha = 0``); if the best ``b`` is not
    positive the times do not grow with the size, and that is an error (no
    bandwidth can be read from them).  Then ``alpha = a / k_alpha`` and
    ``beta = k_beta / b``.  Needs ``n >= 2`` and at least two distinct sizes.
    """
    _check_op(op)
    _check_ranks(n)
    if n < 2:
        raise ValueError("a fit needs at least 2 ranks: on one rank a collective moves nothing")
    if len(sizes) != len(times):
        raise ValueError(f"{len(sizes)} sizes but {len(times)} times")
    if len(set(sizes)) < 2:
        raise ValueError("a fit of alpha and beta needs at least two distinct message sizes")
    if any(not t > 0 or math.isinf(t) for t in times) or any(not s >= 0 for s in sizes):
        raise ValueError("times must be positive and finite, sizes non-negative")
    k_alpha, k_beta = cost_model(op, n)
    w = [1.0 / t if relative else 1.0 for t in times]
    # Weighted normal equations for [a, b]: rows (w_i, w_i S_i), targets w_i t_i.
    sxx = sum((wi * s) ** 2 for wi, s in zip(w, sizes))
    sx1 = sum(wi * wi * s for wi, s in zip(w, sizes))
    s11 = sum(wi * wi for wi in w)
    sxy = sum(wi * wi * s * t for wi, s, t in zip(w, sizes, times))
    s1y = sum(wi * wi * t for wi, t in zip(w, times))
    det = s11 * sxx - sx1 * sx1
    a = (sxx * s1y - sx1 * sxy) / det
    b = (s11 * sxy - sx1 * s1y) / det
    if a < 0:
        a, b = 0.0, sxy / sxx
    if not b > 0:
        raise ValueError(f"{op}: the times do not grow with the message size, so no bandwidth can be fitted")
    return Fit(op, n, a / k_alpha, k_beta / b, tuple(float(s) for s in sizes), tuple(float(t) for t in times))
