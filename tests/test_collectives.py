"""The collectives sweep: nccl-tests' bandwidths by hand, the alpha-beta fit, real gloo sweeps, bad input."""

from __future__ import annotations

import math
import random

import pytest
import torch

from dlperf import cluster
from dlperf import collectives as K

pytestmark = pytest.mark.timeout(240)


# --------------------------------------------------------------------------- bandwidths, by hand


@pytest.mark.parametrize(
    "op, n, nbytes, seconds, algbw, busbw",
    [
        # nccl-tests doc/PERFORMANCE.md: algbw = S/t; busbw = algbw * 2(n-1)/n, (n-1)/n, (n-1)/n, 1, (n-1)/n.
        ("all_reduce", 4, 1e9, 0.01, 100e9, 150e9),  # 100 GB/s * 6/4
        ("all_reduce", 8, 1e9, 0.01, 100e9, 175e9),  # 100 GB/s * 14/8
        ("all_reduce", 2, 5e6, 1e-3, 5e9, 5e9),  # 5 GB/s * 2/2
        ("all_reduce", 1, 5e6, 1e-3, 5e9, 0.0),  # one rank moves nothing
        ("reduce_scatter", 8, 8e8, 0.02, 40e9, 35e9),  # 40 GB/s * 7/8
        ("all_gather", 8, 8e8, 0.02, 40e9, 35e9),
        ("all_gather", 3, 3e6, 1e-3, 3e9, 2e9),  # 3 GB/s * 2/3
        ("broadcast", 3, 3e6, 1e-3, 3e9, 3e9),  # factor 1
        ("all_to_all", 4, 4e6, 2e-3, 2e9, 1.5e9),  # 2 GB/s * 3/4
    ],
)
def test_algbw_and_busbw_are_nccl_tests_definitions(op, n, nbytes, seconds, algbw, busbw):
    assert K.algbw(nbytes, seconds) == pytest.approx(algbw, rel=1e-12)
    assert K.busbw(op, nbytes, seconds, n) == pytest.approx(busbw, rel=1e-12, abs=1e-9)


def test_a_rows_bandwidths_use_its_median_time_and_its_ops_size():
    # all_gather of S = 4 MB (the gathered size) on 4 ranks, median 2 ms: algbw 2 GB/s, busbw 1.5 GB/s.
    row = K.Row("all_gather", 4_000_000, 1_000_000, "float32", 4, "gloo", times=(0.001, 0.002, 0.009))
    assert row.time == 0.002
    assert row.algbw == pytest.approx(2e9) and row.busbw == pytest.approx(1.5e9)
    rec = row.record()
    assert rec["iters"] == 3 and rec["busbw"] == pytest.approx(1.5e9) and "times" not in rec


def test_sizes_follow_nccl_tests_meaning_of_S():
    # 1000 bytes of float32 on 3 ranks: 250 elements; the three ops with per-rank blocks round to 249.
    assert K._shapes("all_reduce", 1000, 3, 4) == (250, 250, 1000)
    assert K._shapes("broadcast", 1000, 3, 4) == (250, 250, 1000)
    assert K._shapes("reduce_scatter", 1000, 3, 4) == (249, 83, 996)  # S = whole input, n * recvcount
    assert K._shapes("all_gather", 1000, 3, 4) == (83, 249, 996)  # S = whole output, n * sendcount
    assert K._shapes("all_to_all", 1000, 3, 4) == (249, 249, 996)  # S = whole send buffer
    assert K._shapes("all_gather", 4, 3, 4) == (1, 3, 12)  # at least one element per rank


# --------------------------------------------------------------------------- expected values


def _by_hand(op: str, n: int, numel: int) -> list[torch.Tensor]:
    """What each rank must hold, from the inputs of all ranks with plain tensor arithmetic."""
    ins = [K.input_for(op, r, n, numel) for r in range(n)]
    if op == "all_reduce":
        return [sum(ins)] * n
    if op == "reduce_scatter":
        return list(sum(ins).chunk(n))
    if op == "all_gather":
        return [torch.cat(ins)] * n
    if op == "broadcast":
        return [ins[0]] * n
    return [torch.cat([ins[j].chunk(n)[r] for j in range(n)]) for r in range(n)]  # all_to_all


