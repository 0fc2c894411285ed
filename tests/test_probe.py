"""The machine probe: units, FLOP and byte counting, and CUDA-only results on a CPU."""

from __future__ import annotations

import math

import pytest
import torch

from dlperf import Measurement
from dlperf import probe as P

FAST = 0.02  # seconds of timing per measurement: enough to check the bookkeeping


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread: these tests check bookkeeping, not speed, and a busy
    two-core machine makes multi-threaded tiny operations very slow."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _positive_rate(r: P.ProbeResult, unit: str) -> None:
    assert r.available, r.reason
    assert r.unit == unit
    assert isinstance(r.measurement, Measurement)
    assert r.value > 0 and math.isfinite(r.value)
    assert r.measurement.median > 0


def test_matmul_flop_counting_is_exact():
    m, k, n = 24, 40, 32
    r = P.matmul_flops("cpu", n, torch.float32, m=m, k=k, min_run_time=FAST)
    _positive_rate(r, "GFLOP/s")
    assert r.work == 2 * m * n * k
    assert r.work_unit == "FLOP"
    # the reported rate is 2mnk / median of the returned measurement, exactly
    assert r.value == 2 * m * n * k / r.measurement.median / 1e9
    assert r.per_second == 2 * m * n * k / r.measurement.median
    assert "(24 x 40) @ (40 x 32)" in r.detail
    assert "FLOP/s" in r.text()


def test_matmul_by_dtype_measures_or_explains():
    results = P.matmul_flops_by_dtype("cpu", 64, min_run_time=FAST)
    assert list(results) == ["float32", "bfloat16", "float16"]
    _positive_rate(results["float32"], "GFLOP/s")
    for name, r in results.items():
        assert r.key == f"matmul/{name}"
        if not r.available:  # e.g. a CPU without a usable float16 kernel
            assert r.reason and name in r.reason
            assert r.measurement is None


def test_a_dtype_too_slow_to_time_is_skipped_with_a_reason():
    r = P.matmul_flops("cpu", 4096, torch.float32, max_call_seconds=1e-9)
    assert not r.available and r.value is None
    assert "too slow" in r.reason and "4096x4096x4096" in r.reason
    assert "not measured" in r.text()


def test_an_unsupported_dtype_is_reported_not_raised():
    r = P.matmul_flops("cpu", 16, torch.bool, min_run_time=FAST)
    assert not r.available
    assert "unsupported" in r.reason or "too slow" in r.reason


def test_memory_bandwidth_counts_read_and_write():
    nbytes = 4 * P.MiB
    r = P.memory_bandwidth("cpu", nbytes, min_run_time=FAST)
    _positive_rate(r, "GB/s")
    assert r.work == 2 * nbytes and r.work_unit == "bytes"
    assert r.value == 2 * nbytes / r.measurement.median / 1e9
    assert "B/s" in r.text()


def test_transfers_say_there_is_no_accelerator_on_a_cpu():
    results = P.transfer_bandwidth("cpu")
    assert [r.key for r in results] == ["h2d/pageable", "h2d/pinned", "d2h/pageable", "d2h/pinned"]
    for r in results:
        assert not r.available and r.value is None and r.measurement is None
        assert "no accelerator" in r.reason
        assert r.unit == "GB/s"


def test_gpu_properties_are_empty_without_cuda():
    assert P.gpu_properties("cpu") == {}


def test_launch_overhead_units():
    op, py = P.launch_overhead("cpu", min_run_time=FAST)
    for r in (op, py):
        assert r.available and r.unit == "ns" and r.value > 0
        assert r.value == pytest.approx(r.measurement.median * 1e9)
    assert op.key == "launch/op" and py.key == "launch/python"


def test_strided_access_sums_the_same_number_of_elements():
    n = 2**14
    torch.set_num_threads(2)
    results = P.strided_access("cpu", n, (1, 4, 16), min_run_time=FAST)  # runs on one thread
    assert torch.get_num_threads() == 2  # and restores the setting
    assert [r.key for r in results] == ["stride/1", "stride/4", "stride/16"]
    for r in results:
        _positive_rate(r, "GB/s")
        assert r.work == n * 4  # useful bytes only, whatever the stride
    assert "64 B apart" in results[-1].detail


