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


# --------------------------------------------------------------------------------------------
# Context and expert parallelism, newer schedules: the formulas against measured runs
# --------------------------------------------------------------------------------------------

from dlperf.launch import launch                       # noqa: E402
from dlperf.parallel import pipeline as PP             # noqa: E402


@pytest.mark.parametrize("world,seq_len", [(2, 8), (3, 12)])
def test_context_bytes_against_ring_attention_on_ranks(world, seq_len):
    """The planner's ring formula against the bytes the ranks of dlperf.parallel.context counted, both layouts."""
    heads, head_dim = 2, 4
    ranks = launch("dlperf.parallel.context:chapter_worker", world, args=(seq_len, heads, head_dim, False, 0, 1, ()),
                   start_method="fork", verbose=False, timeout=120)
    formula = PL.context_parallel_bytes(seq_len, world, heads * head_dim, element_size=4)
    for r in ranks:
        for scheme in ("contiguous", "zigzag"):
            assert sum(c.nbytes for c in r[scheme]["traffic"]) == formula["forward"]
            assert sum(c.nbytes for c in r[scheme]["backward_traffic"]) == formula["backward"]
    full = PL.context_parallel_bytes(seq_len, world, heads * head_dim, element_size=4, recompute="full")
    assert full["forward"] == 2 * formula["forward"] and PL.context_parallel_bytes(8, 1, 8)["backward"] == 0


def test_expert_bytes_against_the_all_to_all_on_ranks():
    """The planner's even-routing formula against the dispatch and combine bytes counted by dlperf.parallel.experts."""
    world, tokens, d, experts, k = 4, 16, 8, 8, 2
    ranks = launch("planner_workers:balanced_moe", world, args=(tokens, d, 16, experts, k),
                   start_method="fork", verbose=False, timeout=120)
    formula = PL.expert_parallel_bytes(tokens, d, k, world, element_size=4)
    for r in ranks:
        assert r["kept"] == tokens * k                                     # nothing dropped
        sent = {c.phase: c.nbytes for c in r["traffic"]}
        assert sent["dispatch"] == formula["dispatch"] and sent["combine"] == formula["combine"]
    assert formula["backward"] == 2 * formula["dispatch"]


def test_moe_parameters():
    # Jiang et al. 2024: 47 B parameters, 13 B active per token
    assert round(PL.MIXTRAL_8X7B.params / 1e9, 1) == 46.7 and round(PL.MIXTRAL_8X7B.active_params / 1e9, 1) == 12.9
    moe = PL.Transformer("tiny moe", layers=2, hidden=8, ffn=16, heads=2, kv_heads=2, vocab=10, seq_len=8,
                         gated_mlp=False, experts=4, top_k=2)
    assert moe.layer_params == 256 + 4 * 256 + 4 * 8 + 16
    assert moe.params - moe.active_params == 2 * 2 * 256


def test_context_and_expert_plan_worked_by_hand():
    moe = PL.Transformer("tiny moe", layers=2, hidden=8, ffn=16, heads=2, kv_heads=2, vocab=10, seq_len=8,
                         gated_mlp=False, experts=4, top_k=2)
    st = PL.Strategy(dp=2, cp=2, ep=2, zero=1, sequence_parallel=False, recompute="selective", reduce_dtype="bf16")
    r = PL.plan(moe, st, batch_sequences=4)
    assert r.feasible and r.gpus == 4 and r.microbatches == 2
    dense = 2 * (256 + 4 * 8 + 16) + 2 * 80 + 8                            # attention, gate, norms; embeddings
    experts = 2 * 4 * 256 / 2                                              # half of each layer's experts
    assert r.params_per_gpu == dense + experts
    # ZeRO-1: dense optimizer state over dp x cp = 4 ranks, the experts' over 4 / ep = 2
    assert r.memory.optimizer == pytest.approx(12 * dense / 4 + 12 * experts / 2)
    # 4 tokens per rank (8 / cp); K/V blocks of 2 x 4 x 8 x 2 bytes, 1 forward + 3 backward, 2 layers x 2 micro-batches
    assert r.sent_bytes["context"] == (1 + 3) * 2 * 4 * 8 * 2 * 2 * 2
    # 4 all-to-alls of k T h 2 bytes x 1/2, per layer and micro-batch
    assert r.sent_bytes["expert"] == 4 * (2 * 4 * 8 * 2 / 2) * 2 * 2
    assert r.flops_per_gpu == 6 * moe.active_params * 4 * 8 / 4
    assert "CP 2" in st.label() and "EP 2" in st.label()
    assert not PL.plan(moe, PL.Strategy(dp=1, cp=3), 4).feasible                    # 8 tokens, 6 zig-zag chunks
    assert "experts" in PL.plan(moe, PL.Strategy(dp=2, ep=4), 4).reason


