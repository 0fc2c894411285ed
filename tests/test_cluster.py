"""The simulated cluster: values, exact accounting, closed forms, the worked examples, the trace.

Every formula of the content notes ("Formulas (check each one in code)") is checked here
against the simulator: ring allreduce / reduce-scatter / all-gather times and bytes, the
naive method's 2(n-1)S through the root, busbw factors, the parameter-server worked
example (60 / 80 / 15 / ~6 ms) and the ZeRO memory formulas.
"""

from __future__ import annotations

import inspect
import math

import pytest
import torch

from dlperf import cluster as C
from dlperf import memory as M

ALPHA, BETA = 3e-6, 10e9


def inputs(n: int, numel: int, dtype: torch.dtype, shape: tuple[int, ...] | None = None, seed: int = 0):
    """One tensor per rank; integers for int64, normal values otherwise."""
    g = torch.Generator().manual_seed(seed + 97 * n + numel)
    shape = shape or (numel,)
    if dtype == torch.int64:
        return [torch.randint(-1000, 1000, shape, generator=g) for _ in range(n)]
    return [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype) for _ in range(n)]


def close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> bool:
    """Elementwise ``|a - b| <= atol + rtol |b|`` in float64 (``torch.testing.assert_close``'s first call
    imports torch.distributed.tensor, seconds on a loaded 2-core machine)."""
    a, b = a.double(), b.double()
    return a.shape == b.shape and bool(((a - b).abs() <= atol + rtol * b.abs()).all())


def check_sum(outs, xs):
    """Every rank holds the true sum, in the input's dtype and shape, bit-identical across ranks."""
    n = len(xs)
    ref = torch.stack([x.double() for x in xs]).sum(0)
    for out in outs:
        assert out.dtype == xs[0].dtype and out.shape == xs[0].shape
        assert torch.equal(out, outs[0]), "ranks disagree"
    out = outs[0]
    if xs[0].dtype == torch.int64:
        assert torch.equal(out, ref.long())
    elif xs[0].dtype == torch.float64:
        assert close(out, ref, rtol=1e-12, atol=1e-12)
    elif xs[0].dtype == torch.float32:
        assert close(out, ref, rtol=1e-5, atol=1e-5)
    else:  # bfloat16: n-1 roundings of at most 2^-8 relative, each bounded by sum |x_i|
        bound = n * 2.0**-8 * torch.stack([x.double().abs() for x in xs]).sum(0)
        assert bool(((out.double() - ref).abs() <= bound + 1e-30).all())


def run_allreduce(name: str, n: int, xs):
    """Run a reference allreduce on a fully connected cluster (every algorithm has its routes there)."""
    c = C.Cluster(C.fully_connected(n, beta=BETA, alpha=ALPHA))
    if name == "ring":
        outs = C.ring_allreduce(c, xs)
    elif name == "tree":
        outs = C.tree_allreduce(c, xs)
    elif name == "naive":
        outs = C.naive_allreduce(c, xs)
    elif name == "sharded_ps":
        outs = C.parameter_server_allreduce(c, xs)
    elif name == "multi_ring":  # two rings: forwards and backwards (disjoint directed links)
        outs = C.multi_ring_allreduce(c, xs, rings=[range(n), [0, *range(n - 1, 0, -1)]])
    else:
        raise ValueError(name)
    return c, outs


