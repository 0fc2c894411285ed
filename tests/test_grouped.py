"""The tensor-core matrix product in grouped order (``dlperf.kernels.grouped``): its values, the order its
programs really take (launched), the loads Triton's interpreter counts, and the L2 model's two closed forms."""

from __future__ import annotations

import pytest
import torch

from dlperf.kernels import grouped as G
from dlperf.kernels.traffic import count


@pytest.mark.parametrize(("M", "N", "bm", "bn", "group"), [
    (64, 96, 16, 16, 1), (64, 96, 16, 16, 2), (80, 48, 16, 16, 3),   # 5 tile rows in bands of 3: a short last band
    (40, 72, 16, 32, 4), (16, 160, 16, 16, 8),                       # ragged edges; a band taller than the matrix
])
def test_the_kernels_programs_take_the_tiles_in_the_stated_order(M, N, bm, bn, group):
    tiles_m, tiles_n = -(-M // bm), -(-N // bn)
    got = G.tile_order(M, N, bm, bn, group)
    assert got == G.program_order(tiles_m, tiles_n, group)
    assert sorted(got) == [(m, n) for m in range(tiles_m) for n in range(tiles_n)]   # every tile, once


def test_row_major_and_grouped_orders_by_hand():
    assert G.program_order(3, 2, 1) == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert G.program_order(3, 2, 2) == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]
    assert G.program_order(3, 2, 3) == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(("shape", "group"), [((48, 40, 56), 2), ((33, 17, 50), 1), ((64, 64, 64), 8)])
def test_values_are_the_product_rounded_once_to_the_inputs_dtype(dtype, shape, group):
    m, k, n = shape
    g = torch.Generator().manual_seed(m * n + k)
    a, b = torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype)
    exact = a.double() @ b.double()
    c = G.matmul(a, b, 16, 16, 16, group)
    assert c.dtype == dtype and c.shape == (m, n)
    # float32 sums, one rounding to the output dtype: within one unit in the last place of the result
    ulp = torch.finfo(dtype).eps * exact.abs().clamp(min=1.0)
    assert ((c.double() - exact).abs() <= ulp + 1e-3).all()


@pytest.mark.parametrize("group", [1, 2, 4])
def test_the_interpreter_counts_the_no_cache_limit_of_the_model(group):
    M = N = K = 64
    bm = bn = bk = 16
    a, b = torch.randn(M, K).half(), torch.randn(K, N).half()
    _, traffic = count(G.matmul, a, b, bm, bn, bk, group)
    loaded = sum(launch.loaded_bytes for launch in traffic.launches)
    closed = M * N * K * 2 * (1 / bn + 1 / bm)
    assert loaded == closed == G.hbm_bytes(M, N, K, bm, bn, bk, 2, group, l2_bytes=0, concurrent=4)
    assert sum(launch.stored_bytes for launch in traffic.launches) == M * N * 2


def test_a_cache_that_holds_everything_reads_each_tile_once():
    for group in (1, 3, 8):
        assert G.hbm_bytes(512, 384, 256, 64, 64, 32, 2, group, l2_bytes=1e12, concurrent=16) == (512 * 256 + 256 * 384) * 2


def test_grouping_a_wave_into_a_squarer_block_reads_less_from_hbm():
    # 64 x 64 tiles of a 4096-square bf16 product, 16 programs at a time, an L2 of 1 MiB (16 A and 16 B tiles of 32 KiB)
    args = (4096, 4096, 4096, 64, 64, 64, 2)
    row_major = G.hbm_bytes(*args, group_m=1, l2_bytes=2**20, concurrent=16)
    grouped = G.hbm_bytes(*args, group_m=4, l2_bytes=2**20, concurrent=16)
    no_cache = 4096**3 * 2 * (2 / 64)
    assert grouped < row_major < no_cache
    # a wave of 16 programs: row-major reads 1 A panel and 16 B panels, grouped 4 and 4 (here exactly)
    assert row_major / grouped == pytest.approx((1 + 16) / (4 + 4), rel=0.02)


def test_bad_input_is_refused_with_its_reason():
    a = torch.randn(32, 32)
    with pytest.raises(ValueError, match="16-bit"):
        G.matmul(a, a)
    with pytest.raises(ValueError, match="inner dimensions"):
        G.matmul(torch.randn(32, 16).half(), torch.randn(32, 16).half())
    with pytest.raises(ValueError, match="at least 16"):
        G.matmul(a.half(), a.half(), block_k=8)
