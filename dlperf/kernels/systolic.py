"""A systolic array, simulated cycle by cycle: weight-stationary and output-stationary matrix products.

A systolic array is a grid of ``R x C`` processing elements (PEs).  Each PE does one multiply-add per cycle
and passes its operands to its neighbours; only the PEs on the edges touch memory (on-chip buffers).  An
operand read once is thus used by a whole row or column of PEs: that reuse is the point (Kung, "Why
systolic architectures?", IEEE Computer, 1982).  Both functions compute ``C = A @ B`` with ``A`` of shape
``M x K`` and ``B`` of shape ``K x N`` by moving values one PE per cycle, and count what happened.

**Output-stationary** (:func:`output_stationary`): PE ``(i, j)`` keeps the sum for ``C[i, j]``.  Row ``i`` of
``A`` enters the left edge ``i`` cycles late and moves right; column ``j`` of ``B`` enters the top ``j``
cycles late and moves down, so at cycle ``t`` PE ``(i, j)`` multiplies ``A[i, k] B[k, j]`` with
``k = t - i - j``.  One pass computes an ``m x n`` block of ``C`` (``m <= R``, ``n <= C``) in
``K + m + n - 2`` cycles (the last product is made at ``t = (K-1) + (m-1) + (n-1)``); the results are then
read out of the PEs (not counted as cycles here).  ``ceil(M/R) ceil(N/C)`` passes; each reads its ``m x K``
rows of ``A`` and ``K x n`` columns of ``B``, so ``A`` is read ``ceil(N/C)`` times and ``B``
``ceil(M/R)`` times in all.

**Weight-stationary** (:func:`weight_stationary`, the TPU's dataflow): a ``k x n`` tile of ``B`` (``k <= R``,
``n <= C``) is loaded into the PEs, one row per cycle (``k`` cycles), and stays.  The rows of ``A`` stream in
from the left, ``A[i, kk]`` entering row ``kk`` at cycle ``i + kk``; partial sums move down the columns, each
PE adding its product, and ``C[i, j]``'s contribution leaves the bottom of column ``j`` at cycle
``i + (k-1) + j``.  Streaming all ``M`` rows takes ``M + k + n - 2`` cycles after the load.  Tiles:
``ceil(K/R) ceil(N/C)``; ``B`` is read once in all, ``A`` ``ceil(N/C)`` times, and the partial sums of the
``ceil(K/R)`` tiles along ``K`` are added in an accumulator buffer outside the array (``M N`` additions per
tile, counted as accumulator updates).

The simulators below do not use these formulas: they move the values and count; the tests derive the
formulas separately and compare.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SystolicRun", "output_stationary", "weight_stationary"]


@dataclass(frozen=True)
class SystolicRun:
    """What one simulated product did.

    ``cycles`` counts the cycles in which values moved through the array (weight loads included for the
    weight-stationary dataflow); ``macs`` the useful multiply-adds; ``reads_a``/``reads_b`` the elements of
    ``A`` and ``B`` read from the buffers into the array's edges; ``accumulator_updates`` the partial sums
    added outside the array; ``utilization = macs / (R C cycles)``.
    """

    dataflow: str
    result: np.ndarray
    rows: int
    cols: int
    cycles: int
    macs: int
    reads_a: int
    reads_b: int
    writes_c: int
    accumulator_updates: int
    trace: list[np.ndarray] | None = None   # per cycle: which PEs did a useful multiply-add (R x C booleans)

    @property
    def utilization(self) -> float:
        return self.macs / (self.rows * self.cols * self.cycles) if self.cycles else 0.0

    @property
    def reuse_a(self) -> float:
        """Multiply-adds per element of ``A`` read: how often each read is used."""
        return self.macs / self.reads_a

    @property
    def reuse_b(self) -> float:
        return self.macs / self.reads_b

    def __str__(self) -> str:
        return (f"{self.dataflow} on {self.rows}x{self.cols} PEs: {self.cycles} cycles, {self.macs} MACs "
                f"(utilization {self.utilization:.0%}), reads A {self.reads_a} (each used {self.reuse_a:.1f}x), "
                f"B {self.reads_b} (each used {self.reuse_b:.1f}x), writes C {self.writes_c}")


def _check(a: np.ndarray, b: np.ndarray, rows: int, cols: int) -> tuple[int, int, int]:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"need A (M x K) and B (K x N), got {a.shape} and {b.shape}")
    if rows < 1 or cols < 1:
        raise ValueError(f"the array needs at least 1 x 1 PEs, got {rows} x {cols}")
    return a.shape[0], a.shape[1], b.shape[1]


def _shift_right(reg: np.ndarray, valid: np.ndarray, column: np.ndarray, column_valid: np.ndarray) -> None:
    """Move every value one PE to the right; ``column`` enters at the left edge."""
    reg[:, 1:] = reg[:, :-1].copy()
    valid[:, 1:] = valid[:, :-1].copy()
    reg[:, 0] = column
    valid[:, 0] = column_valid


def output_stationary(a: np.ndarray, b: np.ndarray, rows: int = 4, cols: int = 4,
                      keep_trace: bool = False) -> SystolicRun:
    """``A @ B`` on an output-stationary ``rows x cols`` array, cycle by cycle (see the module's docstring).

    A pass ends with the cycle of its last multiply-add; the values still moving then leave the array.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    M, K, N = _check(a, b, rows, cols)
    out = np.zeros((M, N))
    cycles = macs = reads_a = reads_b = 0
    trace: list[np.ndarray] = []
    for i0 in range(0, M, rows):
        for j0 in range(0, N, cols):
            m, n = min(rows, M - i0), min(cols, N - j0)
            a_reg, a_ok = np.zeros((m, n)), np.zeros((m, n), bool)     # values moving right
            b_reg, b_ok = np.zeros((m, n)), np.zeros((m, n), bool)     # values moving down
            acc = np.zeros((m, n))                                      # stays: C[i0+i, j0+j]
            pass_trace: list[np.ndarray] = []
            t, last_busy = 0, -1
            while True:
                kk = t - np.arange(m)                                    # row i receives A[i, t - i]
                left_ok = (kk >= 0) & (kk < K)
                left = np.where(left_ok, a[i0 + np.arange(m), np.clip(kk, 0, K - 1)], 0.0)
                kk = t - np.arange(n)                                    # column j receives B[t - j, j]
                top_ok = (kk >= 0) & (kk < K)
                top = np.where(top_ok, b[np.clip(kk, 0, K - 1), j0 + np.arange(n)], 0.0)
                if not (left_ok.any() or top_ok.any() or a_ok[:, :-1].any() or b_ok[:-1, :].any()):
                    break                                                # nothing enters, nothing stays inside
                _shift_right(a_reg, a_ok, left, left_ok)
                _shift_right(b_reg.T, b_ok.T, top, top_ok)               # down = right on the transpose
                reads_a += int(left_ok.sum())
                reads_b += int(top_ok.sum())
                busy = a_ok & b_ok
                acc += np.where(busy, a_reg * b_reg, 0.0)
                macs += int(busy.sum())
                if busy.any():
                    last_busy = t
                if keep_trace:
                    full = np.zeros((rows, cols), bool)
                    full[:m, :n] = busy
                    pass_trace.append(full)
                t += 1
            cycles += last_busy + 1
            trace.extend(pass_trace[:last_busy + 1])
            out[i0:i0 + m, j0:j0 + n] = acc
    return SystolicRun("output-stationary", out, rows, cols, cycles, macs, reads_a, reads_b, M * N, 0,
                       trace if keep_trace else None)


def weight_stationary(a: np.ndarray, b: np.ndarray, rows: int = 4, cols: int = 4,
                      keep_trace: bool = False) -> SystolicRun:
    """``A @ B`` on a weight-stationary ``rows x cols`` array, cycle by cycle (see the module's docstring).

    Each tile of ``B`` takes one cycle per row to load (counted); streaming ends with the cycle in which
    the last partial sum leaves the bottom row.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    M, K, N = _check(a, b, rows, cols)
    out = np.zeros((M, N))
    cycles = macs = reads_a = reads_b = updates = 0
    trace: list[np.ndarray] = []
    for k0 in range(0, K, rows):
        for j0 in range(0, N, cols):
            kt, n = min(rows, K - k0), min(cols, N - j0)
            w = np.zeros((kt, n))
            for step in range(kt):                                      # load: rows of B shift down
                w[1:] = w[:-1].copy()
                w[0] = b[k0 + kt - 1 - step, j0:j0 + n]
                reads_b += n
                cycles += 1
                if keep_trace:
                    trace.append(np.zeros((rows, cols), bool))
            a_reg, a_ok = np.zeros((kt, n)), np.zeros((kt, n), bool)   # inputs moving right
            psum = np.zeros((kt, n))                                    # partial sums moving down
            t, last_out = 0, -1
            pass_trace: list[np.ndarray] = []
            while True:
                i = t - np.arange(kt)                                    # row r receives A[t - r, k0 + r]
                left_ok = (i >= 0) & (i < M)
                if not (left_ok.any() or a_ok[:, :-1].any()):
                    break
                left = np.where(left_ok, a[np.clip(i, 0, M - 1), k0 + np.arange(kt)], 0.0)
                _shift_right(a_reg, a_ok, left, left_ok)
                reads_a += int(left_ok.sum())
                above = np.vstack([np.zeros((1, n)), psum[:-1]])        # what the PE above passed down
                psum = above + np.where(a_ok, a_reg * w, 0.0)
                macs += int(a_ok.sum())
                leaving = a_ok[kt - 1]                                   # bottom row: C[i, j0 + j] leaves
                if leaving.any():
                    js = np.nonzero(leaving)[0]
                    out[t - (kt - 1) - js, j0 + js] += psum[kt - 1, js]
                    updates += int(js.size)
                    last_out = t
                if keep_trace:
                    full = np.zeros((rows, cols), bool)
                    full[:kt, :n] = a_ok
                    pass_trace.append(full)
                t += 1
            cycles += last_out + 1
            trace.extend(pass_trace[:last_out + 1])
    return SystolicRun("weight-stationary", out, rows, cols, cycles, macs, reads_a, reads_b, M * N, updates,
                       trace if keep_trace else None)
