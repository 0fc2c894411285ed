"""Expert parallelism on four real gloo ranks against the same mixture-of-experts layer in one process."""

from __future__ import annotations

import pytest
import torch

from dlperf.launch import launch
from dlperf.parallel import experts as EP

WORLD, TOKENS, D, FFN, E, K = 4, 16, 8, 16, 8, 2
FACTORS = (1.0, 2.0)


@pytest.fixture(scope="module")
def ranks():
    """One process group for every check of this file (the ranks start once)."""
    return launch("dlperf.parallel.experts:chapter_worker", WORLD, args=(TOKENS, D, FFN, E, K, FACTORS),
                  start_method="fork", verbose=False, timeout=120)


@pytest.fixture(scope="module")
def reference():
    x, g = EP.moe_inputs(TOKENS * WORLD, D)
    out = {}
    for factor in FACTORS:
        moe = EP.MoE(D, FFN, E, K, factor)
        y = moe(x, groups=WORLD)
        (y * g).sum().backward()
        out[factor] = (moe, y.detach(), [moe.route(xg) for xg in x.chunk(WORLD)])
    return x, out


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_routing_keeps_first_choices_first_and_respects_capacity():
    logits = torch.tensor([[3.0, 2.0, 0.0], [3.0, 0.0, 2.0], [0.0, 3.0, 2.0], [3.0, 2.0, 0.0]])
    r = EP.route(logits, 2, capacity_factor=0.75)       # C = ceil(0.75 * 4 * 2 / 3) = 2
    assert r.capacity == 2
    assert r.expert[:, 0].tolist() == [0, 0, 1, 0] and r.routed().tolist() == [3, 3, 2]
    # expert 0: first choices of tokens 0, 1, 3: token 3 is dropped; expert 1: token 2 (first), then token 0
    assert r.kept.tolist() == [[True, True], [True, True], [True, True], [False, False]]
    assert r.accepted().tolist() == [2, 2, 2]
    assert torch.allclose(r.weight.sum(dim=1), torch.ones(4))


@pytest.mark.parametrize("factor", FACTORS)
def test_outputs_and_gradients_equal_the_one_process_layer(ranks, reference, factor):
    _, ref = reference
    moe, y, _ = ref[factor]
    res = [r[factor] for r in ranks]
    assert _close(torch.cat([r["output"] for r in res]), y)
    for r in res:
        assert _close(r["gate_grad"], moe.gate.weight.grad)
        assert len(r["expert_grads"]) == E // WORLD
        for e, grads in r["expert_grads"].items():
            for name, p in moe.experts[e].named_parameters():
                want = p.grad if p.grad is not None else torch.zeros_like(p)   # no token reached it
                assert _close(grads[name], want), (e, name)


@pytest.mark.parametrize("factor", FACTORS)
def test_bytes_equal_the_formula_from_the_routing(ranks, reference, factor):
    _, ref = reference
    routings = ref[factor][2]
    kept = torch.stack([r.accepted() for r in routings])              # [source rank, expert]
    owner = torch.arange(E) // (E // WORLD)
    for rank, r in enumerate(ranks):
        got = {c.phase: c.nbytes for c in r[factor]["traffic"]}
        assert got["dispatch"] == int(kept[rank, owner != rank].sum()) * D * 4
        assert got["combine"] == int(kept[:, owner == rank].sum() - kept[rank, owner == rank].sum()) * D * 4
        assert got["counts"] == (WORLD - 1) * (E // WORLD) * 8
        assert r[factor]["rows"] == kept[:, owner == rank].sum(dim=0).tolist()   # load per local expert
    assert [{c.phase: c.nbytes for c in r[factor]["traffic"] if c.phase != "counts"} for r in ranks] == \
        EP.ep_bytes(routings, D)


def test_a_combine_without_the_gate_weights_is_caught(ranks, reference):
    _, ref = reference
    got = torch.cat([r["no_weight"] for r in ranks])
    assert (got - ref[1.0][1]).abs().max() > 1e-3


def test_load_balancing_loss_is_one_when_uniform_and_larger_when_concentrated():
    uniform = torch.zeros(16, 4)
    uniform[torch.arange(16), torch.arange(16) % 4] = 1e-3      # ties broken evenly, probabilities ~uniform
    assert EP.load_balancing_loss(uniform, 1).item() == pytest.approx(1.0, abs=1e-3)
    concentrated = torch.zeros(16, 4)
    concentrated[:, 0] = 5.0
    assert EP.load_balancing_loss(concentrated, 1).item() > 3.0
