"""Training-memory accounting: every formula checked against the tensors of a real model and optimizer.

The content notes give mixed-precision Adam as 16P bytes and ZeRO-1/2/3 as 4P + 12P/N,
2P + 14P/N, 16P/N; here the same numbers come out of real parameters, gradients and optimizer
states after a real step, and the saved-for-backward count out of a hand-computed example.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from dlperf import cluster as C
from dlperf import memory as M

D_IN, HIDDEN, D_OUT, BATCH = 12, 20, 8, 7


def mlp(dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, D_OUT)).to(dtype)


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def one_step(model: nn.Module, opt, dtype: torch.dtype = torch.float32) -> None:
    x = torch.randn(BATCH, D_IN, generator=torch.Generator().manual_seed(1)).to(dtype)
    model(x).float().square().mean().backward()
    opt.step()


def test_bytes_per_param_table():
    table = {(o, p): M.bytes_per_param(o, p).model_state for o in ("sgd", "sgd_momentum", "adam")
             for p in ("fp32", "mixed")}
    assert table == {("sgd", "fp32"): 8, ("sgd", "mixed"): 8, ("sgd_momentum", "fp32"): 12,
                     ("sgd_momentum", "mixed"): 12, ("adam", "fp32"): 16, ("adam", "mixed"): 16}
    mixed = M.bytes_per_param("adam", "mixed")
    assert (mixed.params, mixed.grads, mixed.optimizer) == (2, 2, 12)
    assert M.bytes_per_param("adamw", "bf16") == M.bytes_per_param("adam", "fp16") == mixed
    with pytest.raises(ValueError, match="optimizer"):
        M.bytes_per_param("lion")
    with pytest.raises(ValueError, match="precision"):
        M.bytes_per_param("adam", "fp8")


def test_zero_formulas_of_the_notes():
    P = 1_000_003
    for n in (1, 2, 4, 8, 64):
        assert M.zero_memory_bytes(P, n, 0) == 16 * P
        assert M.zero_memory_bytes(P, n, 1) == pytest.approx(4 * P + 12 * P / n)
        assert M.zero_memory_bytes(P, n, 2) == pytest.approx(2 * P + 14 * P / n)
        assert M.zero_memory_bytes(P, n, 3) == pytest.approx(16 * P / n)
    for stage in range(4):  # one rank: nothing to shard
        assert M.zero_memory_bytes(P, 1, stage) == 16 * P
    with pytest.raises(ValueError):
        M.zero_memory_bytes(P, 4, 4)
    with pytest.raises(ValueError):
        M.model_state_bytes(P, n=0)
    # activations are added, not sharded
    b = M.model_state_bytes(P, stage=3, n=8, activations=123.0)
    assert b.activations == 123.0 and b.total == pytest.approx(16 * P / 8 + 123)
    # the cluster's placement still agrees (the formula moved here from dlperf.cluster)
    c = C.Cluster(C.fully_connected(4))
    C.place_zero_states(c, 4 * 1000, 2)
    assert c.memory_bytes(0) == M.zero_memory_bytes(4000, 4, 2)


@pytest.mark.parametrize("name,factory,slots", [
    ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1), 0),
    ("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9), 1),
    ("adam", lambda ps: torch.optim.Adam(ps, lr=1e-3), 2),
    ("adam", lambda ps: torch.optim.AdamW(ps, lr=1e-3), 2),
])
def test_fp32_state_measured_equals_formula(name, factory, slots):
    model = mlp()
    opt = factory(model.parameters())
    one_step(model, opt)
    P = num_params(model)
    measured = M.measure_state_bytes(model, opt)
    formula = M.model_state_bytes(P, optimizer=name, precision="fp32")
    assert (measured.params, measured.grads, measured.optimizer) == (formula.params, formula.grads, formula.optimizer)
    assert measured.optimizer == 4 * slots * P
    # Adam's scalar step counters are the only extra: a few bytes per parameter *tensor*
    n_tensors = len(list(model.parameters()))
    assert measured.other <= 8 * n_tensors
    assert (measured.other > 0) == (name == "adam")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name,cls,kw", [("adam", torch.optim.Adam, {}), ("sgd", torch.optim.SGD, {}),
                                         ("sgd_momentum", torch.optim.SGD, {"momentum": 0.9})])
def test_mixed_precision_state_measured_equals_formula(dtype, name, cls, kw):
    model = mlp(dtype)
    opt = M.MasterWeightOptimizer(model.parameters(), cls, lr=1e-3, **kw)
    one_step(model, opt, dtype)
    P = num_params(model)
    measured = M.measure_state_bytes(model, opt)
    formula = M.model_state_bytes(P, optimizer=name, precision="mixed")
    assert (measured.params, measured.grads, measured.optimizer) == (formula.params, formula.grads, formula.optimizer)
    if name == "adam":
        assert measured.model_state == 16 * P == M.zero_memory_bytes(P, 1, 0)
    assert all(m.grad is None for m in opt.master_params)  # no fp32 gradients stay behind


def test_master_weights_step_matches_fp32_adam():
    """The bf16 model after a master-weight step is the fp32 step, rounded to bf16."""
    ref = mlp()
    low = mlp(torch.bfloat16)
    with torch.no_grad():  # same starting point: the bf16 values, in both
        for r, q in zip(ref.parameters(), low.parameters()):
            r.copy_(q.float())
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2)
    opt_low = M.MasterWeightOptimizer(low.parameters(), torch.optim.Adam, lr=1e-2)
    for r, q in zip(ref.parameters(), low.parameters()):  # identical gradients, given to both
        g = torch.randn(r.shape, generator=torch.Generator().manual_seed(r.numel())).bfloat16()
        r.grad, q.grad = g.float(), g
    opt_ref.step()
    opt_low.step()
    for r, q, m in zip(ref.parameters(), low.parameters(), opt_low.master_params):
        assert torch.equal(m, r.detach())
        assert torch.equal(q.detach(), r.detach().bfloat16())
    opt_low.zero_grad()
    assert all(q.grad is None for q in low.parameters())


def test_zero_sharding_of_real_tensors():
    """Flatten a real mixed-precision Adam state, split it over n ranks, compare with the formula."""
    model = mlp(torch.bfloat16)
    opt = M.MasterWeightOptimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
    one_step(model, opt, torch.bfloat16)
    masters = opt.master_params
    flat = {  # each kind flattened, then split on its own: rank r owns the same elements of each
        "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()]),
        "grads": torch.cat([p.grad.reshape(-1) for p in model.parameters()]),
        "master": torch.cat([m.detach().reshape(-1) for m in masters]),
        "exp_avg": torch.cat([opt.optimizer.state[m]["exp_avg"].reshape(-1) for m in masters]),
        "exp_avg_sq": torch.cat([opt.optimizer.state[m]["exp_avg_sq"].reshape(-1) for m in masters]),
    }
    P = num_params(model)
    assert P % 4 == 0  # so that the formula is exact for n = 1, 2, 4
    for n in (1, 2, 3, 4):
        for stage in range(4):
            sharded = {"params": stage >= 3, "grads": stage >= 2, "master": stage >= 1, "exp_avg": stage >= 1,
                       "exp_avg_sq": stage >= 1}
            per_rank = [sum((t.tensor_split(n)[r] if sharded[k] else t).numel() * t.element_size()
                            for k, t in flat.items()) for r in range(n)]
            formula = M.zero_memory_bytes(P, n, stage)
            if P % n == 0:
                assert per_rank == [formula] * n
            else:  # uneven shards: at most one element of each kind more or less than P/n
                assert all(abs(b - formula) < 16 for b in per_rank) and sum(per_rank) == pytest.approx(n * formula)


def test_zero_communication_matches_the_simulated_ring():
    P, n = 6000, 4
    S = 2 * P
    assert M.zero_communication_bytes(P, 1, 3) == 0
    for stage in range(4):
        c = C.Cluster(C.ring(n))
        grads = [torch.empty(P, dtype=torch.bfloat16, device="meta") for _ in range(n)]
        if stage == 0:
            C.ring_allreduce(c, grads)
        else:
            gathers = 2 if stage == 3 else 1
            shards = [torch.empty(P // n, dtype=torch.bfloat16, device="meta") for _ in range(n)]
            for _ in range(gathers):
                C.ring_all_gather(c, shards)
            C.ring_reduce_scatter(c, grads)
        assert c.bytes_sent == (M.zero_communication_bytes(P, n, stage),) * n
        assert c.bytes_sent[0] == (3 if stage == 3 else 2) * (n - 1) / n * S


def test_saved_tensors_hand_computed():
    """Linear -> ReLU -> Linear on an input that needs no gradient.

    Saved: the input x (the first layer needs it for its weight gradient), ReLU's output (for ReLU's
    backward), and the same ReLU output again as the second layer's input: one storage, counted once.
    """
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(D_IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, D_OUT))
    x = torch.randn(BATCH, D_IN)
    saved = M.saved_tensor_bytes(lambda: net(x).sum(), exclude=net.parameters())
    assert saved.nbytes == 4 * BATCH * (D_IN + HIDDEN)
    assert saved.raw_nbytes == 4 * BATCH * (D_IN + 2 * HIDDEN)
    # in bf16 every activation is half the size
    net16 = net.to(torch.bfloat16)
    saved16 = M.saved_tensor_bytes(lambda: net16(x.bfloat16()).sum(), exclude=net16.parameters())
    assert saved16.nbytes == 2 * BATCH * (D_IN + HIDDEN)
    # activations scale with the batch
    x3 = torch.randn(3 * BATCH, D_IN)
    assert M.saved_tensor_bytes(lambda: net(x3.bfloat16()).sum(), exclude=net.parameters()).nbytes == 3 * saved16.nbytes


def test_saved_tensors_with_checkpointing_keep_only_the_inputs():
    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.ReLU()) for _ in range(4)]
    params = [p for b in blocks for p in b.parameters()]
    x = torch.randn(BATCH, HIDDEN)

    def plain():
        h = x
        for b in blocks:
            h = b(h)
        return h.sum()

    def every_block():
        h = x
        for b in blocks:
            h = checkpoint(b, h, use_reentrant=False)
        return h.sum()

    def pairs():
        h = x
        for i in range(0, 4, 2):
            h = checkpoint(nn.Sequential(*blocks[i:i + 2]), h, use_reentrant=False)
        return h.sum()

    act = 4 * BATCH * HIDDEN  # one activation of the stack
    assert M.saved_tensor_bytes(plain, exclude=params).nbytes == (1 + 4) * act  # x and 4 ReLU outputs
    assert M.saved_tensor_bytes(every_block, exclude=params).nbytes == 4 * act  # the 4 block inputs
    assert M.saved_tensor_bytes(pairs, exclude=params).nbytes == 2 * act  # the 2 segment inputs
    # and the gradients are the same
    grads = []
    for f in (plain, every_block, pairs):
        for p in params:
            p.grad = None
        f().backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in params]))
    assert torch.allclose(grads[0], grads[1]) and torch.allclose(grads[0], grads[2])


def test_measure_counts_shared_storage_once_and_buffers_as_other():
    lin = nn.Linear(4, 4)
    tied = nn.Sequential(lin, nn.ReLU(), lin, nn.BatchNorm1d(4))  # the same layer twice: one set of parameters
    measured = M.measure_state_bytes(tied)
    assert measured.params == 4 * (16 + 4 + 4 + 4)  # lin weight, bias; BatchNorm weight, bias
    assert measured.grads == 0 and measured.optimizer == 0
    assert measured.other == 4 * (4 + 4) + 8  # running mean and variance (fp32), num_batches_tracked (int64)


def test_gpt_layer_activation_formula():
    s, b, h, a = 2048, 1, 4096, 32
    assert M.gpt_layer_activation_bytes(s, b, h, a) == s * b * h * (34 + 5 * a * s / h)
    assert M.gpt_layer_activation_bytes(s, b, h, a, recompute="selective") == 34 * s * b * h
    assert M.gpt_layer_activation_bytes(s, b, h, a, recompute="full") == 2 * s * b * h
    with pytest.raises(ValueError):
        M.gpt_layer_activation_bytes(s, b, h, a, recompute="some")


def test_breakdown_arithmetic():
    a = M.MemoryBreakdown(params=1, grads=2, optimizer=3, activations=4, other=5)
    assert a.model_state == 6 and a.total == 15
    assert (a + a).total == 30 and a.scaled(2).params == 2
    assert "GB" in str(a.scaled(1e9))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_reserved_growth_follows_the_allocator_while_tensors_are_kept():
    kept = []

    def step(i):
        kept.append(torch.empty(2**20, device="cuda"))      # 4 MiB each, all kept alive

    curve, live = M.reserved_growth(step, 8, "cuda")
    assert len(curve) == 8 and curve == sorted(curve) and curve[-1] >= 8 * 4
    assert live >= 8 * 4 and live < 8 * 4 + 2
    kept.clear()
    curve, live = M.reserved_growth(lambda i: torch.empty(2**20, device="cuda"), 8, "cuda")
    assert max(curve) == curve[0] and live <= 4.5          # each freed block is reused: no growth after the first
