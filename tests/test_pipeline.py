"""Pipeline schedules, the simulator against closed forms worked by hand, and real stages against one process."""

from __future__ import annotations

import pytest
import torch

from dlperf import cluster as C
from dlperf.launch import launch
from dlperf.parallel import pipeline as P
from pipeline_tools import one_process_training

CASES = [(1, 1), (2, 1), (2, 4), (3, 5), (4, 4), (4, 8), (8, 4), (5, 16)]


@pytest.mark.parametrize("name", ["GPipe", "1F1B"])
@pytest.mark.parametrize("p,m", CASES)
def test_bubble_and_makespan(name, p, m):
    tf, tb = 1.0, 2.0
    run = P.simulate(name, p, m, forward=tf, backward=tb)
    assert run.makespan == pytest.approx((m + p - 1) * (tf + tb))     # fill, m steady slots, drain
    assert all(run.busy(s) == pytest.approx(m * (tf + tb)) for s in range(p))
    assert run.bubble == pytest.approx((p - 1) / (m + p - 1))
    assert P.bubble_fraction(p, m) == pytest.approx(run.bubble)


@pytest.mark.parametrize("p,m", CASES)
def test_activations_in_flight(p, m):
    g, f = P.simulate("GPipe", p, m), P.simulate("1F1B", p, m)
    assert [g.peak_in_flight(s) for s in range(p)] == [m] * p
    assert [f.peak_in_flight(s) for s in range(p)] == [min(p - s, m) for s in range(p)]


@pytest.mark.parametrize("name", ["GPipe", "1F1B"])
def test_dependencies_hold(name):
    p, m = 4, 6
    run = P.simulate(name, p, m, forward=[1, 2, 1, 3], backward=[2, 1, 4, 2])
    for i in range(m):
        for s in range(p):
            if s > 0:
                assert run.task(s, "F", i).start >= run.task(s - 1, "F", i).end
            if s < p - 1:
                assert run.task(s, "B", i).start >= run.task(s + 1, "B", i).end
            assert run.task(s, "B", i).start >= run.task(s, "F", i).end
        for s in range(p):   # a stage runs one action at a time
            own = sorted((t.start, t.end) for t in run.tasks if t.stage == s)
            assert all(a[1] <= b[0] for a, b in zip(own, own[1:]))


def test_one_f_one_b_order():
    assert [str(a) for a in P.one_f_one_b(3, 4)[0]] == ["F0", "F1", "F2", "B0", "F3", "B1", "B2", "B3"]
    assert [str(a) for a in P.one_f_one_b(3, 4)[2]] == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]
    assert [str(a) for a in P.gpipe(2, 2)[1]] == ["F0", "F1", "B0", "B1"]


def test_a_schedule_that_violates_dependencies_deadlocks():
    # stage 0 wants B0 before it has sent F1, but stage 1 runs both forwards before any backward
    bad = [[P.Action("F", 0), P.Action("B", 0), P.Action("F", 1), P.Action("B", 1)],
           [P.Action("F", 0), P.Action("F", 1), P.Action("B", 0), P.Action("B", 1)]]
    with pytest.raises(ValueError, match="deadlocks"):
        P.simulate(bad)
    with pytest.raises(ValueError, match="B0 before F0"):
        P.validate([[P.Action("B", 0), P.Action("F", 0)]], 1)
    with pytest.raises(ValueError, match="once each"):
        P.validate([[P.Action("F", 0), P.Action("F", 0)]], 1)


def test_transfers_worked_by_hand():
    # p=2, m=1; a message costs 0.5 + 1000 / 1000 = 1.5
    run = P.simulate("GPipe", 2, 1, forward=1, backward=2, activation_bytes=1000, link=C.LinkSpec(0.5, 1000.0))
    # F0 on 0: [0, 1]; activation [1, 2.5]; F0 on 1: [2.5, 3.5]; B0 on 1: [3.5, 5.5]; gradient [5.5, 7]; B0 on 0: [7, 9]
    assert run.task(1, "F", 0).start == pytest.approx(2.5) and run.task(0, "B", 0).start == pytest.approx(7)
    assert run.makespan == pytest.approx(9)
    assert run.bytes_sent(0) == run.bytes_sent(1) == 1000
    # a busy link queues: two activations of 3 s each leave stage 0 at t=1 and t=2
    run = P.simulate("GPipe", 2, 2, forward=1, backward=1, activation_bytes=3, link=C.LinkSpec(0.0, 1.0))
    acts = [msg for msg in run.messages if msg.kind == "activation"]
    assert [(a.ready, a.start, a.end) for a in acts] == [(1, 1, 4), (2, 4, 7)]
    assert run.task(1, "F", 1).start == 7


def test_topology_links():
    topo = C.ring(4)
    spec = topo.links[(0, 1)]
    a = P.simulate("1F1B", 4, 8, activation_bytes=10**6, link=topo)
    b = P.simulate("1F1B", 4, 8, activation_bytes=10**6, link=spec)
    assert a.makespan == pytest.approx(b.makespan) and a.makespan > 11 * 3
    with pytest.raises(ValueError, match="no link"):
        P.simulate("GPipe", 3, 2, activation_bytes=1, link=C.Topology(3))


W, D, ROWS, STEPS, M = 16, 4, 16, 3, 4


@pytest.fixture(scope="module")
def expected():
    return one_process_training(W, D, ROWS, STEPS)


@pytest.mark.parametrize("worker", ["stage_worker", "torch_worker"])
@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_real_stages_train_like_one_process(expected, worker, schedule):
    ranks = launch(f"dlperf.parallel.pipeline:{worker}", 2, args=(schedule, M, W, D, ROWS, STEPS),
                   start_method="fork", verbose=False, timeout=120)
    got = ranks[0]["params"] + ranks[1]["params"]
    assert len(got) == len(expected)
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, expected))
    if worker == "stage_worker":   # counted on the real ranks, not by the simulator
        assert [r["peak_in_flight"] for r in ranks] == ([M, M] if schedule == "GPipe" else [2, 1])


@pytest.mark.parametrize("schedule", ["GPipe", "1F1B"])
def test_real_timeline_respects_the_dependencies(schedule):
    """Stamped on one clock by the ranks themselves: a stage's F_i starts after the previous stage's F_i ended."""
    ranks = launch("dlperf.parallel.pipeline:stage_worker", 2, args=(schedule, 4, W, D, ROWS, 3, 0, 0.1, True),
                   start_method="fork", verbose=False, timeout=120)
    for k in range(2):   # the two timed steps
        spans = [{a: (r["timed"][k]["origin"] + s, r["timed"][k]["origin"] + e) for a, s, e in r["timed"][k]["spans"]}
                 for r in ranks]
        want = [str(a) for a in P.SCHEDULES[schedule](2, 4)[0]]
        assert [a for a, _, _ in ranks[0]["timed"][k]["spans"]] == want     # stage 0 ran its schedule in order
        for i in range(4):
            assert spans[1][f"F{i}"][0] >= spans[0][f"F{i}"][1]           # activation sent after F_i ended
            assert spans[0][f"B{i}"][0] >= spans[1][f"B{i}"][1]           # gradient sent after B_i ended
