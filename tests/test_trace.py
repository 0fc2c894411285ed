"""The profiler helper (dlperf.trace): spans of known length and order, counts, files, figures, errors."""

from __future__ import annotations

import gzip
import json
import threading
import time

import matplotlib
import pytest
import torch

from dlperf.trace import Event, Trace, parse_chrome_trace, record

matplotlib.use("Agg")


def chrome(*spans, memory=()):
    """A hand-written Chrome trace: spans (name, cat, pid, tid, ts_us, dur_us[, args]), memory (ts_us, total)."""
    events = [{"ph": "X", "name": n, "cat": c, "pid": p, "tid": t, "ts": ts, "dur": d, "args": dict(*a)}
              for n, c, p, t, ts, d, *a in spans]
    events.append({"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "x",
                   "ts": 0, "dur": 10**9})
    events += [{"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": ts,
                "args": {"Total Allocated": total, "Device Type": 0, "Device Id": -1}} for ts, total in memory]
    return {"traceEvents": events}


# -- interval algebra on a trace whose answer is known exactly ------------------------------------------
def test_busy_gaps_and_overlap_of_a_hand_written_trace():
    # main thread 7: [100, 300] with a nested op [150, 200], then [500, 600]; worker 8: [250, 550]
    tr = parse_chrome_trace(chrome(
        ("step", "user_annotation", 1, 7, 100, 200), ("aten::mm", "cpu_op", 1, 7, 150, 50),
        ("aten::add", "cpu_op", 1, 7, 500, 100), ("aten::mul", "cpu_op", 1, 8, 250, 300),
    ), main_tid=7)
    assert tr.lanes == ["CPU 7 (main)", "CPU 8"]
    main, worker = tr.lanes
    assert tr.events[0].start == 0.0 and tr.duration == pytest.approx(500e-6)
    assert tr.busy(main) == pytest.approx(300e-6)  # 200 + 100; the nested op counts once
    assert tr.busy(main, category="cpu_op") == pytest.approx(150e-6)
    assert tr.gaps(main) == [pytest.approx((200e-6, 400e-6))]
    assert tr.gaps(main, min_gap=300e-6) == []
    assert tr.overlap(main, worker) == pytest.approx(50e-6 + 50e-6)  # [250,300] and [500,550]
    assert tr.overlap(worker, main) == pytest.approx(tr.overlap(main, worker))
    assert tr.count() == {"aten::mm": 1, "aten::add": 1, "aten::mul": 1}
    assert tr.count("user_annotation") == {"step": 1}
    assert tr.lane("main") == [main] and tr.lane("cpu") == [main, worker] and tr.lane("gpu") == []


def test_gpu_spans_get_a_lane_per_device_and_stream():
    tr = parse_chrome_trace(chrome(
        ("cudaLaunchKernel", "cuda_runtime", 1, 7, 0, 5),
        ("gemm", "kernel", 0, 7, 10, 40, {"device": 0, "stream": 7}),
        ("Memcpy HtoD", "gpu_memcpy", 0, 13, 20, 40, {"device": 0, "stream": 13}),
    ), main_tid=7)
    assert tr.lanes == ["CPU 7 (main)", "GPU 0 stream 7", "GPU 0 stream 13"]
    assert tr.count("kernel") == {"gemm": 1}
    assert tr.overlap("GPU 0 stream 7", "GPU 0 stream 13") == pytest.approx(30e-6)


