"""ZeRO-1 and FSDP on two real gloo ranks: what each rank holds and sends, against ZeRO's description."""

from __future__ import annotations

import pytest

from dlperf import sharding


@pytest.fixture(scope="module")
def runs():
    return sharding.run(world=2, steps=3, width=64, depth=2, rows=8)


def _total(report, kind, unit="elements"):
    return sum(getattr(c, unit) for c in report.step if c.kind == kind)


def test_every_kind_trains_like_one_process(runs):
    for kind, result in runs.items():
        if kind == "fsdp-bf16":   # computed in bfloat16 (8 bits of mantissa): close, not equal
            assert 1e-4 < result["max_diff"] < 0.2, result["max_diff"]
        else:
            assert result["max_diff"] < 1e-5, (kind, result["max_diff"])


def test_what_each_rank_holds(runs):
    P = 3 * (64 * 64 + 64)                 # three Linear(64, 64) layers
    full = 4 * P                            # float32 bytes
    for kind, result in runs.items():
        assert result["num_params"] == P
        reports = result["reports"]
        assert [r.rank for r in reports] == [0, 1]
        for r in reports:
            if kind.startswith("fsdp"):     # everything sharded: half of each, P divides evenly here
                assert (r.params_bytes, r.grads_bytes, r.optimizer_bytes) == (full // 2, full // 2, full)
            else:                           # parameters and gradients replicated
                assert (r.params_bytes, r.grads_bytes) == (full, full)
        if kind == "ddp":
            assert all(r.optimizer_bytes == 2 * full for r in reports)   # both of Adam's moments, everywhere
        if kind == "zero1":                 # the moments split between the ranks, by whole parameters
            assert sum(r.optimizer_bytes for r in reports) == 2 * full
            assert all(0 < r.optimizer_bytes < 2 * full for r in reports)


def test_what_one_step_sends(runs):
    P = 3 * (64 * 64 + 64)
    ddp, zero1, fsdp = (runs[k]["reports"][0] for k in ("ddp", "zero1", "fsdp"))
    assert _total(ddp, "all-reduce") == P and _total(ddp, "all-gather") == 0
    # PyTorch's ZeRO-1: DDP's all-reduce of the gradients, then each parameter broadcast by the rank that updated it
    assert _total(zero1, "all-reduce") == P and _total(zero1, "broadcast") == P
    # ZeRO-3: every layer gathered before its forward and again before its backward, gradients reduce-scattered
    assert _total(fsdp, "all-gather") == 2 * P and _total(fsdp, "reduce-scatter") == P
    assert _total(fsdp, "all-reduce") == 0
    assert [c.kind for c in fsdp.step].count("all-gather") == 6
    keep, bf16 = (runs[k]["reports"][0] for k in ("fsdp-keep", "fsdp-bf16"))
    # reshard_after_forward=False: gathered once, kept for the backward
    assert _total(keep, "all-gather") == P and _total(keep, "reduce-scatter") == P
    # bf16 parameters gathered (2 bytes each), float32 gradients reduced (reduce_dtype)
    assert _total(bf16, "all-gather", "nbytes") == 2 * 2 * P and _total(bf16, "reduce-scatter", "nbytes") == 4 * P
    assert _total(fsdp, "all-gather", "nbytes") == 2 * 4 * P


def test_bad_kinds_are_refused():
    with pytest.raises(ValueError, match="kinds are some of"):
        sharding.run(kinds=("zero2",))
    with pytest.raises(ValueError, match="width must be positive"):
        sharding.make_model(0, 1, 0)
