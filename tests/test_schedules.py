"""Interleaved 1F1B and ZB-H1: simulated against their closed forms, and on real ranks against one process."""

from __future__ import annotations

import pytest
import torch

from dlperf.launch import launch
from dlperf.parallel import pipeline as P
from pipeline_tools import one_process_training
from dlperf.parallel import schedules as S

CASES = [(2, 2), (2, 4), (3, 6), (4, 4), (4, 8), (8, 16)]


@pytest.mark.parametrize("v", [1, 2, 3])
@pytest.mark.parametrize("p,m", CASES)
def test_interleaved_bubble_and_memory(p, m, v):
    """Narayanan et al. 2021: the fill and drain shrink by v; rank r holds 2(p-1-r) + (v-1)p + 1 chunk-micro-batches."""
    tf, tb = 1.0, 2.0
    run = P.simulate(S.interleaved_1f1b(p, m, v), forward=tf, backward=tb)
    assert run.v == v and len(run.tasks) == 2 * m * v * p
    assert run.makespan == pytest.approx(m * (tf + tb) + (p - 1) * (tf + tb) / v)
    assert run.bubble == pytest.approx(S.interleaved_bubble_fraction(p, m, v))
    ideal = m * (tf + tb)                                     # Megatron's bubble: its time over the ideal compute
    assert (run.makespan - ideal) / ideal == pytest.approx((p - 1) / (v * m))
    held = [run.peak_in_flight(s) for s in range(p)]
    if v > 1:                                                 # Megatron's warm-up, plus the forward it adds
        assert held == [min(m * v, 2 * (p - 1 - s) + (v - 1) * p + 1) for s in range(p)]
    assert held == [S.interleaved_peak(p, m, v, s) for s in range(p)]
    if v == 1:                                                # one chunk: Megatron runs plain 1F1B
        assert S.interleaved_1f1b(p, m, 1) == S.one_f_one_b(p, m)
    if v > 1 and m * v >= (v + 1) * p - 1:                    # Narayanan et al.: p (1 + (p-1)/(p v)) on rank 0
        assert run.peak_activations(0) == pytest.approx(p + (p - 1) / v)


@pytest.mark.parametrize("p,m", CASES)
@pytest.mark.parametrize("tf,tb,tw", [(1, 2, 1), (1, 3, 1), (2, 3, 1), (1, 2, 0.5)])
def test_zb_h1_bubble_and_memory(p, m, tf, tb, tw):
    """Qi et al. 2024: bubble (p-1)(T_F + T_B - T_W) against 1F1B's (p-1)(T_F + T_B + T_W), memory of 1F1B."""
    run = P.simulate("ZB-H1", p, m, forward=tf, backward=tb, weight=tw)
    one = P.simulate("1F1B", p, m, forward=tf, backward=tb)
    t_b = tb - tw                                             # B is the input's gradient, W the weights'
    assert all(run.busy(s) == pytest.approx(m * (tf + tb)) for s in range(p))
    assert run.makespan - m * (tf + tb) == pytest.approx((p - 1) * (tf + t_b - tw))
    assert one.makespan - m * (tf + tb) == pytest.approx((p - 1) * (tf + t_b + tw))
    assert run.makespan == pytest.approx(S.zb_h1_makespan(p, m, tf, tb, tw))
    assert [run.peak_in_flight(s) for s in range(p)] == [p] * p == [one.peak_in_flight(0)] * p


def test_zb_h1_weight_longer_than_forward():
    """Where T_W > T_F a deferred W overruns the wait it fills: the closed form is then not reached."""
    for p, m in [(2, 4), (4, 8)]:
        run = P.simulate("ZB-H1", p, m, forward=1, backward=3, weight=2)
        assert run.makespan > S.zb_h1_makespan(p, m, 1, 3, 2) + 0.5
        assert run.makespan < P.simulate("1F1B", p, m, forward=1, backward=3).makespan