@pytest.mark.parametrize("op", K.OPS)
def test_expected_outputs_are_what_the_collective_computes(op):
    n, numel = 3, 12
    for rank, want in enumerate(_by_hand(op, n, numel)):
        assert torch.equal(K.expected_output(op, rank, n, numel), want), (op, rank)
    # the inputs differ between ranks, so a collective that mixed them up would be caught
    assert not torch.equal(K.input_for(op, 1, n, numel), K.input_for(op, 2, n, numel))


def test_all_to_all_expectation_is_not_its_transpose():
    n, numel = 3, 9
    own = K.expected_output("all_to_all", 1, n, numel)
    sent = K.input_for("all_to_all", 1, n, numel)  # what a no-op "exchange" would leave
    assert not torch.equal(own, sent)
    assert own.tolist()[:3] == [3 + 0 * 3 + 1, 4 + 1, 5 + 1]  # block from rank 0: base[3:6] + 0*3 + 1


# --------------------------------------------------------------------------- the fit


def _ring_allreduce_times(n, sizes, alpha, beta):
    return [2 * (n - 1) * alpha + 2 * (n - 1) / n * s / beta for s in sizes]


SIZES = [8 * 4**k for k in range(12)]  # 8 B .. 33 MB


@pytest.mark.parametrize("relative", [True, False])
def test_fit_recovers_alpha_and_beta_from_exact_timings(relative):
    n, alpha, beta = 4, 20e-6, 5e9
    fit = K.fit_alpha_beta("all_reduce", n, SIZES, _ring_allreduce_times(n, SIZES, alpha, beta), relative=relative)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6) and fit.beta == pytest.approx(beta, rel=1e-6)
    assert all(c["ratio"] == pytest.approx(1.0, abs=1e-6) for c in fit.compare())


def test_fit_uses_each_ops_step_count():
    # reduce-scatter on 8 ranks: 7 alpha + 7/8 S / beta
    alpha, beta = 3e-6, 40e9
    times = [7 * alpha + 7 / 8 * s / beta for s in SIZES]
    fit = K.fit_alpha_beta("reduce_scatter", 8, SIZES, times)
    assert fit.alpha == pytest.approx(alpha, rel=1e-6) and fit.beta == pytest.approx(beta, rel=1e-6)
    # broadcast on 2 ranks: alpha + S / beta; all_to_all on 4: 3 alpha + 3/4 S / beta
    fit = K.fit_alpha_beta("broadcast", 2, SIZES, [alpha + s / beta for s in SIZES])
    assert fit.alpha == pytest.approx(alpha, rel=1e-6) and fit.beta == pytest.approx(beta, rel=1e-6)
    fit = K.fit_alpha_beta("all_to_all", 4, SIZES, [3 * alpha + 0.75 * s / beta for s in SIZES])
    assert fit.alpha == pytest.approx(alpha, rel=1e-6) and fit.beta == pytest.approx(beta, rel=1e-6)


def test_fit_of_noisy_timings_is_close():
    n, alpha, beta = 2, 150e-6, 1.2e9
    rng = random.Random(7)
    times = [t * math.exp(rng.gauss(0, 0.05)) for t in _ring_allreduce_times(n, SIZES, alpha, beta)]
    fit = K.fit_alpha_beta("all_reduce", n, SIZES, times)
    assert fit.alpha == pytest.approx(alpha, rel=0.15) and fit.beta == pytest.approx(beta, rel=0.15)
    assert 0.8 < fit.worst_ratio < 1.25


def test_fit_without_latency_clamps_alpha_at_zero():
    times = [s / 2e9 for s in SIZES]  # pure bandwidth, 2 ranks: t = S / beta
    times[0] *= 0.9  # noise that would make the best intercept negative
    fit = K.fit_alpha_beta("all_reduce", 2, SIZES, times)
    assert fit.alpha == 0.0 and fit.beta == pytest.approx(2e9, rel=0.02)  # one point 10% low of 12


