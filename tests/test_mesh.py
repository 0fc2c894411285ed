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