DTYPES = [torch.float32, torch.float64, torch.int64, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", ["ring", "tree", "naive", "sharded_ps", "multi_ring"])
def test_allreduce_values_are_the_true_sum(name, dtype):
    for n in range(1, 9):
        for numel, shape in ((1, None), (13, None), (8 * 3 + 5, None), (15, (3, 5))):
            xs = inputs(n, numel, dtype, shape)
            before = [x.clone() for x in xs]
            c, outs = run_allreduce(name, n, xs)
            check_sum(outs, xs)
            assert all(torch.equal(x, b) for x, b in zip(xs, before)), "inputs were modified"
            # outputs are fresh tensors: neither views of the inputs nor of each other
            firsts = [out.view(-1)[0].clone() for out in outs]
            for out in outs:
                out.view(-1)[0] += 1
            assert all(torch.equal(out.view(-1)[0], f + 1) for out, f in zip(outs, firsts)), "outputs share memory"
            assert all(torch.equal(x, b) for x, b in zip(xs, before)), "outputs alias the inputs"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_scatter_all_gather_broadcast_reduce_values(dtype):
    for n in range(1, 9):
        for numel in (1, 11, 3 * n + 2):
            xs = inputs(n, numel, dtype)
            c = C.Cluster(C.ring(n, beta=BETA, alpha=ALPHA))
            parts = C.ring_reduce_scatter(c, xs)
            full = C.ring_all_gather(c, parts)
            check_sum(full, xs)
            expected_chunks = torch.stack([x.double() for x in xs]).sum(0).tensor_split(n)
            for p, e in zip(parts, expected_chunks):
                assert p.dtype == dtype and p.shape == e.shape
            assert c.steps == 2 * (n - 1)
            # pipelined reduce / broadcast along the ring
            total = C.pipelined_reduce(c, xs, root=n // 2, chunks=3)
            copies = C.pipelined_broadcast(c, total, root=n // 2, chunks=3)
            check_sum(copies, xs)


def test_n_equals_one_moves_nothing():
    x = torch.arange(5.0)
    for topo in (C.ring(1), C.fully_connected(1), C.pcie_switch(1), C.multi_machine(1, 1)):
        c = C.Cluster(topo)
        for f in (C.ring_allreduce, C.tree_allreduce, C.naive_allreduce, C.parameter_server_allreduce,
                  C.ring_reduce_scatter, C.ring_all_gather, C.pipelined_reduce):
            out = f(c, [x])
            out = out if isinstance(out, torch.Tensor) else out[0]
            assert torch.equal(out, x) and out.data_ptr() != x.data_ptr()
        assert torch.equal(C.pipelined_broadcast(c, x)[0], x)
        assert torch.equal(C.multi_ring_allreduce(c, [x])[0], x)
        assert c.steps == 0 and c.time == 0 and c.bytes_sent == (0,) and c.trace == ()
    assert C.ring_allreduce_time(1, 100, ALPHA, BETA) == 0
    assert C.naive_allreduce_time(1, 100, ALPHA, BETA) == 0 == C.tree_allreduce_time(1, 100, ALPHA, BETA)
    assert C.ring_allreduce_bytes_sent(1, 10, 4) == [0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=str)
def test_ring_allreduce_steps_and_bytes_are_exact(dtype):
    for n in range(1, 9):
        for numel in (1, n, 7, 8 * n, 8 * n + 3, 101):
            xs = inputs(n, numel, dtype)
            c = C.Cluster(C.ring(n, beta=BETA, alpha=ALPHA))
            C.ring_allreduce(c, xs)
            esize = xs[0].element_size()
            S = numel * esize
            chunk = [len(t) * esize for t in torch.empty(numel).tensor_split(n)]
            assert c.steps == 2 * (n - 1)
            assert c.messages_sent == (2 * (n - 1),) * n == c.messages_received
            # each rank sends every chunk but its own in the reduce-scatter, every chunk but the next in the all-gather
            expected = [2 * S - chunk[p] - chunk[(p + 1) % n] for p in range(n)] if n > 1 else [0]
            assert list(c.bytes_sent) == expected == C.ring_allreduce_bytes_sent(n, numel, esize)
            assert sum(c.bytes_sent) == sum(c.bytes_received) == 2 * (n - 1) * S
            if numel % n == 0:
                assert c.bytes_sent == (2 * (n - 1) * S // n,) * n
            # the trace: one message per rank per step, each the size of a chunk, from rank p to p + 1
            for step in c.trace:
                assert sorted(t.src for t in step.transfers) == list(range(n))
                assert all(t.dst == (t.src + 1) % n and t.nbytes in chunk for t in step.transfers)
            for r in range(n):
                assert sum(t.nbytes for s in c.trace for t in s.transfers if t.src == r) == c.bytes_sent[r]


def test_simulated_times_equal_the_closed_forms_on_uniform_topologies():
    for n in range(1, 9):
        numel = 12 * 35 * 8  # divisible by every n in 1..8
        xs = inputs(n, numel, torch.float32)
        S = numel * 4
        for topo in (C.ring(n, beta=BETA, alpha=ALPHA), C.fully_connected(n, beta=BETA, alpha=ALPHA),
                     C.pcie_switch(n, beta=BETA, alpha=ALPHA)):
            c = C.Cluster(topo)
            C.ring_allreduce(c, xs)
            assert c.time == pytest.approx(C.ring_allreduce_time(n, S, ALPHA, BETA), rel=1e-12)
            assert c.clocks == pytest.approx((c.time,) * n, rel=1e-12)  # every rank busy all along
        c = C.Cluster(C.ring(n, beta=BETA, alpha=ALPHA))
        parts = C.ring_reduce_scatter(c, xs)
        assert c.time == pytest.approx(C.ring_reduce_scatter_time(n, S, ALPHA, BETA), rel=1e-12)
        assert c.steps == n - 1 and sum(c.bytes_sent) == (n - 1) * S
        c.reset()
        C.ring_all_gather(c, parts)
        assert c.time == pytest.approx(C.ring_all_gather_time(n, S, ALPHA, BETA), rel=1e-12)
        c = C.Cluster(C.fully_connected(n, beta=BETA, alpha=ALPHA))
        C.tree_allreduce(c, xs)
        assert c.time == pytest.approx(C.tree_allreduce_time(n, S, ALPHA, BETA), rel=1e-12)
        assert c.steps == 2 * (n.bit_length() - 1)
        c = C.Cluster(C.pcie_switch(n, beta=BETA, alpha=ALPHA))
        C.naive_allreduce(c, xs)
        assert c.time == pytest.approx(C.naive_allreduce_time(n, S, ALPHA, BETA), rel=1e-12)
        assert c.steps == (2 if n > 1 else 0)
        c.reset()
        C.parameter_server_allreduce(c, xs)  # every GPU serves 1/n: the sharded scheme
        assert c.time == pytest.approx(C.parameter_server_time(n, n, S, ALPHA, BETA, colocated=True), rel=1e-12)
        for m in (1, 4, 7):
            c = C.Cluster(C.ring(n, beta=BETA, alpha=ALPHA))
            total = C.pipelined_reduce(c, xs, chunks=m)
            assert c.time == pytest.approx(C.pipelined_broadcast_time(n, S, ALPHA, BETA, m), rel=1e-12)
            c.reset()
            C.pipelined_broadcast(c, total, chunks=m)
            assert c.steps == (m + n - 2 if n > 1 else 0)
            assert c.time == pytest.approx(C.pipelined_broadcast_time(n, S, ALPHA, BETA, m), rel=1e-12)


def test_parameter_server_closed_form_with_separate_and_colocated_servers():
    numel = 2 * 3 * 4 * 5 * 7
    S = numel * 8  # float64
    for workers, servers, server_beta in ((4, 1, BETA), (4, 2, BETA), (3, 3, 2 * BETA), (6, 2, BETA / 4),
                                          (2, 5, BETA)):
        c = C.Cluster(C.parameter_server(workers, servers, worker_beta=BETA, server_beta=server_beta, alpha=ALPHA))
        xs = inputs(workers, numel, torch.float64)
        check_sum(C.parameter_server_allreduce(c, xs), xs)
        assert c.time == pytest.approx(
            C.parameter_server_time(workers, servers, S, ALPHA, BETA, server_beta=server_beta), rel=1e-12)
        assert c.steps == 2
        for w in range(workers):
            assert c.bytes_sent[w] == S == c.bytes_received[w]
    for workers, servers in ((5, 1), (5, 2), (6, 3), (4, 4)):  # servers are the first `servers` workers
        c = C.Cluster(C.pcie_switch(workers, beta=BETA, alpha=ALPHA))
        xs = inputs(workers, numel, torch.float64)
        check_sum(C.parameter_server_allreduce(c, xs, servers=range(servers)), xs)
        assert c.time == pytest.approx(
            C.parameter_server_time(workers, servers, S, ALPHA, BETA, colocated=True), rel=1e-12)
    # one server colocated on rank 0 is the naive method
    assert C.parameter_server_time(4, 1, S, ALPHA, BETA, colocated=True) == pytest.approx(
        C.naive_allreduce_time(4, S, ALPHA, BETA))


def test_naive_method_moves_2_n_minus_1_S_through_the_root():
    for n in range(2, 9):
        xs = inputs(n, 10, torch.float32)
        S = 40
        c = C.Cluster(C.pcie_switch(n, beta=BETA, alpha=ALPHA))
        C.naive_allreduce(c, xs)
        assert c.bytes_received[0] == (n - 1) * S == c.bytes_sent[0]
        assert c.bytes_sent[0] + c.bytes_received[0] == 2 * (n - 1) * S
        assert all(c.bytes_sent[r] == S == c.bytes_received[r] for r in range(1, n))
        # the root's switch port carries it all; every other port carries S each way
        assert c.link_bytes[("switch", 0)] == (n - 1) * S == c.link_bytes[(0, "switch")]
        # a ring rank sends under 2S whatever n: the root of the naive method is the hot spot
        assert max(C.ring_allreduce_bytes_sent(n, 10, 4)) < 2 * S <= 2 * (n - 1) * S


def test_worked_parameter_server_example():
    ex = C.parameter_server_example()
    for key, ms in (("gpu0", 60), ("cpu", 80), ("sharded", 15)):
        e = ex[key]
        assert round(e.simulated_s * 1e3) == ms == round(e.stated_s * 1e3)
        assert e.simulated_s == pytest.approx(e.stated_s, rel=1e-12)
        assert e.formula_s == pytest.approx(e.stated_s, rel=1e-12)
        assert e.cluster.steps == 2
    assert ex["gpu0"].cluster.bytes_received[0] == 3 * 160_000_000
    assert ex["cpu"].cluster.bytes_received[4] == 4 * 160_000_000
    assert ex["sharded"].cluster.bytes_sent == (2 * 3 * 40_000_000,) * 4  # 3 quarters pushed, 3 pulled
    ring = ex["ring_nvlink"]
    n, S = 8, 160e6
    assert ring.stated_s == pytest.approx(2 * S / (3 * 18e9)) and round(ring.stated_s * 1e3) == 6
    # the simulator keeps (n-1)/n = 7/8, which the source rounds to 1
    assert ring.simulated_s == pytest.approx(ring.formula_s, rel=1e-5)
    assert ring.formula_s == pytest.approx(C.ring_allreduce_time(n, S, 0.0, 54e9))
    assert ring.formula_s * n / (n - 1) == pytest.approx(ring.stated_s)
    assert ring.cluster.steps == 2 * (n - 1)
    assert sum(ring.cluster.bytes_sent) == 2 * (n - 1) * 160_000_000
    # the gradients never existed: the example runs on meta tensors
    assert ring.cluster.topology.name == "dgx1_double_ring"


def test_busbw_factors_and_busbw_equals_link_bandwidth():
    assert C.busbw_factor(8, "allreduce") == pytest.approx(2 * 7 / 8)
    assert C.busbw_factor(8, "reduce_scatter") == C.busbw_factor(8, "all_gather") == pytest.approx(7 / 8)
    assert C.busbw_factor(8, "broadcast") == C.busbw_factor(8, "reduce") == 1
    assert C.bus_bandwidth(10.0, 4) == pytest.approx(15.0)
    assert C.algorithm_bandwidth(100, 4) == 25
    with pytest.raises(ValueError):
        C.busbw_factor(4, "alltoall")
    numel = 8 * 105
    S = numel * 4
    for n in range(2, 9):
        xs = inputs(n, numel, torch.float32)
        c = C.Cluster(C.ring(n, beta=BETA, alpha=0.0))
        C.ring_allreduce(c, xs)
        assert C.bus_bandwidth(C.algorithm_bandwidth(S, c.time), n, "allreduce") == pytest.approx(BETA, rel=1e-12)
        c.reset()
        parts = C.ring_reduce_scatter(c, xs)
        assert C.bus_bandwidth(S / c.time, n, "reduce_scatter") == pytest.approx(BETA, rel=1e-12)
        c.reset()
        C.ring_all_gather(c, parts)
        assert C.bus_bandwidth(S / c.time, n, "all_gather") == pytest.approx(BETA, rel=1e-12)
    # broadcast and reduce: factor 1, reached by pipelining (the chain's n-2 extra steps fade away)
    n, m = 4, 200
    x = torch.zeros(m * 10)
    c = C.Cluster(C.ring(n, beta=BETA, alpha=0.0))
    C.pipelined_broadcast(c, x, chunks=m)
    busbw = C.bus_bandwidth(x.numel() * 4 / c.time, n, "broadcast")
    assert busbw == pytest.approx(BETA * m / (n - 2 + m), rel=1e-12) and busbw > 0.99 * BETA
    c.reset()
    C.pipelined_reduce(c, [x] * n, chunks=m)
    assert C.bus_bandwidth(x.numel() * 4 / c.time, n, "reduce") == pytest.approx(busbw, rel=1e-12)


def link_totals_match(c: C.Cluster) -> None:
    for r in range(c.n):
        assert sum(b for (u, _), b in c.link_bytes.items() if u == r) == c.bytes_sent[r]
        assert sum(b for (_, v), b in c.link_bytes.items() if v == r) == c.bytes_received[r]
        assert sum(m for (u, _), m in c.link_messages.items() if u == r) == c.messages_sent[r]
        assert sum(m for (_, v), m in c.link_messages.items() if v == r) == c.messages_received[r]
    nodes = {u for u, _ in c.link_bytes if isinstance(u, str)}
    for node in nodes:  # switches and network cards forward all they receive
        assert sum(b for (u, _), b in c.link_bytes.items() if u == node) == \
            sum(b for (_, v), b in c.link_bytes.items() if v == node)


def test_per_link_bytes_add_up_to_per_rank_totals():
    xs8 = inputs(8, 37, torch.float32)
    cases = [
        (C.pcie_switch(8), lambda c: C.naive_allreduce(c, xs8)),
        (C.pcie_switch(8), lambda c: C.ring_allreduce(c, xs8)),
        (C.pcie_switch(7, cpu=True), lambda c: C.parameter_server_allreduce(c, xs8[:7])),
        (C.parameter_server(6, 2), lambda c: C.parameter_server_allreduce(c, xs8[:6])),
        (C.dgx1_double_ring(), lambda c: C.multi_ring_allreduce(c, xs8)),
        (C.multi_machine(2, 4), lambda c: C.ring_allreduce(c, xs8)),
        (C.multi_machine(4, 2), lambda c: C.tree_allreduce(c, xs8)),
        (C.fully_connected(8), lambda c: C.parameter_server_allreduce(c, xs8, servers=[1, 5])),
    ]
    for topo, run in cases:
        c = C.Cluster(topo)
        run(c)
        assert c.steps > 0
        link_totals_match(c)


def test_trace_replays_step_by_step():
    n = 5
    xs = inputs(n, 23, torch.float32)
    seen = []
    c = C.Cluster(C.ring(n, beta=BETA, alpha=ALPHA), on_step=seen.append)
    C.ring_allreduce(c, xs)
    assert tuple(seen) == c.trace and [s.index for s in c.trace] == list(range(2 * (n - 1)))
    assert "chunk" in c.trace[0].transfers[0].note
    assert [s.label for s in c.trace] == [f"reduce-scatter {k}/{n - 1}" for k in range(1, n)] + \
        [f"all-gather {k}/{n - 1}" for k in range(1, n)]
    # on a fresh cluster of the same topology: the same steps, clocks and counters, one at a time
    fresh = C.Cluster(C.ring(n, beta=BETA, alpha=ALPHA))
    clocks = []
    for i, step in enumerate(fresh.replay(c.trace)):
        assert step == c.trace[i] and fresh.steps == i + 1
        clocks.append(fresh.time)
    assert clocks == sorted(clocks) and fresh.time == c.time
    for attr in ("bytes_sent", "bytes_received", "messages_sent", "link_bytes", "clocks"):
        assert getattr(fresh, attr) == getattr(c, attr)
    # the same trace costed on another topology: same bytes, new times
    other = C.Cluster(C.pcie_switch(n, beta=BETA / 2, alpha=ALPHA))
    list(other.replay(c.trace))
    assert other.bytes_sent == c.bytes_sent and other.steps == c.steps
    assert other.time > c.time
    # a trace a ring cannot carry is refused
    naive = C.Cluster(C.pcie_switch(n))
    C.naive_allreduce(naive, xs)
    with pytest.raises(ValueError, match="no route"):
        list(C.Cluster(C.ring(n)).replay(naive.trace))


def test_send_recv_step_semantics():
    c = C.Cluster(C.ring(4, beta=BETA, alpha=ALPHA))
    x = torch.arange(4, dtype=torch.float32)
    with c.step("first"):
        c.send(0, 1, x, note="hello")
        x += 100  # the message was copied when sent
        with pytest.raises(RuntimeError, match="delivered when their step ends"):
            c.recv(0, 1)
        with pytest.raises(RuntimeError, match="do not nest"):
            with c.step():
                pass
    assert torch.equal(c.recv(0, 1), torch.arange(4, dtype=torch.float32))
    with pytest.raises(RuntimeError, match="no message"):
        c.recv(0, 1)
    assert c.steps == 1 and c.trace[0].label == "first" and c.trace[0].transfers[0].note == "hello"
    # outside a step, a send is a step of its own; messages between a pair arrive in order; tags separate streams
    c.send(1, 2, torch.tensor([1]))
    c.send(1, 2, torch.tensor([2]))
    c.send(1, 2, torch.tensor([3]), tag="grad")
    assert c.steps == 4
    assert c.recv(1, 2, tag="grad").item() == 3 and c.recv(1, 2).item() == 1 and c.recv(1, 2).item() == 2
    # an empty step counts nothing; a failing step is dropped
    with c.step():
        pass
    with pytest.raises(KeyError):
        with c.step():
            c.send(2, 3, x)
            raise KeyError("student bug")
    assert c.steps == 4 and c.bytes_sent[2] == 0
    with pytest.raises(ValueError, match="itself"):
        c.send(2, 2, x)
    with pytest.raises(ValueError, match="no route"):
        c.send(0, 2, x)  # not neighbours on a ring: rank 1 must forward it
    with pytest.raises(ValueError):
        c.send(0, 7, x)
    with pytest.raises(TypeError):
        c.send(0, 1, [1.0])
    got = c.exchange([(0, 1, x), C.Message(1, 0, x[:2], "half")])
    assert torch.equal(got[0], x) and torch.equal(got[1], x[:2]) and c.steps == 5


def test_clocks_contention_and_waiting():
    S = 1000
    t = torch.zeros(S // 4)
    # behind a switch, two senders to one rank share its port; a third pair is unaffected
    c = C.Cluster(C.pcie_switch(6, beta=BETA, alpha=ALPHA))
    c.exchange([(1, 0, t), (2, 0, t), (3, 4, t)])
    costs = [tr.cost for tr in c.trace[0].transfers]
    assert costs == pytest.approx([ALPHA + 2 * S / BETA] * 2 + [ALPHA + S / BETA])
    assert c.clocks[5] == 0  # took no part
    assert c.link_bytes[("switch", 0)] == 2 * S and c.link_bytes[(1, "switch")] == S
    # a transfer starts when both ends are free: rank 5 waits for rank 0
    c.send(0, 5, t)
    assert c.trace[-1].transfers[0].start == pytest.approx(ALPHA + 2 * S / BETA)
    assert c.clocks[5] == pytest.approx(2 * ALPHA + 3 * S / BETA)
    # fully connected: dedicated links, no sharing
    c = C.Cluster(C.fully_connected(3, beta=BETA, alpha=ALPHA))
    c.exchange([(1, 0, t), (2, 0, t)])
    assert c.time == pytest.approx(ALPHA + S / BETA)
    # several machines: GPUs of a machine share its network card
    topo = C.multi_machine(2, 2, intra_beta=4 * BETA, intra_alpha=ALPHA, net_beta=BETA, net_alpha=10 * ALPHA)
    assert topo.bandwidth(0, 1) == 4 * BETA and topo.latency(0, 1) == ALPHA
    assert topo.bandwidth(0, 2) == BETA and topo.latency(0, 2) == pytest.approx(10 * ALPHA)
    assert [link for link in topo.route(0, 3)] == [(0, "nic0"), ("nic0", "network"), ("network", "nic1"), ("nic1", 3)]
    c = C.Cluster(topo)
    c.exchange([(0, 2, t), (1, 3, t)])
    assert c.time == pytest.approx(10 * ALPHA + 2 * S / BETA)
    c.reset()
    c.exchange([(0, 1, t), (2, 3, t)])
    assert c.time == pytest.approx(ALPHA + S / (4 * BETA))


def test_topologies_are_as_documented():
    ring8 = C.ring(8)
    assert all(len(ring8.neighbors(r)) == 2 for r in range(8)) and len(ring8.links) == 16
    assert len(C.ring(2).links) == 2 and len(C.ring(1).links) == 0
    assert len(C.fully_connected(5).links) == 5 * 4
    sw = C.pcie_switch(4, beta=16e9, alpha=2e-6, cpu=True)
    assert sw.labels[-1] == "CPU" and sw.groups["servers"] == (4,) and sw.bandwidth(0, 4) == 16e9
    assert sw.latency(0, 3) == pytest.approx(2e-6)
    dgx = C.dgx1_double_ring(link_beta=18e9)
    a, b = C.DGX1_RINGS
    assert sorted(a) == sorted(b) == list(range(8))
    edges = lambda r: {frozenset((r[i], r[(i + 1) % 8])) for i in range(8)}  # noqa: E731
    assert not edges(a) & edges(b), "the two rings share no cable"
    for g in range(8):  # six NVLink links of 18 GB/s per GPU: 2 x 2 on ring A, 2 x 1 on ring B
        assert sum(dgx.links[(g, v)].beta for v in dgx.neighbors(g)) == pytest.approx(6 * 18e9)
    assert dgx.ring_bandwidth(a) == 36e9 and dgx.ring_bandwidth(b) == 18e9
    ps = C.parameter_server(3, 2)
    assert ps.groups == {"workers": (0, 1, 2), "servers": (3, 4)}
    for topo in (ring8, sw, dgx, ps, C.multi_machine(2, 4), C.fully_connected(3)):
        assert topo.source and topo.name in topo.describe()
    with pytest.raises(ValueError):
        C.Topology(0)
    with pytest.raises(ValueError):
        C.Topology(2).connect(0, 1, beta=0)


def student_ring_allreduce(c: C.Cluster, tensors):
    """What an exercise solution looks like, written with the primitives only."""
    n = c.n
    chunks = [list(t.tensor_split(n)) for t in tensors]
    for k in range(n - 1):  # reduce-scatter
        with c.step():
            for r in range(n):
                c.send(r, (r + 1) % n, chunks[r][(r - k) % n])
        for r in range(n):
            i = (r - 1 - k) % n
            chunks[r][i] = chunks[r][i] + c.recv((r - 1) % n, r)
    for k in range(n - 1):  # all-gather
        with c.step():
            for r in range(n):
                c.send(r, (r + 1) % n, chunks[r][(r + 1 - k) % n])
        for r in range(n):
            chunks[r][(r - k) % n] = c.recv((r - 1) % n, r)
    return [torch.cat(ch) for ch in chunks]


def whole_buffer_ring_allreduce(c: C.Cluster, tensors):
    """Right values, wrong algorithm: the whole tensor goes round the ring."""
    n = c.n
    acc = [t.clone() for t in tensors]
    running = tensors[0]
    for r in range(1, n):
        c.send(r - 1, r, running)
        running = c.recv(r - 1, r) + tensors[r]
    for r in range(n - 1):
        c.send((n - 1 + r) % n, (n + r) % n, running)
        acc[r] = c.recv((n - 1 + r) % n, r)
    acc[n - 1] = running
    return acc


def test_grading_a_student_ring_by_values_steps_and_bytes():
    for n in range(2, 9):
        xs = inputs(n, 29, torch.float64)
        ref = C.Cluster(C.ring(n))
        C.ring_allreduce(ref, xs)
        good = C.Cluster(C.ring(n))
        check_sum(student_ring_allreduce(good, xs), xs)
        assert good.steps == ref.steps == 2 * (n - 1)
        assert sum(good.bytes_sent) == sum(ref.bytes_sent)
        assert max(good.bytes_sent) <= 2 * 29 * 8
        bad = C.Cluster(C.ring(n))
        outs = whole_buffer_ring_allreduce(bad, xs)
        for o in outs:
            assert close(o, torch.stack(xs).sum(0), rtol=1e-12, atol=1e-12)
        # same number of steps and even the same total bytes (2(n-1)S), but whole buffers per step:
        # per-rank bytes and the time tell the two apart
        assert bad.steps == 2 * (n - 1) and sum(bad.bytes_sent) == sum(good.bytes_sent) == 2 * (n - 1) * 29 * 8
        if n > 2:
            assert max(bad.bytes_sent) == 2 * 29 * 8 > max(good.bytes_sent)
        assert max(t.nbytes for s in bad.trace for t in s.transfers) == 29 * 8
        assert bad.time > good.time


def test_zero_memory_formulas_on_the_cluster():
    P = 840 * 1000
    for n in (1, 2, 4, 8):
        c = C.Cluster(C.fully_connected(n))
        for stage in range(4):
            C.place_zero_states(c, P, stage)
            for r in range(n):
                assert c.memory_bytes(r) == M.zero_memory_bytes(P, n, stage)
    assert M.zero_memory_bytes(P, 4, 0) == 16 * P
    assert M.zero_memory_bytes(P, 4, 1) == 4 * P + 12 * P / 4
    assert M.zero_memory_bytes(P, 4, 2) == 2 * P + 14 * P / 4
    assert M.zero_memory_bytes(P, 4, 3) == 16 * P / 4
    with pytest.raises(ValueError):
        M.zero_memory_bytes(P, 4, 4)


def test_argument_errors_are_clear():
    c = C.Cluster(C.ring(3))
    xs = inputs(3, 5, torch.float32)
    with pytest.raises(ValueError, match="one per rank"):
        C.ring_allreduce(c, xs[:2])
    with pytest.raises(ValueError, match="same shape"):
        C.ring_allreduce(c, [xs[0], xs[1], torch.zeros(6)])
    with pytest.raises(ValueError, match="distinct"):
        C.ring_allreduce(c, xs, ranks=[0, 0, 1])
    with pytest.raises(ValueError, match="no route"):
        C.naive_allreduce(C.Cluster(C.ring(4)), inputs(4, 5, torch.float32))
    with pytest.raises(ValueError, match="every rank"):
        C.multi_ring_allreduce(c, xs, rings=[[0, 1]])


def test_every_public_name_is_documented():
    assert C.__doc__ and "alpha" in C.__doc__ and "Limits" in C.__doc__
    for name in C.__all__:
        obj = getattr(C, name)
        assert inspect.getdoc(obj), name
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and (inspect.isfunction(member) or isinstance(member, property)):
                    assert inspect.getdoc(member), f"{name}.{attr}"
    assert math.isfinite(C.transfer_time(10, 1e-6, 1e9))