@pytest.mark.parametrize("schedule", ["1F1B", "GPipe", "interleaved 1F1B", "ZB-H1"])
def test_planner_bubble_against_the_simulator(schedule):
    """The planner's closed forms against the bubble and the activations the simulator counted."""
    model = PL.Transformer("t", layers=8, hidden=8, ffn=16, heads=2, kv_heads=2, vocab=10, seq_len=8)
    st = PL.Strategy(dp=1, pp=4, schedule=schedule, sequence_parallel=False)
    r = PL.plan(model, st, batch_sequences=8)
    run = PP.simulate(schedule, 4, 8, forward=1, backward=2)
    assert r.bubble == pytest.approx(run.bubble)
    one = PL.plan(model, PL.Strategy(dp=1, pp=4, sequence_parallel=False), batch_sequences=8)
    ratio = r.memory.activations / one.memory.activations                  # against 1F1B's 4 held
    assert ratio == pytest.approx(run.peak_activations(0) / 4)


def test_recommendation_agrees_with_the_table():
    llama, n = PL.LLAMA2_70B, 1024
    strategies = [PL.Strategy(dp=256, tp=8, zero=0), PL.Strategy(dp=256, tp=8, zero=1),
                  PL.Strategy(dp=64, tp=8, pp=4, zero=1), PL.Strategy(dp=64, tp=8, pp=4, zero=1, schedule="ZB-H1")]
    plans = [PL.plan(llama, st, n, mfu=0.4) for st in strategies]
    best, why = PL.recommend(plans)
    assert best is min((p for p in plans if p.fits), key=lambda p: p.step_with_comm_s)
    assert not plans[0].fits and best.strategy.label() in why and "quickest" in why
    assert plans[3].bubble < plans[2].bubble                                # the zero-bubble schedule helps
    none, why = PL.recommend([plans[0]])
    assert none is plans[0] and why.startswith("none fits")



# --------------------------------------------------------------------------------------------
# Ring attention's and the all-to-alls' time in the step; HSDP
# --------------------------------------------------------------------------------------------

def test_context_parallel_exposed_time_by_hand():
    """8 tokens on 2 ranks, K/V width 8, hidden 8: a K/V block is 2 x 4 x 8 x 2 = 128 bytes; a ring step's
    causal work is 2 x 4^2 x 8 = 256 FLOPs, 2.56e-4 s at 1e6 FLOP/s; messages 1e-3 s + bytes / 1e3 B/s."""
    kw = dict(bandwidth=1e3, latency=1e-3, flop_rate=1e6)
    got = PL.context_parallel_exposed_s(8, 2, 8, 8, **kw)
    assert got["forward"] == pytest.approx(1 * (1e-3 + 128 / 1e3 - 2.56e-4))
    assert got["backward"] == pytest.approx(2 * (1e-3 + 3 / 2 * 128 / 1e3 - 2 * 2.56e-4))   # 3 blocks in 2 steps
    full = PL.context_parallel_exposed_s(8, 2, 8, 8, recompute="full", **kw)
    assert full["forward"] == pytest.approx(2 * got["forward"]) and full["backward"] == got["backward"]
    # limits: one rank sends nothing; enough work per step hides the ring entirely
    assert PL.context_parallel_exposed_s(8, 1, 8, 8, **kw) == {"forward": 0.0, "backward": 0.0}
    assert sum(PL.context_parallel_exposed_s(8, 2, 8, 8, bandwidth=1e3, latency=1e-3, flop_rate=1.0).values()) == 0
    # a slower link never exposes less; tensor parallelism shortens the work that hides it
    slower = PL.context_parallel_exposed_s(8, 2, 8, 8, bandwidth=5e2, latency=1e-3, flop_rate=1e6)
    assert slower["forward"] > got["forward"] and slower["backward"] > got["backward"]
    assert PL.context_parallel_exposed_s(8, 2, 8, 8, tp=2, **kw)["forward"] > got["forward"]


def test_expert_parallel_exposed_time_by_hand():
    """4 tokens, k = 2, hidden 8, 4 ranks: S = 2 x 4 x 8 x 2 = 128 bytes per all-to-all; pairwise exchange
    3 (1e-3 + 128 / (4 x 1e3)) = 0.099 s; 4 of them (6 with full recomputation)."""
    kw = dict(bandwidth=1e3, latency=1e-3)
    assert PL.expert_parallel_exposed_s(4, 8, 2, 4, **kw) == pytest.approx(4 * 3 * (1e-3 + 128 / 4e3))
    assert PL.expert_parallel_exposed_s(4, 8, 2, 4, recompute="full", **kw) == pytest.approx(6 * 0.099)
    assert PL.expert_parallel_exposed_s(4, 8, 2, 1, **kw) == 0
    times = [PL.expert_parallel_exposed_s(4, 8, 2, e, **kw) for e in (1, 2, 4, 8)]
    assert times == sorted(times) and len(set(times)) == 4          # more ranks: more of the tokens leave