def test_pointer_chain_is_one_cycle_through_every_line():
    nbytes = 64 * 64  # 64 cache lines
    chain = P._pointer_chain(nbytes, seed=3)
    assert len(chain) == nbytes // 8
    seen, i = set(), 0
    for _ in range(64):
        assert i % 8 == 0 and i not in seen
        seen.add(i)
        i = chain[i]
    assert i == 0 and len(seen) == 64


def test_the_chase_continues_its_lap_from_one_call_to_the_next():
    """Every call starts where the last one stopped, so successive timed calls visit new lines (restarting
    at 0 kept the same few lines in the caches whatever the buffer's size)."""
    chain = P._pointer_chain(64 * 64)       # 64 lines
    where = [0]
    visited = []
    for _ in range(8):
        start = where[0]
        P._chase(chain, 8, where)
        i, lap = start, []
        for _ in range(8):
            lap.append(i)
            i = chain[i]
        visited.extend(lap)
    assert sorted(visited) == sorted(set(visited)) and len(visited) == 64    # one whole lap, no line twice


def test_memory_latency_results():
    results = P.memory_latency((4 * P.KiB, 64 * P.KiB), steps=2000, min_run_time=FAST)
    assert [r.key for r in results] == ["latency/4KiB", "latency/64KiB", "latency/extra"]
    for r in results[:2]:
        assert r.available and r.unit == "ns" and r.value > 0
    assert results[2].value == pytest.approx(results[1].value - results[0].value)


def test_roofline_formulas():
    peak, bw = 100e9, 10e9
    assert P.ridge_point(peak, bw) == 10
    assert P.attainable_flops(1, peak, bw) == 10e9  # memory-bound: intensity * bandwidth
    assert P.attainable_flops(1000, peak, bw) == peak  # compute-bound: the peak


def test_machine_description_helpers():
    feats = P.cpu_features()
    assert isinstance(feats["capability"], str) and feats["threads"] >= 1
    for c in P.cpu_caches():
        assert c.level >= 1 and c.size_bytes > 0 and c.kind != "Instruction"


def test_probe_report(monkeypatch):
    # the real probe with tiny sizes: every function runs, the report renders
    real = (P.memory_bandwidth, P.strided_access, P.memory_latency, P.matmul_flops_by_dtype)
    monkeypatch.setattr(P, "memory_bandwidth", lambda d, nbytes=None, **kw: real[0](d, 2 * P.MiB, **kw))
    monkeypatch.setattr(P, "strided_access", lambda d, n, strides, **kw: real[1](d, 2**12, strides, **kw))
    monkeypatch.setattr(P, "memory_latency", lambda sizes, **kw: real[2]((4 * P.KiB, 64 * P.KiB), steps=1000, **kw))
    monkeypatch.setattr(P, "matmul_flops_by_dtype", lambda d, n, **kw: real[3](d, 32, **kw))
    report = P.probe("cpu", quick=True, min_run_time=FAST)
    keys = [r.key for r in report.results]
    for key in ("bandwidth", "matmul/float32", "h2d/pinned", "launch/op", "stride/16", "latency/extra"):
        assert key in keys
    assert report.bandwidth > 0 and report.peak_flops("float32") > 0
    assert report.peak_flops(torch.float32) == report.peak_flops("float32")
    assert report.seconds > 0
    html = report._repr_html_()
    assert "<table" in html and "no accelerator" in html
    assert "memory bandwidth" in str(report)
    with pytest.raises(KeyError):
        report["nope"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_pinned_host_to_device_is_measured_on_a_gpu():
    results = {r.key: r for r in P.transfer_bandwidth("cuda", 64 * P.MiB, min_run_time=0.05)}
    for key in ("h2d/pageable", "h2d/pinned", "d2h/pageable", "d2h/pinned"):
        _positive_rate(results[key], "GB/s")
        assert results[key].work == 64 * P.MiB
    assert results["h2d/pinned"].measurement.device.startswith("cuda")
    props = P.gpu_properties("cuda")
    assert props["streaming multiprocessors (SMs)"] > 0
