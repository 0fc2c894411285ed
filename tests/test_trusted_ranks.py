"""The trusted side of a hidden check, several hosts at once: ranks of a process group whose every message the
relay routes and counts (``autograder.trusted.Ranks``), for real: rings, collectives refused, deadlocks
reported, frozen ranks idle."""

from __future__ import annotations

import os
import time

import pytest
import torch

from autograder.trusted import CheckFailed, Ranks

pytestmark = pytest.mark.timeout(300)


# -- ranks --------------------------------------------------------------------------------------

RANKS = '''
import torch
import torch.distributed as dist

def ring(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).tensor_split(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    buf = torch.empty_like(chunks[0])
    for k in range(n - 1):
        s, r = (rank - k) % n, (rank - k - 1) % n
        incoming = buf[: chunks[r].numel()]
        for req in [dist.isend(chunks[s], right), dist.irecv(incoming, left)]:
            req.wait()
        chunks[r].add_(incoming)
    for k in range(n - 1):
        s, r = (rank + 1 - k) % n, (rank - k) % n
        for req in [dist.isend(chunks[s], right), dist.irecv(chunks[r], left)]:
            req.wait()

def whole(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    total, current, incoming = tensor.clone(), tensor.clone(), torch.empty_like(tensor)
    for _ in range(n - 1):
        for req in [dist.isend(current, (rank + 1) % n), dist.irecv(incoming, (rank - 1) % n)]:
            req.wait()
        total += incoming
        current, incoming = incoming, current
    tensor.copy_(total)

def collective(tensor, name):
    if name == "barrier":
        dist.barrier()
    elif name == "broadcast":
        dist.broadcast(tensor, 0)
    else:
        getattr(dist, name)(tensor)

def deadlock(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    dist.send(tensor, (rank + 1) % n)
    dist.recv(tensor, (rank - 1) % n)

def mismatch(tensor):
    if dist.get_rank() == 0:
        dist.send(tensor, 1)
    else:
        dist.recv(torch.empty(tensor.numel() + 1), 0)

def gather_to_zero(tensor):
    if dist.get_rank() == 0:
        for _ in range(dist.get_world_size() - 1):
            buf = torch.empty_like(tensor)
            dist.recv(buf)
            tensor.add_(buf)
    else:
        dist.send(tensor, 0)

def batched(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    buf = torch.empty_like(tensor)
    ops = [dist.P2POp(dist.isend, tensor, (rank + 1) % n), dist.P2POp(dist.irecv, buf, (rank - 1) % n)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    tensor.add_(buf)

def flood(tensor):
    # isend after isend of 64 MiB that no rank receives: the relay would hold them all
    if dist.get_rank() == 0:
        big = torch.zeros(16 * 2**20)
        return [dist.isend(big, 1) for _ in range(12)] and None

def busy():
    import threading, time
    def burn():
        while True:
            pass
    threading.Thread(target=burn, daemon=True).start()
    return True
'''


@pytest.fixture(scope="module")
def four():
    with Ranks(parts=[("<ranks>", RANKS)], n=4, timeout=60) as ranks:
        yield ranks


def _shared(ranks, n, numel, dtype=torch.float32):
    data = [torch.arange(numel, dtype=torch.float64).to(dtype) * (r + 1) for r in range(n)]
    return data, [ranks[r].share(d) for r, d in enumerate(data)]


@pytest.mark.parametrize("numel", [3, 1001, 65537])
def test_a_ring_sums_in_place_and_the_relay_counts_its_bytes(four, numel):
    data, shared = _shared(four, 4, numel)
    four.call("ring", [(s,) for s in shared])
    expected = sum(data)
    assert all(torch.allclose(s.read(), expected) for s in shared)
    for r, t in enumerate(four.traffic):
        chunk = [c.numel() * 4 for c in torch.arange(numel).tensor_split(4)]
        assert t["bytes_sent"] == sum(chunk[(r - k) % 4] for k in range(3)) + sum(chunk[(r + 1 - k) % 4] for k in range(3))
        assert t["messages_sent"] == t["messages_received"] == 6 and t["peers_sent"] == [(r + 1) % 4]
    assert four.seconds > 0


def test_a_ring_that_passes_whole_tensors_sends_n_minus_1_times_the_data(four):
    _, shared = _shared(four, 4, 1000)
    four.call("whole", [(s,) for s in shared])
    assert [t["bytes_sent"] for t in four.traffic] == [3 * 4000] * 4


@pytest.mark.parametrize("name", ["all_reduce", "broadcast", "barrier"])
def test_the_group_has_no_collective(name):
    with Ranks(parts=[("<ranks>", RANKS)], n=2) as ranks:
        with pytest.raises(CheckFailed, match="is a collective operation"):
            ranks.call("collective", [(torch.ones(2), name)] * 2)


def test_sends_that_no_rank_receives_are_bounded_in_the_relay(monkeypatch):
    """A rank that sends far more than anyone receives ends the run with a reason, instead of growing the
    check run's memory (the relay holds every send until its receive is posted)."""
    from autograder.trusted import relay as relay_module

    monkeypatch.setattr(relay_module, "MAX_PENDING_BYTES", 256 * 2**20)
    with Ranks(parts=[("<ranks>", RANKS)], n=2, timeout=60) as ranks:
        with pytest.raises(CheckFailed, match="that no rank has received"):
            ranks.call("flood", [(ranks[r].share(torch.ones(2)),) for r in range(2)])
        assert ranks.relay.pending_bytes <= 256 * 2**20


def test_a_deadlock_is_reported_at_once_with_what_each_rank_waits_for():
    with Ranks(parts=[("<ranks>", RANKS)], n=3) as ranks:
        started = time.monotonic()
        with pytest.raises(CheckFailed, match="deadlock") as info:
            ranks.call("deadlock", [(ranks[r].share(torch.ones(2)),) for r in range(3)])
        assert time.monotonic() - started < 5
    for r in range(3):
        assert f"rank {r} sends 8 bytes to rank {(r + 1) % 3}" in str(info.value)


def test_a_receive_of_the_wrong_size_fails_on_both_sides():
    with Ranks(parts=[("<ranks>", RANKS)], n=2) as ranks:
        with pytest.raises(CheckFailed, match="the sizes must match"):
            ranks.call("mismatch", [(torch.ones(4),)] * 2)


def test_any_source_and_batched_operations(four):
    data, shared = _shared(four, 4, 5)
    four.call("gather_to_zero", [(s,) for s in shared])
    assert torch.equal(shared[0].read(), sum(data))
    data, shared = _shared(four, 4, 5)
    four.call("batched", [(s,) for s in shared])
    assert all(torch.equal(shared[r].read(), data[r] + data[(r - 1) % 4]) for r in range(4))


def test_frozen_ranks_use_no_processor():
    with Ranks(parts=[("<ranks>", RANKS)], n=1) as ranks:
        assert ranks.call("busy", [()]) == [True]
        pid = ranks[0].process.pid

        def cpu() -> float:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

        ranks.freeze()
        try:
            time.sleep(0.3)
            before = cpu()
            time.sleep(1.0)
            assert cpu() - before < 0.05
        finally:
            ranks.thaw()
        time.sleep(0.5)
        assert cpu() > before