def test_plan_puts_context_and_expert_time_in_the_step():
    moe = PL.Transformer("tiny moe", layers=2, hidden=8, ffn=16, heads=2, kv_heads=2, vocab=10, seq_len=8,
                         gated_mlp=False, experts=4, top_k=2)
    hw = PL.Hardware("toy", flops=1e6, memory=1e9, intra_node=1e3, network=5e2, gpus_per_node=2,
                     intra_latency=1e-3, network_latency=4e-3)
    st = PL.Strategy(dp=2, cp=2, ep=2, zero=1, sequence_parallel=False)
    r = PL.plan(moe, st, batch_sequences=4, hardware=hw, mfu=1.0)
    assert r.microbatches == 2 and r.bubble == 0
    # cp = ep = 2 ranks fit in a node of 2: the node's link and latency; 2 layers x 2 micro-batches
    ring = PL.context_parallel_exposed_s(8, 2, 8, 8, bandwidth=1e3, latency=1e-3, flop_rate=1e6)
    assert r.context_exposed_s == pytest.approx(sum(ring.values()) * 2 * 2) and r.context_exposed_s > 0
    a2a = PL.expert_parallel_exposed_s(4, 8, 2, 2, bandwidth=1e3, latency=1e-3)   # 8 tokens / cp 2 per rank
    assert r.expert_exposed_s == pytest.approx(a2a * 2 * 2) and r.expert_exposed_s > 0
    assert r.step_with_comm_s == pytest.approx(r.step_s + r.data_exposed_s + r.context_exposed_s
                                               + r.expert_exposed_s)
    plain = PL.plan(moe, PL.Strategy(dp=4, zero=1), batch_sequences=4, hardware=hw, mfu=1.0)
    assert plain.context_exposed_s == plain.expert_exposed_s == 0
    assert plain.step_with_comm_s == plain.step_with_data_s
    # a pipeline of 2 stages (1 layer each, m = 4): its bubble stretches them as it stretches the compute
    piped = PL.plan(moe, PL.Strategy(dp=1, cp=2, pp=2, zero=1, sequence_parallel=False), batch_sequences=4,
                    hardware=hw, mfu=1.0)
    assert piped.bubble == pytest.approx(1 / 5)
    assert piped.context_exposed_s == pytest.approx(sum(ring.values()) * 1 * 4 / (1 - 1 / 5))


def test_recommendation_counts_the_all_to_all():
    """Mixtral at 32k tokens on 512 A100s: expert parallelism wins on the step with data-parallel time only,
    and loses once its all-to-alls (none hidden, over the network) are in the step."""
    mixtral = PL.MIXTRAL_8X7B
    plans = [PL.plan(mixtral, st, 128, mfu=0.4) for st in
             (PL.Strategy(dp=64, tp=8, zero=1), PL.Strategy(dp=32, tp=8, cp=2, ep=8, zero=1))]
    tp, ep = plans
    assert ep.step_with_data_s < tp.step_with_data_s and ep.step_with_comm_s > tp.step_with_comm_s
    assert PL.recommend(plans)[0] is tp
    assert ep.context_exposed_s == 0 < ep.expert_exposed_s                 # the ring hides behind attention


def test_hsdp_bytes_and_memory_by_hand():
    P = 1000.0
    # 8 ranks in groups of 2: reduce-scatter in the group 1/2 x 4P, all-reduce of the P/2 shard over 4 groups
    # 2 x 3/4 x 4 P/2; ZeRO-3's two all-gathers in the group 2 x 1/2 x 2P
    assert PL.data_parallel_bytes(P, 8, 3, shard=2) == (2000 + 3000, 2000)
    assert PL.data_parallel_bytes(P, 8, 3, shard=8) == PL.data_parallel_bytes(P, 8, 3)   # one group: FSDP
    assert PL.data_parallel_bytes(P, 8, 3, param_dtype="fp32", reshard_after_forward=False)[1] == 7 / 8 * 4 * P
    with pytest.raises(ValueError):
        PL.data_parallel_bytes(P, 8, 3, shard=3)
    hw = PL.Hardware("toy", flops=1e6, memory=1e9, intra_node=1e4, network=1e3, gpus_per_node=2)
    hsdp = PL.plan(TINY, PL.Strategy(dp=8, zero=3, shard=2), batch_sequences=8, hardware=hw, mfu=1.0)
    fsdp = PL.plan(TINY, PL.Strategy(dp=8, zero=3), batch_sequences=8, hardware=hw, mfu=1.0)
    assert hsdp.memory.model_state == pytest.approx((2 + 4 + 12) * TINY.params / 2)    # sharded over 2, not 8
    assert fsdp.memory.model_state == pytest.approx((2 + 4 + 12) * TINY.params / 8)
    grads, params = PL.data_parallel_bytes(TINY.params, 8, 3, shard=2)
    in_group = 1 / 2 * 4 * TINY.params                                    # the group of 2 is inside a node
    assert hsdp.comm_s["data"] == pytest.approx(in_group / 1e4 + (grads - in_group) / 1e3 + params / 1e4)
    assert "HSDP" in hsdp.strategy.label()
    assert not PL.plan(TINY, PL.Strategy(dp=8, zero=3, shard=3), batch_sequences=8).feasible
