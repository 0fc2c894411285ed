"""The systolic-array simulator: its products equal a plain matmul, its counts equal closed forms.

The closed forms are derived here from the dataflows' timing, independently of the simulator's loops:

* output-stationary, ``R x C`` array: a pass over an ``m x n`` block of C lasts until PE ``(m-1, n-1)`` has
  made its last product, at cycle ``(K-1) + (m-1) + (n-1)``: ``K + m + n - 2`` cycles; A is read once per
  column of blocks, B once per row of blocks.
* weight-stationary: a ``k x n`` tile of B takes ``k`` cycles to load, then the last partial sum (row
  ``M-1`` of A, column ``n-1``) leaves the bottom at cycle ``(M-1) + (k-1) + (n-1)``: ``k + M + k + n - 2``
  cycles per tile; B is read once, A once per column of tiles.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dlperf.kernels.systolic import output_stationary, weight_stationary

SHAPES = [  # M, K, N, R, C
    (1, 1, 1, 1, 1), (4, 4, 4, 4, 4), (7, 5, 9, 4, 4), (3, 10, 2, 4, 4), (8, 8, 8, 2, 3),
    (5, 3, 6, 8, 8), (16, 12, 10, 4, 8),
]


def blocks(total: int, size: int) -> list[int]:
    return [min(size, total - start) for start in range(0, total, size)]


@pytest.mark.parametrize("M,K,N,R,C", SHAPES)
@pytest.mark.parametrize("dataflow", [output_stationary, weight_stationary])
def test_result_is_the_matrix_product(dataflow, M, K, N, R, C):
    rng = np.random.default_rng(M * 100 + K * 10 + N)
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    run = dataflow(a, b, R, C)
    np.testing.assert_allclose(run.result, a @ b, rtol=1e-12, atol=1e-12)
    assert run.macs == M * N * K            # every product made once, none twice
    assert run.writes_c == M * N


@pytest.mark.parametrize("M,K,N,R,C", SHAPES)
def test_output_stationary_counts(M, K, N, R, C):
    run = output_stationary(np.ones((M, K)), np.ones((K, N)), R, C)
    assert run.cycles == sum(K + m + n - 2 for m in blocks(M, R) for n in blocks(N, C))
    assert run.reads_a == M * K * math.ceil(N / C)
    assert run.reads_b == K * N * math.ceil(M / R)
    assert run.accumulator_updates == 0     # the sums never leave the PEs before they are complete


@pytest.mark.parametrize("M,K,N,R,C", SHAPES)
def test_weight_stationary_counts(M, K, N, R, C):
    run = weight_stationary(np.ones((M, K)), np.ones((K, N)), R, C)
    assert run.cycles == sum(k + M + k + n - 2 for k in blocks(K, R) for n in blocks(N, C))
    assert run.reads_b == K * N             # every weight read once
    assert run.reads_a == M * K * math.ceil(N / C)
    assert run.accumulator_updates == M * N * math.ceil(K / R)
    assert run.reuse_b == pytest.approx(M)  # each weight is used by every row of A


def test_one_pass_fills_the_array_for_long_k():
    # Output-stationary utilisation of one pass is MNK / (RC (K + R + C - 2)) -> 1 as K grows.
    R = C = 4
    short = output_stationary(np.ones((R, 4)), np.ones((4, C)), R, C)
    long = output_stationary(np.ones((R, 64)), np.ones((64, C)), R, C)
    assert short.utilization == pytest.approx(16 * 4 / (16 * (4 + 4 + 4 - 2)))
    assert long.utilization == pytest.approx(16 * 64 / (16 * (64 + 4 + 4 - 2)))
    assert long.utilization > short.utilization


def test_trace_has_one_frame_per_cycle():
    run = weight_stationary(np.ones((3, 2)), np.ones((2, 2)), 2, 2, keep_trace=True)
    assert len(run.trace) == run.cycles
    assert sum(int(frame.sum()) for frame in run.trace) == run.macs


def test_bad_shapes():
    with pytest.raises(ValueError):
        output_stationary(np.ones((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError):
        weight_stationary(np.ones((2, 2)), np.ones((2, 2)), 0, 2)