def test_zb_h1_dependencies_and_order():
    run = P.simulate("ZB-H1", 4, 6, forward=[1, 2, 1, 3], backward=[2, 1, 4, 2], weight=[1, 0.5, 1, 1])
    for i in range(6):
        for s in range(4):
            assert run.task(s, "W", i).start >= run.task(s, "B", i).end
            if s > 0:
                assert run.task(s - 1, "B", i).start >= run.task(s, "B", i).end
    # stage s runs 1F1B's F and B in 1F1B's order and defers its W by s micro-batches
    for s, (zb, one) in enumerate(zip(S.zb_h1(4, 6), S.one_f_one_b(4, 6))):
        assert [a for a in zb if a.kind != "W"] == one
        ws = [k for k, a in enumerate(zb) if a.kind == "W"]
        bs = [k for k, a in enumerate(zb) if a.kind == "B"]
        assert [a.microbatch for a in zb if a.kind == "W"] == list(range(6))
        assert all(w > bs[min(j + s, 5)] for j, w in enumerate(ws))


def test_interleaved_messages_wrap_around():
    """The last rank's chunk c feeds rank 0's chunk c+1: messages on the link p-1 -> 0, v times as many."""
    run = P.simulate(S.interleaved_1f1b(2, 4, 2), activation_bytes=10)
    assert len(run.messages) == 2 * 4 * (2 * 2 - 1)          # forward and backward, per boundary of 4 virtual stages
    wrap = [msg for msg in run.messages if (msg.src, msg.dst, msg.kind) == (1, 0, "activation")]
    assert len(wrap) == 4 and {msg.chunk for msg in wrap} == {0}
    assert run.task(0, "F", 0, 1).start >= run.task(1, "F", 0, 0).end


def test_validation_of_chunks_and_weights():
    F, B, W = (lambda i, c=0: S.Action("F", i, c)), (lambda i, c=0: S.Action("B", i, c)), (lambda i: S.Action("W", i))
    with pytest.raises(ValueError, match="W0 before B0"):
        S.validate([[F(0), W(0), B(0)]])
    with pytest.raises(ValueError, match="once each"):
        S.validate([[F(0), B(0), W(0)], [F(0), B(0)]])
    with pytest.raises(ValueError, match=r"B0\.1 before F0\.1"):
        S.validate([[F(0), B(0, 1), F(0, 1), B(0)]])
    with pytest.raises(ValueError, match="multiple of p"):
        S.interleaved_1f1b(4, 6, 2)
    assert str(F(3, 1)) == "F3.1" and str(F(3)) == "F3"
    bad = S.interleaved_1f1b(2, 2, 2)
    bad[0] = [F(0), F(1), F(0, 1), F(1, 1), B(0, 1), B(0), B(1, 1), B(1)]
    with pytest.raises(ValueError, match="deadlocks"):      # rank 0 wants B0 (chunk 0) before rank 1 has it
        P.simulate([bad[0], [F(0), F(1), B(0), F(0, 1), B(0, 1), F(1, 1), B(1, 1), B(1)]])


W, D, ROWS, STEPS, M = 16, 4, 16, 2, 4


@pytest.fixture(scope="module")
def expected():
    return one_process_training(W, D, ROWS, STEPS)


def test_new_schedules_on_real_ranks_train_like_one_process(expected):
    """Interleaved 1F1B and ZB-H1 by hand, and PyTorch's interleaved, interleaved zero-bubble and ZBV schedules,
    on 2 gloo ranks with 2 chunks each (one block per chunk): the parameters of one process."""
    ranks = launch("dlperf.parallel.pipeline:modern_worker", 2, args=(M, W, D, ROWS, STEPS),
                   start_method="fork", verbose=False, timeout=180)
    assert set(ranks[0]) == {"hand interleaved 1F1B", "hand ZB-H1", "torch interleaved 1F1B",
                             "torch interleaved zero bubble", "torch ZBV zero bubble"}
    for key in ranks[0]:
        got = P.in_model_order([r[key] for r in ranks])
        assert len(got) == len(expected), key
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(got, expected)), key
    # ZBV places chunks 0 and 3 on rank 0: it computes the loss there
    assert ranks[0]["torch ZBV zero bubble"]["losses"][0] is not None
    # counted on the ranks, not by the simulator: the closed forms of the simulated runs
    assert [r["hand interleaved 1F1B"]["peak_in_flight"] for r in ranks] == [S.interleaved_peak(2, M, 2, s)
                                                                              for s in range(2)]
    assert [r["hand ZB-H1"]["peak_in_flight"] for r in ranks] == [2, 2]
