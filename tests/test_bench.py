"""The benchmark helper: its statistics, its calibration, and that it waits for the device."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest
import torch

import dlperf
from dlperf import Measurement, Stopwatch, Timeline, benchmark, benchmark_interleaved, compare, load_average


class FakeClock:
    """A host clock that only moves when the timed function says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_statistics_match_numpy():
    times = (0.5, 0.1, 0.3, 0.2, 9.0, 0.4)
    m = Measurement(times)
    assert m.median == pytest.approx(np.median(times))
    assert m.mean == pytest.approx(np.mean(times))
    assert m.stdev == pytest.approx(np.std(times, ddof=1))
    assert m.q1 == pytest.approx(np.percentile(times, 25))
    assert m.q3 == pytest.approx(np.percentile(times, 75))
    assert m.iqr == pytest.approx(np.percentile(times, 75) - np.percentile(times, 25))
    assert (m.min, m.max, m.repeats) == (0.1, 9.0, 6)


def test_one_time_has_zero_spread_and_empty_is_refused():
    m = Measurement((0.25,))
    assert m.median == m.q1 == m.q3 == 0.25 and m.iqr == 0 and m.stdev == 0
    with pytest.raises(ValueError):
        Measurement(())


def test_benchmark_times_each_repeat_and_divides_by_number():
    clock = FakeClock()
    durations = iter([1.0, 2.0, 3.0, 4.0, 100.0] * 3)  # seconds per call, one value per call

    def work():
        clock.advance(next(durations))

    m = benchmark(work, warmup=0, number=3, repeat=5, timer=clock)
    # Each repeat runs 3 calls: blocks of (1+2+3), (4+100+1), (2+3+4), (100+1+2), (3+4+100).
    blocks = [6.0, 105.0, 9.0, 103.0, 107.0]
    assert m.times == pytest.approx(tuple(b / 3 for b in blocks))
    assert m.median == pytest.approx(statistics.median(b / 3 for b in blocks))
    assert m.number == 3 and m.repeats == 5


def test_warmup_calls_are_not_timed():
    clock = FakeClock()
    calls = []

    def work():
        calls.append(1)
        clock.advance(1000.0 if len(calls) <= 2 else 1.0)  # two slow warm-up calls

    m = benchmark(work, warmup=2, number=1, repeat=4, timer=clock)
    assert len(calls) == 6
    assert m.times == (1.0, 1.0, 1.0, 1.0)


def test_calibration_fills_a_block_of_about_5_ms():
    clock = FakeClock()
    m = benchmark(lambda: clock.advance(1e-4), warmup=0, repeat=3, timer=clock)
    assert m.number == 50  # ceil(5 ms / 0.1 ms)
    assert m.median == pytest.approx(1e-4)


def test_repeats_until_min_run_time_but_at_least_five():
    clock = FakeClock()
    m = benchmark(lambda: clock.advance(0.125), warmup=0, number=1, min_run_time=1.0, timer=clock)
    assert m.repeats == 8  # 8 x 0.125 s reaches the 1 s budget
    m = benchmark(lambda: clock.advance(10.0), warmup=0, number=1, min_run_time=1.0, timer=clock)
    assert m.repeats == 5  # never fewer than five repeats


def test_arguments_are_passed_through():
    seen = []
    benchmark(lambda a, b=0: seen.append((a, b)), 1, b=2, warmup=0, number=1, repeat=1)
    assert seen == [(1, 2)]  # no warm-up, no calibration when number is given: one timed call


def test_real_sleep_is_measured():
    m = benchmark(time.sleep, 0.002, warmup=1, number=1, repeat=5)
    assert 0.002 <= m.median < 0.05


def test_stopwatch_and_compare():
    clock = FakeClock()
    with Stopwatch(timer=clock) as sw:
        clock.advance(2.5)
    assert sw.seconds == 2.5 and str(sw) == "2.5 s"
    fast, slow = Measurement((1e-3,), label="fast"), Measurement((4e-3,), label="slow")
    table = compare([fast, slow], baseline="fast")
    assert "4.00x" in table.splitlines()[2] and "1.00x" in table.splitlines()[1]
    with pytest.raises(KeyError):
        compare([fast], baseline="nope")


