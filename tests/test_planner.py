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
    st = PL.Strategy(dp=2, tp=2, pp=2, zero=0, micro_batch=1, sequence_parallel=False,
                     recompute="none", reduce_dtype="bf16")
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
    ddp = PL.plan(TINY, PL.Strategy(dp=4, zero=0, reduce_dtype="bf16"), batch_sequences=8)
    fsdp = PL.plan(TINY, PL.Strategy(dp=4, zero=3, reduce_dtype="bf16"), batch_sequences=8)
    assert fsdp.sent_bytes["data"] == pytest.approx(1.5 * ddp.sent_bytes["data"])
    assert fsdp.memory.model_state == pytest.approx(16 * TINY.params / 4)


def test_reduce_dtype_bytes_and_memory():
    P, d = 1000.0, 4
    for zero in (0, 1, 2, 3):       # 16-bit reduction: the memory chapter's closed form
        assert sum(PL.data_parallel_bytes(P, d, zero, reduce_dtype="bf16")) == pytest.approx(
            M.zero_communication_bytes(P, d, zero))
    # float32 gradients: DDP 2 (d-1)/d 4P; ZeRO-1/2 (d-1)/d (4P + 2P); FSDP (d-1)/d (4P + 2 x 2P),
    # the 2 S = 8P (whole tensors) that the memory chapter's fsdp-bf16 run (reduce_dtype=float32)
    # recorded
    assert PL.data_parallel_bytes(P, d, 0) == (2 * 3 / 4 * 4 * P, 0.0)
    assert PL.data_parallel_bytes(P, d, 1) == (3 / 4 * 4 * P, 3 / 4 * 2 * P)
    assert sum(PL.data_parallel_bytes(P, d, 3)) == 3 / 4 * 8 * P
    with pytest.raises(ValueError):
        PL.data_parallel_bytes(P, d, 1, reduce_dtype="fp8")
    # the gradients are held as they are reduced: ZeRO-1 keeps 2 + 4 + 12/d bytes per parameter
    bf = PL.plan(TINY, PL.Strategy(dp=4, zero=1, reduce_dtype="bf16"), batch_sequences=8)
    fp = PL.plan(TINY, PL.Strategy(dp=4, zero=1), batch_sequences=8)
    assert fp.memory.grads == 2 * bf.memory.grads == 4 * TINY.params
    assert fp.memory.model_state == pytest.approx((2 + 4 + 12 / 4) * TINY.params)
    assert fp.sent_bytes["data"] == pytest.approx(1.5 * bf.sent_bytes["data"])


def test_exposed_data_parallel_time_by_hand():
    # slow network: 8 sequences, DP 2, micro-batches of 1: m = 4; the last one's backward is
    # 4/6 of compute / 4
    hw = PL.Hardware("toy", flops=1e6, memory=1e9, intra_node=1e3, network=1e3, gpus_per_node=8)
    r = PL.plan(TINY, PL.Strategy(dp=2, zero=1), batch_sequences=8, hardware=hw, mfu=1.0)
    grads, params = PL.data_parallel_bytes(TINY.params, 2, 1)
    window = r.compute_s / 4 * 4 / 6
    assert r.data_exposed_s == pytest.approx(max(0.0, grads / 1e3 - window) + params / 1e3)
    assert r.step_with_data_s == pytest.approx(r.step_s + r.data_exposed_s)
    # full recomputation: the backward pass (with the forward run again) is 6P of the 8P per token
    full = PL.plan(TINY, PL.Strategy(dp=2, zero=1, recompute="full"), batch_sequences=8, hardware=hw,
                   mfu=1.0)
    window = full.compute_s / 4 * 6 / 8
    assert full.data_exposed_s == pytest.approx(max(0.0, grads / 1e3 - window) + params / 1e3)
    # a fast network hides the gradients entirely; the parameter all-gather stays exposed
    fast = PL.plan(TINY, PL.Strategy(dp=2, zero=1), batch_sequences=8, hardware=PL.A100_80GB,
                   mfu=1e-6)
    assert fast.data_exposed_s == pytest.approx(params / PL.A100_80GB.network)
    assert PL.plan(TINY, PL.Strategy(dp=1), batch_sequences=8).data_exposed_s == 0


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


def test_kv_heads_split_only_as_far_as_there_are_kv_heads():
    """Review M11: with grouped-query attention's 8 KV heads, tensor parallelism over 16 ranks replicates each KV
    head on two ranks; K and V weights then split 8 ways, not 16."""
    model = PL.LLAMA2_70B
    h, kv = model.hidden, model.hidden * model.kv_heads // model.heads
    st8, st16 = PL.Strategy(dp=1, tp=8, zero=0), PL.Strategy(dp=1, tp=16, zero=0)
    p8, p16 = PL.plan(model, st8, 16), PL.plan(model, st16, 16)
    per_layer_kv = 2 * h * kv
    # from 8 to 16 ranks, everything but K, V (and the replicated norms) halves; K and V stay at 1/8
    others8 = (model.layer_params - 2 * h - per_layer_kv) / 8
    assert p16.params_per_gpu - p8.params_per_gpu == pytest.approx(
        model.layers * (others8 / 2 - others8) + model.embedding_params * 2 * (1 / 16 - 1 / 8), rel=1e-9)
    uneven = PL.plan(model, PL.Strategy(dp=1, tp=12, zero=0), 12)
    assert not uneven.feasible and "KV heads" in uneven.reason
