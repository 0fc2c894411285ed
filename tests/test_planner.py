"""The strategy planner against numbers worked out by hand."""

from __future__ import annotations

import pytest

from dlperf import memory as M
from dlperf.parallel import planner as PL

TINY = PL.Transformer("tiny", layers=4, hidden=8, ffn=16, heads=2, kv_heads=2, vocab=10, seq_len=4, gated_mlp=False)


def test_parameter_counts():
    # Q, K, V, O: 4 * 8 * 8; MLP 2 * 8 * 16; two norms 2 * 8
    assert TINY.layer_params == 256 + 256 + 16 == 528
    assert TINY.params == 4 * 528 + 2 * 10 * 8 + 8 == 2280
    # Llama 2 70B: grouped-query attention (8 of 64 heads for K and V), SwiGLU MLP, untied embeddings
    layer = 2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672 + 2 * 8192
    assert PL.LLAMA2_70B.params == 80 * layer + 2 * 32000 * 8192 + 8192 == 68_976_648_192


def test_activation_bytes():
    # s=4, b=1, h=8, a=2: s b h = 32
    assert PL.layer_activation_bytes(4, 1, 8, 2, tp=2) == 32 * (10 + 12 + 2.5)
    assert PL.layer_activation_bytes(4, 1, 8, 2, tp=2, sequence_parallel=True) == 32 / 2 * (34 + 5)
    assert PL.layer_activation_bytes(4, 1, 8, 2, tp=2, sequence_parallel=True, recompute="selective") == 32 / 2 * 34
    assert PL.layer_activation_bytes(4, 1, 8, 2, tp=2, recompute="full") == 64
    for recompute in ("none", "selective", "full"):   # one tensor-parallel rank: the memory chapter's formula
        assert PL.layer_activation_bytes(4096, 2, 8192, 64, recompute=recompute) == pytest.approx(
            M.gpt_layer_activation_bytes(4096, 2, 8192, 64, recompute=recompute))


def test_plan_worked_by_hand():
    st = PL.Strategy(dp=2, tp=2, pp=2, zero=0, micro_batch=1, sequence_parallel=False, recompute="none")
    r = PL.plan(TINY, st, batch_sequences=8, mfu=0.5)
    assert r.feasible and r.gpus == 8 and r.microbatches == 4          # 8 sequences / 2 replicas / 1 per micro-batch
    # first stage: 2 layers with their matrices halved (norms whole), half of the embedding
    assert r.params_per_gpu == 2 * (512 / 2 + 16) + 80 / 2 == 584
    assert (r.memory.params, r.memory.grads, r.memory.optimizer) == (2 * 584, 2 * 584, 12 * 584)
    # 2 layers x 2 micro-batches in flight (1F1B, first of 2 stages) x 32 (10 + 24/2 + 5*2*4/(8*2))
    assert r.memory.activations == 2 * 2 * 32 * 24.5
    act = 2 * 4 * 1 * 8                                                    # one micro-batch's activation, 16-bit
    assert r.sent_bytes["tensor"] == 4 * (2 * 1 / 2 * act) * 2 * 4         # 4 all-reduces x 2 layers x 4 micro-batches
    assert r.sent_bytes["pipeline"] == 2 * act / 2 * 4
    assert r.sent_bytes["data"] == 2 * 1 / 2 * 2 * 584                     # all-reduce of bf16 gradients
    assert r.bubble == pytest.approx(1 / 5)
    assert r.flops_per_gpu == 6 * 2280 * 32 / 8
    assert r.compute_s == pytest.approx(r.flops_per_gpu / (312e12 * 0.5))
    assert r.step_s == pytest.approx(r.compute_s * 5 / 4)


def test_infeasible_plans_say_why():
    r = PL.plan(TINY, PL.Strategy(dp=16), batch_sequences=8)
    assert not r.feasible and "do not split" in r.reason
    r = PL.plan(TINY, PL.Strategy(dp=1, pp=3), batch_sequences=8)
    assert not r.feasible and "stages" in r.reason
    r = PL.plan(PL.LLAMA2_70B, PL.Strategy(dp=1, tp=16), batch_sequences=8)
    assert not r.feasible and "node" in r.reason


def test_zero3_sends_three_halves_of_ddp():
    ddp = PL.plan(TINY, PL.Strategy(dp=4, zero=0), batch_sequences=8)
    fsdp = PL.plan(TINY, PL.Strategy(dp=4, zero=3), batch_sequences=8)
    assert fsdp.sent_bytes["data"] == pytest.approx(1.5 * ddp.sent_bytes["data"])
    assert fsdp.memory.model_state == pytest.approx(16 * TINY.params / 4)


def test_gpipe_and_full_recomputation_by_hand():
    # GPipe: the first stage holds all m = 4 micro-batches, 2 layers x 4 x 32 (10 + 24/2 + 2.5) bytes
    st = PL.Strategy(dp=2, tp=2, pp=2, zero=0, sequence_parallel=False, recompute="none", schedule="GPipe")
    r = PL.plan(TINY, st, batch_sequences=8)
    assert r.microbatches == 4 and r.memory.activations == 2 * 4 * 32 * 24.5
    # full recomputation: each layer keeps its input, 2 s b h = 64 bytes (32 with the tokens split over t = 2
    # by sequence parallelism), for the 2 micro-batches 1F1B's first stage holds; the forward pass runs twice,
    # so 6 all-reduces per layer instead of 4, and 8 P FLOPs per token instead of 6
    st = PL.Strategy(dp=2, tp=2, pp=2, zero=0, sequence_parallel=False, recompute="full")
    r = PL.plan(TINY, st, batch_sequences=8)
    assert r.memory.activations == 2 * 2 * 64
    assert r.sent_bytes["tensor"] == 6 * (2 * 1 / 2 * 64) * 2 * 4
    assert r.flops_per_gpu == 8 * 2280 * 32 / 8
    sp = PL.plan(TINY, PL.Strategy(dp=2, tp=2, pp=2, zero=0, recompute="full"), batch_sequences=8)
    assert sp.memory.activations == 2 * 2 * 32