def test_str_names_units():
    assert "123 µs" in str(Measurement((123e-6,), label="x"))
    assert "1.5 ms" in str(Measurement((1.5e-3,)))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_benchmark_waits_for_the_gpu():
    """A kernel that spins for a fixed number of cycles: the launch returns at once,
    the benchmark must report the time the device spent."""
    device = torch.device("cuda")
    torch.cuda.synchronize()
    cycles = 20_000_000  # ~10 ms at ~2 GHz
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()

    t0 = time.perf_counter()
    torch.cuda._sleep(cycles)
    launch_only = time.perf_counter() - t0
    torch.cuda.synchronize()

    t0 = time.perf_counter()
    torch.cuda._sleep(cycles)
    torch.cuda.synchronize()
    synced = time.perf_counter() - t0

    m = benchmark(torch.cuda._sleep, cycles, device=device, warmup=1, number=1, repeat=5)
    assert launch_only < 0.2 * synced, (launch_only, synced)
    assert m.median == pytest.approx(synced, rel=0.3)
    with Stopwatch(device) as sw:
        torch.cuda._sleep(cycles)
    assert sw.seconds == pytest.approx(synced, rel=0.3)


def test_interleaved_alternates_and_pools():
    clock = FakeClock()
    order = []

    def make(label, seconds):
        def fn():
            order.append(label)
            clock.advance(seconds)
        return fn

    a, b = benchmark_interleaved({"a": make("a", 1.0), "b": make("b", 3.0)}, rounds=2, repeat=2,
                                 warmup=0, number=1, timer=clock)
    # round 1: a a, b b; round 2: one warm-up call each, then two timed calls
    assert order == ["a", "a", "b", "b", "a", "a", "a", "b", "b", "b"]
    assert a.times == (1.0,) * 4 and b.times == (3.0,) * 4 and a.label == "a"
    assert b.clearly_differs(a) and not a.clearly_differs(Measurement((0.5, 1.0, 1.5)))


def test_load_average_is_a_number():
    value = load_average()
    assert value != value or value >= 0  # NaN where the OS does not report it


def test_timeline_spans_share_one_origin():
    clock = FakeClock()
    clock.advance(100.0)  # the origin is the timeline's creation, not the clock's zero
    tl = Timeline("cpu", timer=clock)
    clock.advance(1.0)
    with tl.span("load"):
        clock.advance(2.0)
    with tl.span("compute"):
        clock.advance(0.5)
    assert tl.spans() == [("load", 1.0, 3.0), ("compute", 3.0, 3.5)]
    a = tl.mark()
    clock.advance(4.0)
    assert tl.seconds(a, tl.mark()) == 4.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_timeline_stamps_the_device_not_the_launch():
    tl = Timeline("cuda")
    with tl.span("sleep"):
        torch.cuda._sleep(20_000_000)
    (lane, start, end), = tl.spans()
    with Stopwatch("cuda") as sw:
        torch.cuda._sleep(20_000_000)
    assert lane == "sleep" and end - start == pytest.approx(sw.seconds, rel=0.3)


def test_speed_phrase_says_only_what_the_quartiles_allow():
    slow = Measurement((2.0, 2.1, 2.2, 2.3))
    fast = Measurement((1.0, 1.05, 1.1, 1.15))
    overlapping = Measurement((1.9, 2.15, 2.2, 2.5))
    assert dlperf.speed_phrase(slow, fast, "eager") == "ran 2.00 times as fast as eager"   # 2.15 / 1.075
    assert dlperf.speed_phrase(fast, slow, "eager") == "took 2.00 times as long as eager"
    assert dlperf.speed_phrase(slow, overlapping) == "was not clearly faster or slower (median ratio 0.99)"
    assert dlperf.speed_phrase(slow, overlapping, "eager").startswith("was not clearly faster or slower than eager")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_stopwatch_counts_side_stream_work_only_when_joined_back():
    """What the module's docstring promises: the interval is timed on the current stream, so work
    queued on another stream counts only if it was joined back before the timer stops."""
    device = torch.device("cuda")
    side = torch.cuda.Stream(device)
    cycles = 50_000_000  # ~25 ms of spinning at ~2 GHz
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()

    def on_side_stream(join: bool) -> None:
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)
        if join:
            torch.cuda.current_stream(device).wait_stream(side)

    with Stopwatch(device) as joined:
        on_side_stream(join=True)
    torch.cuda.synchronize()
    with Stopwatch(device) as not_joined:
        on_side_stream(join=False)
    torch.cuda.synchronize()
    with Stopwatch(device) as alone:
        torch.cuda._sleep(cycles)
    assert joined.seconds > 0.8 * alone.seconds, (joined.seconds, alone.seconds)
    assert not_joined.seconds < 0.2 * alone.seconds, (not_joined.seconds, alone.seconds)