# -- real recordings ---------------------------------------------------------------------------------
def test_two_threads_give_two_lanes_in_order_with_their_durations_and_overlap():
    """Span A sleeps 80 ms; span B starts 40 ms after A started and sleeps 80 ms: they overlap ~40 ms."""
    a_started = threading.Event()

    def a():
        with torch.profiler.record_function("A"):
            a_started.set()
            time.sleep(0.08)

    def b():
        a_started.wait()
        time.sleep(0.04)
        with torch.profiler.record_function("B"):
            time.sleep(0.08)

    def both():
        threads = [threading.Thread(target=a), threading.Thread(target=b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        a_started.clear()

    tr = record(both, warmup=0, all_threads=True)
    (ea,), (eb,) = tr.select(name="A"), tr.select(name="B")
    assert ea.lane != eb.lane and "(main)" not in ea.lane + eb.lane
    assert tr.lanes.index(ea.lane) < tr.lanes.index(eb.lane)  # lanes in order of their first event
    # Lower bounds are the sleeps; upper bounds leave room for a loaded machine (threads wait for a core).
    for e in (ea, eb):
        assert 0.0795 <= e.duration <= 0.2, e
    offset = eb.start - ea.start
    assert 0.0395 <= offset <= 0.075, offset  # B started while A was still sleeping
    assert eb.end > ea.end
    # B starts inside A and ends after it: they overlap from B's start to A's end
    assert tr.overlap(ea.lane, eb.lane) == pytest.approx(ea.end - eb.start, abs=1e-6)
    assert 0.005 <= tr.overlap(ea.lane, eb.lane) <= ea.duration - 0.0395
    assert tr.busy(ea.lane) == pytest.approx(ea.duration)


def test_without_all_threads_only_the_callers_operators_are_recorded():
    x = torch.ones(16)

    def work():
        t = threading.Thread(target=lambda: x.mul(3))
        t.start()
        t.join()
        x.add(2)

    tr = record(work, warmup=0)
    assert tr.count()["aten::add"] == 1 and "aten::mul" not in tr.count()
    assert tr.lanes == tr.lane("main")


def test_n_known_operators_are_counted_per_step_and_warmup_is_not_recorded():
    x = torch.zeros(32)

    def seven_adds():
        for _ in range(7):
            x.add_(1)

    tr = record(seven_adds, steps=3, warmup=2, annotate_steps=True)
    assert tr.count()["aten::add_"] == 21
    assert tr.count("user_annotation") == {"step 0": 1, "step 1": 1, "step 2": 1}
    assert x[0].item() == 5 * 7  # two warm-up calls and three profiled ones ran
    steps = sorted(tr.select(category="user_annotation"), key=lambda e: e.start)
    adds = tr.select(name="aten::add_")
    assert all(sum(s.start <= e.start and e.end <= s.end for e in adds) == 7 for s in steps)


def test_flops_of_a_matrix_product_and_arguments_passed_through():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    tr = record(torch.mm, a, b, warmup=0, flops=True, shapes=True)
    (mm,) = tr.select(name="aten::mm")
    assert mm.flops == 2 * 64 * 32 * 16
    assert tr.total_flops(name="aten::mm") == 2 * 64 * 32 * 16
    assert mm.args["Input Dims"][:2] == [[64, 32], [32, 16]]


def test_memory_samples_follow_an_allocation():
    n = 1_000_000
    tr = record(lambda: torch.empty(n).fill_(1.0), warmup=0, memory=True)
    assert tr.memory, "no memory sample"
    assert max(s.allocated for s in tr.memory) >= 4 * n
    assert tr.memory[-1].allocated < 4 * n  # freed when the lambda's result was dropped
    fig = tr.plot()
    assert len(fig.axes) == 2  # timeline + memory panel
    assert fig.axes[1].get_lines(), "no memory curve"


def test_saved_file_loads_and_contains_the_events(tmp_path):
    x = torch.ones(8)
    tr = record(lambda: [x.sub(1) for _ in range(4)], warmup=0)
    for name in ("t.pt.trace.json", "t.json.gz"):
        path = tr.save(tmp_path / "sub" / name)
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if name.endswith(".gz") else raw)
        assert sum(e.get("name") == "aten::sub" for e in data["traceEvents"]) == 4
        again = Trace.load(path, main_tid=threading.get_native_id())
        assert again.count() == tr.count() and again.lanes == tr.lanes
        assert [e.start for e in again.events] == [e.start for e in tr.events]


def test_plot_draws_one_row_per_lane_and_filters():
    tr = parse_chrome_trace(chrome(
        ("step", "user_annotation", 1, 7, 0, 1000), ("aten::mm", "cpu_op", 1, 7, 100, 500),
        ("aten::add", "cpu_op", 1, 8, 0, 300), ("gemm", "kernel", 0, 7, 200, 400, {"device": 0, "stream": 7}),
    ), main_tid=7)
    fig = tr.plot(max_depth=1)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["CPU 7 (main)", "CPU 8", "GPU 0 stream 7"]
    assert len(fig.axes[0].patches) == 3  # the nested mm is below depth 1
    fig = tr.plot(max_depth=2)
    assert len(fig.axes[0].patches) == 4 and len(fig.axes[0].get_yticklabels()) == 4  # main lane has 2 rows
    fig = tr.plot(category="cpu_op", legend=0)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["CPU 7 (main)", "CPU 8"]
    assert len(fig.axes) == 1


def test_clear_errors_for_bad_input():
    with pytest.raises(TypeError, match="callable"):
        record(42)
    with pytest.raises(ValueError, match="steps"):
        record(lambda: None, steps=0)
    with pytest.raises(ValueError, match="warmup"):
        record(lambda: None, warmup=-1)
    with pytest.raises(ValueError, match="no event"):
        record(lambda: None, warmup=0)
    with pytest.raises(ValueError, match="traceEvents"):
        parse_chrome_trace({"events": []})
    tr = parse_chrome_trace(chrome(("aten::add", "cpu_op", 1, 7, 0, 10)), main_tid=7)
    with pytest.raises(ValueError, match="unknown lane"):
        tr.busy("GPU 3 stream 1")
    with pytest.raises(ValueError, match="nothing to draw"):
        tr.plot(category="kernel")
    with pytest.raises(ValueError, match="memory=True"):
        tr.plot(memory=True)
    with pytest.raises(ValueError, match="kind"):
        tr.lane("tpu")


def test_event_end():
    assert Event("x", "cpu_op", "CPU 1", 1.0, 0.5).end == 1.5


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_kernel_appears_on_a_stream_lane_with_its_launch_on_the_main_thread():
    a = torch.randn(512, 512, device="cuda")
    tr = record(lambda: a @ a, steps=2)
    gpu_lanes = tr.lane("gpu")
    assert gpu_lanes and all(" stream " in lane for lane in gpu_lanes)
    kernels = tr.select(category="kernel")
    assert len(kernels) >= 2 and {e.lane for e in kernels} <= set(gpu_lanes)
    launches = tr.select(category="cuda_runtime", lane=tr.lane("main"), name=lambda n: "Launch" in n)
    assert len(launches) >= 2
    assert tr.busy(gpu_lanes[0]) > 0


def test_top_level_events_and_two_traces_on_one_shared_axis():
    import matplotlib.pyplot as plt

    short = parse_chrome_trace(chrome(("aten::linear", "cpu_op", 1, 7, 0, 100), ("aten::addmm", "cpu_op", 1, 7, 10, 80)),
                               main_tid=7)
    long = parse_chrome_trace(chrome(("aten::add", "cpu_op", 1, 7, 0, 2000)), main_tid=7)
    assert [e.name for e in short.top_level(category="cpu_op")] == ["aten::linear"]
    fig, (a, b) = plt.subplots(2, 1)
    assert long.plot(ax=a, time_unit="µs") is fig and short.plot(ax=b, time_unit="µs") is fig
    assert b.get_xlim()[1] == pytest.approx(101) and a.get_xlim()[1] == pytest.approx(2020)
    short.plot(ax=a, time_unit="µs")  # drawn into the axis holding the longer trace: keeps its range
    assert a.get_xlim()[1] == pytest.approx(2020)
    fig, (a, b) = plt.subplots(2, 1, sharex=True)  # shared time axis: the longer trace stays in view
    long.plot(ax=a, time_unit="µs")
    short.plot(ax=b, time_unit="µs")
    assert a.get_xlim()[1] == b.get_xlim()[1] == pytest.approx(2020)
    assert a.get_xlabel() == "" and b.get_xlabel() == "time (µs)"
    with pytest.raises(ValueError, match="time_unit"):
        short.plot(time_unit="minutes")
    plt.close("all")


def test_kineto_status_lines_are_dropped_and_other_stderr_is_kept(capfd):
    import os

    from dlperf.trace import _without_kineto_status

    record(lambda: torch.ones(4) + 1, warmup=0)
    with _without_kineto_status():
        os.write(2, b"USDT:2026-11-25 03:58:52 30282:30282 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"a real warning\n")
    err = capfd.readouterr().err
    assert "profiler_start" not in err and "profiler_stop" not in err
    assert "a real warning" in err


def test_collectives_are_read_with_their_whole_sizes_and_element_sizes():
    tr = parse_chrome_trace(chrome(
        ("c10d::_reduce_scatter_base_", "cpu_op", 1, 7, 300, 10,
         {"Input Dims": [[50], [100], [], []], "Input type": ["float", "float", "", ""]}),
        ("c10d::_allgather_base_", "cpu_op", 1, 7, 100, 10,
         {"Input Dims": [[100], [50], [], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "", ""]}),
        ("c10d::allreduce_", "cpu_op", 1, 7, 500, 10, {"Input Dims": [[[3, 4]], [], []], "Input type": ["TensorList", "", ""]}),
        ("aten::add", "cpu_op", 1, 7, 600, 10, {"Input Dims": [[5], [5]]}),
    ), main_tid=7)
    got = [(c.kind, c.elements, c.element_size, c.nbytes) for c in tr.collectives(default_element_size=8)]
    assert got == [("all-gather", 100, 2, 200),       # the output, the whole tensor, in bf16
                   ("reduce-scatter", 100, 4, 400),   # the input, the whole tensor
                   ("all-reduce", 12, 8, 96)]          # a list of tensors: no dtype, the default size
    without_shapes = parse_chrome_trace(chrome(("c10d::allreduce_", "cpu_op", 1, 7, 0, 1)), main_tid=7)
    with pytest.raises(ValueError, match="shapes=True"):
        without_shapes.collectives()
