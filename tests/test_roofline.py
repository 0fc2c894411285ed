"""dlperf.roofline: roofs that bound what is measured (hardware compute roof, memory roofs per level)."""

from __future__ import annotations

import pytest
import torch

from dlperf import probe as P
from dlperf import roofline as R


@pytest.mark.parametrize("flags, dtype, expected", [
    (["sse", "sse2", "sse4_2", "avx", "avx2", "fma", "avx512f"], "float32", 64),
    (["sse2", "sse4_2", "avx", "avx2", "fma"], "float32", 32),
    (["sse2", "sse4_2", "avx"], "float32", 16),
    (["sse2", "sse4_2"], "float32", 8),
    (["asimd"], "float32", 32),
    (["avx512f", "avx512_bf16", "amx_bf16"], "bfloat16", 1024),
    (["avx512f", "avx512_bf16"], "bfloat16", 128),
    (["avx512f", "avx512_fp16"], "float16", 128),
    (["avx2", "fma"], "bfloat16", 32),          # no bfloat16 instructions: the float32 rate
    ([], "float32", None),
])
def test_flops_per_cycle_table(flags, dtype, expected):
    flops, why = R.flops_per_cycle(flags, dtype)
    assert flops == expected
    assert why
    if dtype != "float32" and expected == 32:
        assert "float32" in why


def test_compute_roof_bounds_what_the_probe_measures_here():
    rates = [P.matmul_flops("cpu", n, min_run_time=0.05).per_second for n in (128, 256, 512)]
    roof = R.compute_roof("cpu", "float32")        # from the hardware alone
    if roof.source == "measured":
        pytest.skip(f"no hardware figure here: {roof.text}")
    assert all(r <= roof.flops * 1.05 for r in rates), (rates, roof.text)
    with_measured = R.compute_roof("cpu", "float32", measured=rates)
    assert with_measured.flops >= max(rates)
    assert "cores" in with_measured.text and "FLOP/cycle" in with_measured.text


def _fake_cpu(monkeypatch, hz: float, is_max: bool):
    monkeypatch.setattr(R, "_cpu_flags", lambda: ["avx2", "fma"])
    monkeypatch.setattr(R, "usable_cores", lambda: 4)
    monkeypatch.setattr(R, "cpu_clock", lambda: (hz, "test clock", is_max))


def test_a_clock_that_may_be_low_yields_to_a_faster_measurement(monkeypatch):
    _fake_cpu(monkeypatch, 2e9, is_max=False)     # 4 x 2 GHz x 32 = 256 GFLOP/s
    roof = R.compute_roof("cpu", "float32", measured=[100e9])
    assert roof.source == "hardware" and roof.flops == pytest.approx(256e9)
    roof = R.compute_roof("cpu", "float32", measured=[300e9])
    assert roof.source == "measured" and roof.flops == 300e9 and roof.hardware == pytest.approx(256e9)
    assert "defines the roof" in roof.text and "2.34 GHz" in roof.text


def test_the_maximum_clock_is_a_bound_and_a_faster_point_is_reported(monkeypatch):
    _fake_cpu(monkeypatch, 2e9, is_max=True)
    roof = R.compute_roof("cpu", "float32", measured=[300e9])
    assert roof.source == "hardware" and roof.flops == pytest.approx(256e9)
    assert [p[0] for p in R.above_roof([("fast", 1e3, 300e9)], roof.flops, 1e10)] == ["fast"]


def test_above_roof_with_synthetic_points():
    peak, bw = 100e9, 10e9                          # ridge at 10 FLOP/byte
    points = [
        ("memory-bound, under", 1.0, 9e9),
        ("memory-bound, within 5%", 1.0, 10.4e9),
        ("memory-bound, above", 1.0, 12e9),
        ("compute-bound, under", 100.0, 99e9),
        ("compute-bound, above", 100.0, 110e9),
        ("at the ridge, above", 10.0, 106e9),
    ]
    assert [p[0] for p in R.above_roof(points, peak, bw)] == [
        "memory-bound, above", "compute-bound, above", "at the ridge, above"]
    assert len(R.above_roof(points, peak, bw, tolerance=0.0)) == 4
    assert R.above_roof([], peak, bw) == []


def test_cache_roofs_and_level_of():
    caches = [P.CacheLevel(1, "Data", 48 * 2**10, 64, 1), P.CacheLevel(2, "Unified", 2 * 2**20, 64, 1),
              P.CacheLevel(3, "Unified", 32 * 2**20, 64, 8)]
    sizes = [2**14, 2**16, 2**18, 2**20, 2**22, 2**24]
    roofs = R.cache_roofs(caches, sizes, [100e9, 150e9, 180e9, 120e9, 60e9, 20e9], cores=2)
    # L1's copies (16 KiB) ran slower than L2's: merged into L2; L3 from the 4 MiB copy
    assert roofs == [("L2 (and L1)", 360e9), ("L3", 120e9)]
    memory = [("DRAM", 20e9), ("L3", 120e9), ("L2 (and L1)", 360e9)]
    assert R.level_of(("a", 1.0, 15e9), 1e12, memory) == "DRAM"
    assert R.level_of(("b", 1.0, 100e9), 1e12, memory) == "L3"
    assert R.level_of(("c", 1.0, 300e9), 1e12, memory) == "L2 (and L1)"
    assert R.level_of(("d", 1.0, 500e9), 1e12, memory) is None


def test_memory_roofs_on_this_cpu():
    sizes, rates = [2**14, 2**28], [80e9, 10e9]
    roofs = R.memory_roofs("cpu", 10e9, sizes, rates, caches=[P.CacheLevel(1, "Data", 48 * 2**10, 64, 1)])
    assert roofs[0][:2] == ("DRAM", 10e9)
    assert roofs[-1][0] == "L1" and roofs[-1][1] == 80e9 * R.usable_cores()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_roof_is_the_datasheet():
    roof = R.compute_roof("cuda", "bfloat16")
    assert roof.source in ("datasheet", "measured")