@pytest.mark.parametrize("op", ["all_reduce", "reduce_scatter", "all_gather"])
def test_predictions_agree_with_the_simulated_ring(op):
    """The fitted model's closed form against the simulator running the ring step by step."""
    n, numel, alpha, beta = 4, 4096, 7e-6, 3e9
    nbytes = 4 * numel
    c = cluster.Cluster(cluster.ring(n, alpha=alpha, beta=beta))
    tensors = [torch.ones(numel) for _ in range(n)]
    if op == "all_reduce":
        cluster.ring_allreduce(c, tensors)
    elif op == "reduce_scatter":
        cluster.ring_reduce_scatter(c, tensors)
    else:
        cluster.ring_all_gather(c, [t[: numel // n] for t in tensors])  # S = the gathered size
    assert K.predict(op, n, nbytes, alpha, beta) == pytest.approx(c.time, rel=1e-12)


# --------------------------------------------------------------------------- real sweeps on gloo


def test_a_real_two_rank_gloo_sweep():
    sizes = [8, 64, 1024, 16384]
    s = K.sweep(2, sizes=sizes, warmup=1, iters=3, backend="gloo", start_method="fork", timeout=120)
    assert s.backend == "gloo" and s.ranks == 2 and s.meta["same_on_every_rank"]
    assert s.ops == list(K.OPS)
    for op in K.OPS:
        rows = s.select(op)
        assert [r.nbytes for r in rows] == sizes  # all divisible by 2 ranks x 4 bytes: nothing rounded
        assert [r.count for r in rows] == [2, 16, 256, 4096]  # strictly growing with the size
        for r in rows:
            # gloo in torch 2.13 runs all five; a backend that cannot says so in the row instead
            assert r.status == "ok", (op, r.status, r.note)
            assert len(r.times) == 3 and all(t > 0 for t in r.times)
            assert r.wrong == 0  # the values were checked against the written-out sums on both ranks
            assert r.busbw == pytest.approx(r.nbytes / r.time * K.busbw_factor(op, 2))
    text = s.table()
    assert text.count("#wrong") == 5 and "16384" in text
    assert len(s.records()) == 20


def test_a_wrong_collective_and_an_unsupported_one_are_reported(monkeypatch):
    """Forked workers inherit the patches: a wrong expectation is counted; an op that raises is unsupported."""
    real_expected, real_call = K.expected_output, K._call

    def off_by_one(op, rank, n, numel, dtype=torch.float32):
        out = real_expected(op, rank, n, numel, dtype)
        return out + 1 if op == "all_reduce" else out

    def gloo_without_broadcast(op):
        if op == "broadcast":
            def refuse(i, o):
                raise RuntimeError("ProcessGroupGloo does not support broadcast (pretend)")
            return refuse
        return real_call(op)

    monkeypatch.setattr(K, "expected_output", off_by_one)
    monkeypatch.setattr(K, "_call", gloo_without_broadcast)
    s = K.sweep(2, ops=["all_reduce", "broadcast"], sizes=[64], warmup=0, iters=2, backend="gloo",
                start_method="fork", timeout=120)
    (ar,) = s.select("all_reduce")
    assert ar.wrong == 2 * 2 * 16  # 16 elements, checked twice, on each of 2 ranks
    (bc,) = s.select("broadcast")
    assert bc.status == "unsupported" and "does not support broadcast" in bc.note
    assert bc.times == () and math.isnan(bc.busbw)
    assert s.unsupported() == {"broadcast": bc.note}
    assert "unsupported: ProcessGroupGloo" in s.table()
    with pytest.raises(ValueError, match="no measured rows for broadcast"):
        s.fit("broadcast")


def test_command_line_prints_the_table(capsys):
    code = K.main(["--ranks", "2", "-b", "64", "-e", "256", "-f", "4", "--ops", "all_reduce", "all_gather",
                   "--warmup", "1", "--iters", "3", "--backend", "gloo"])
    out = capsys.readouterr().out
    assert code == 0
    assert "# all_reduce" in out and "# all_gather" in out and "busbw" in out and "alpha-beta fit" in out
    assert [line.split()[0] for line in out.splitlines() if line[:1] != "#"] == ["64", "256"] * 2


# --------------------------------------------------------------------------- bad input


def test_bad_input_gets_clear_errors():
    with pytest.raises(ValueError, match="unknown collective 'allreduce'"):
        K.busbw_factor("allreduce", 2)
    with pytest.raises(ValueError, match="positive integer"):
        K.busbw_factor("all_reduce", 0)
    with pytest.raises(ValueError, match="positive, finite"):
        K.algbw(100, 0.0)
    with pytest.raises(ValueError, match=">= 0 bytes"):
        K.algbw(-1, 1.0)
    with pytest.raises(ValueError, match="two distinct"):
        K.fit_alpha_beta("all_reduce", 2, [8, 8], [1e-3, 1e-3])
    with pytest.raises(ValueError, match="at least 2 ranks"):
        K.fit_alpha_beta("all_reduce", 1, [8, 16], [1e-3, 2e-3])
    with pytest.raises(ValueError, match="do not grow"):
        K.fit_alpha_beta("all_reduce", 2, [8, 1 << 20], [2e-3, 1e-3])
    with pytest.raises(ValueError, match="2 sizes but 1 times"):
        K.fit_alpha_beta("all_reduce", 2, [8, 16], [1e-3])
    with pytest.raises(ValueError, match="min_bytes <= max_bytes"):
        K.message_sizes(64, 8)
    with pytest.raises(ValueError, match="at least 2"):
        K.message_sizes(8, 64, 1)
    with pytest.raises(ValueError, match="not a size"):
        K.parse_size("12X")
    assert K.parse_size("64M") == 64 * 2**20 and K.parse_size("1K") == 1024 and K.parse_size("8") == 8
    assert K.message_sizes(8, 64, 2) == [8, 16, 32, 64]
    with pytest.raises(ValueError, match="positive integer"):
        K.sweep(0)
    with pytest.raises(ValueError, match="unknown collective"):
        K.sweep(2, ops=["all_reduce", "alltoall"])
    with pytest.raises(ValueError, match="sizes must be positive"):
        K.sweep(2, sizes=[0])
    with pytest.raises(ValueError, match="dtype"):
        K.sweep(2, dtype="int8")
    with pytest.raises(ValueError, match="has no times"):
        _ = K.Row("all_reduce", 8, 2, "float32", 2, "gloo", status="unsupported").measurement
    with pytest.raises(ValueError, match="alpha must be >= 0"):
        K.predict("all_reduce", 2, 8, -1.0, 1e9)


# --------------------------------------------------------------------------- GPUs


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs at least 2 CUDA devices (one per NCCL rank)")
def test_a_real_nccl_sweep():
    s = K.sweep(2, sizes=[1024, 1 << 20], warmup=2, iters=5, backend="nccl")
    assert s.backend == "nccl" and s.meta["same_on_every_rank"]
    assert all(r.ok and r.wrong == 0 and r.busbw > 0 for r in s.rows)


def test_the_tensor_forms_fall_back_to_the_names_of_older_torch(monkeypatch):
    # torch 2.13 renamed all_gather_into_tensor / reduce_scatter_tensor to *_single; the GPU machines' 2.11 has
    # only the old names (the model-parallelism chapter failed there on 2026-11-26 for calling the new one).
    import torch.distributed as dist

    from dlperf.collectives import all_gather_into, reduce_scatter_into

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        for new in ("all_gather_single", "reduce_scatter_single"):
            monkeypatch.delattr(dist, new, raising=False)
        called = []
        for old in ("all_gather_into_tensor", "reduce_scatter_tensor"):
            real = getattr(dist, old)
            monkeypatch.setattr(dist, old, lambda *a, _real=real, _name=old, **k: called.append(_name) or _real(*a, **k))
        out = torch.empty(3)
        all_gather_into(out, torch.arange(3.0))
        assert out.tolist() == [0.0, 1.0, 2.0]
        if hasattr(dist, "reduce_scatter_tensor"):
            got = torch.empty(3)
            reduce_scatter_into(got, torch.arange(3.0) * 2)
            assert got.tolist() == [0.0, 2.0, 4.0]
        assert called[0] == "all_gather_into_tensor"
    finally:
        dist.destroy_process_group()
