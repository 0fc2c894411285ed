"""2 x 2 DeviceMeshes on four gloo ranks (FSDP2 over "dp" x TP over "tp"; HSDP) train as one process does."""

from __future__ import annotations

import pytest
import torch

from dlperf.launch import launch
from dlperf.parallel import mesh as M

HIDDEN, FFN, TOKENS, STEPS = 8, 16, 8, 2


@pytest.fixture(scope="module")
def ranks():
    M.preload()   # forked ranks inherit the imports (torch._dynamo) instead of each paying for them
    return launch("dlperf.parallel.mesh:chapter_worker", 4, args=(HIDDEN, FFN, TOKENS, STEPS),
                  start_method="fork", verbose=False, timeout=120)


def test_fsdp2_with_tp_on_a_2x2_mesh_trains_as_one_process(ranks):
    want = M.train_reference(HIDDEN, FFN, TOKENS, STEPS)
    start = dict(M.make_mlp(HIDDEN, FFN).named_parameters())
    assert all((want[n] - start[n]).abs().max() > 1e-3 for n in want)      # training moved every parameter
    assert sorted(r["tp_fsdp"]["coords"] for r in ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for r in (r["tp_fsdp"] for r in ranks):
        for name, p in want.items():
            torch.testing.assert_close(r["params"][name], p, rtol=1e-5, atol=1e-6)
        # each rank stores a quarter of each weight matrix: TP halves it, FSDP halves it again
        assert r["local_shapes"]["0.weight"] == (FFN // 4, HIDDEN)
        assert r["local_shapes"]["2.weight"] == (HIDDEN // 2, FFN // 2)
        assert r["collectives"] == {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 1}


def test_hsdp_on_a_2x2_mesh_trains_as_one_process(ranks):
    want = M.train_reference(HIDDEN, FFN, TOKENS, STEPS)
    for r in (r["hsdp"] for r in ranks):
        for name, p in want.items():
            torch.testing.assert_close(r["params"][name], p, rtol=1e-5, atol=1e-6)
        assert r["placements"]["0.weight"] == "(Replicate(), Shard(dim=0))"
        assert r["local_shapes"]["0.weight"] == (FFN // 2, HIDDEN)              # sharded in pairs only
        assert r["collectives"] == {"all-gather": 1, "reduce-scatter": 1, "all-reduce": 1}


# --------------------------------------------------------------------------------------------
# The planner's memory per rank and data-parallel bytes against the ranks' own tensors
# --------------------------------------------------------------------------------------------

from dlperf.parallel import planner as PL    # noqa: E402

F32 = 4


def by_hand(layout: str, hidden: int, ffn: int) -> tuple[float, PL.Strategy]:
    """Parameters per rank worked out here: W1 (ffn x hidden) and b1 column-parallel, W2 row-parallel,
    b2 replicated over tp; then the strategy the planner is given."""
    split, replicated = 2 * hidden * ffn + ffn, hidden
    if layout == "tp_fsdp":
        return split / 2 + replicated, PL.Strategy(dp=2, tp=2, zero=3)
    return split + replicated, PL.Strategy(dp=4, zero=3, shard=2)


@pytest.mark.parametrize("layout", ["tp_fsdp", "hsdp"])
def test_planner_memory_per_rank_equals_the_ranks_tensors(ranks, layout):
    """rank_state_bytes in float32 (AdamW: 4 + 4 + 8 bytes per parameter, ZeRO-3 over the dp or the shard
    group) against the bytes of each rank's local shards, gradients and AdamW moments: equal, since every
    sharded dimension divides here (no padding)."""
    P, st = by_hand(layout, HIDDEN, FFN)
    want = PL.rank_state_bytes(P, st, precision="fp32")
    assert want.params == F32 * P / 2                     # ZeRO-3 over 2 ranks in both layouts
    for r in (r[layout] for r in ranks):
        held = r["state"]
        assert (held["params"], held["grads"], held["optimizer"]) == (want.params, want.grads, want.optimizer)
        assert held["params padded"] == held["params"]
        assert held["step counters"] == 4 * F32           # one float32 scalar per parameter tensor: not in the formula


@pytest.mark.parametrize("layout", ["tp_fsdp", "hsdp"])
def test_planner_data_parallel_bytes_equal_the_collectives_counted(ranks, layout):
    """The collectives the profiler recorded in a step (whole sizes), sent by rings over their 2-rank groups,
    against data_parallel_bytes with float32 gradients and parameters gathered once (FSDP2's root module)."""
    P, st = by_hand(layout, HIDDEN, FFN)
    grads, params = PL.data_parallel_bytes(P, st.dp, 3, reduce_dtype="fp32", param_dtype="fp32", shard=st.shard,
                                           reshard_after_forward=False)
    for r in (r[layout] for r in ranks):
        whole = dict(r["collective_bytes"])
        assert len(whole) == len(r["collective_bytes"]) == 3
        assert whole["all-gather"] / 2 == params == F32 * P / 2
        if layout == "tp_fsdp":
            assert whole["reduce-scatter"] / 2 == grads
            assert whole["all-reduce"] == F32 * TOKENS // 2 * HIDDEN   # TP's g: this dp index's activations
        else:                                                           # the shard's gradients across groups
            assert whole["reduce-scatter"] / 2 + 2 * whole["all-reduce"] / 2 == grads
            assert whole["all-reduce"] == F32 * P / 2
    # the planner's default, ZeRO-3 freeing parameters after the forward pass, would gather them twice
    assert PL.data_parallel_bytes(P, st.dp, 3, reduce_dtype="fp32", param_dtype="fp32", shard=st.shard)[1] == 2 * params


def test_uneven_shards_move_bytes_between_ranks_by_whole_rows():
    """With ffn = 18 a TP rank's W1 has 9 rows: FSDP2 gives dp index 0 ceil(9/2) = 5 and index 1 four, so the
    formula's P/2 is exceeded on one rank and undercut on the other by half a row of W1 and of b1,
    (8 + 1) x 4 / 2 = 18 bytes; the pair holds exactly twice the formula, the padded buffers (and so the
    all-gather and reduce-scatter) ceil(9/2) rows on both."""
    ffn = 18
    M.preload()
    uneven = launch("dlperf.parallel.mesh:train_worker", 4, args=(HIDDEN, ffn, TOKENS, STEPS),
                    start_method="fork", verbose=False, timeout=120)
    want = M.train_reference(HIDDEN, ffn, TOKENS, STEPS)
    P, st = by_hand("tp_fsdp", HIDDEN, ffn)
    formula = PL.rank_state_bytes(P, st, precision="fp32")
    half_rows = (HIDDEN + 1) * F32 / 2
    for r in uneven:
        for name, p in want.items():
            torch.testing.assert_close(r["params"][name], p, rtol=1e-5, atol=1e-6)
        dp = r["coords"][0]
        assert r["local_shapes"]["0.weight"] == ((5, HIDDEN) if dp == 0 else (4, HIDDEN))
        assert r["state"]["params"] == formula.params + (half_rows if dp == 0 else -half_rows)
        assert r["state"]["optimizer"] == formula.optimizer + 2 * (half_rows if dp == 0 else -half_rows)
        assert r["state"]["params padded"] == formula.params + half_rows
        whole = dict(r["collective_bytes"])
        assert whole["all-gather"] == whole["reduce-scatter"] == 2 * (formula.params + half_rows)
    pairs = {}
    for r in uneven:
        pairs.setdefault(r["coords"][1], []).append(r["state"]["params"])
    assert all(sum(v) == 2 * formula.params for v in pairs.values())


def test_planner_rows_put_measured_beside_planned(ranks):
    rows = M.planner_rows([r for r in ranks if r["tp_fsdp"]["rank"] == 0], HIDDEN, FFN)
    assert len(rows) == 12 and all(float(row[2]) == float(row[3]) for row in rows if row[3] != "not counted")
