"""The checker of the ``ring_allreduce`` exercise: that the data travelled (part a, from the messages' contents the
cluster keeps in the checker) and that the process group's ring is a ring (part b, from the relay's record of peers),
on rings and cheats written here (not taken from the notebook or the fixtures)."""

from __future__ import annotations

import pytest
import torch

from autograder import course
from autograder.exercises import ring_allreduce as ex
from autograder.trusted import CheckFailed
from dlperf import cluster as C


def ring(cluster, tensors):
    n = cluster.n
    held = [[c.clone() for c in t.reshape(-1).tensor_split(n)] for t in tensors]
    for k in range(n - 1):
        got = cluster.exchange([(r, (r + 1) % n, held[r][(r - k - 1) % n]) for r in range(n)])
        for r in range(n):
            held[(r + 1) % n][(r - k - 1) % n] = held[(r + 1) % n][(r - k - 1) % n] + got[r]
    for k in range(n - 1):
        got = cluster.exchange([(r, (r + 1) % n, held[r][(r - k) % n]) for r in range(n)])
        for r in range(n):
            held[(r + 1) % n][(r - k) % n] = got[r]
    return [torch.cat(row).reshape(tensors[0].shape) for row in held]


def local_sum_with(messages):
    """The cheat: the sum taken over every rank's tensor at once, beside 2(n-1) steps of ``messages(r, k, chunks)``."""
    def cheat(cluster, tensors):
        n = cluster.n
        chunks = [t.reshape(-1).tensor_split(n) for t in tensors]
        for k in range(2 * (n - 1)):
            cluster.exchange([(r, (r + 1) % n, messages(r, k, chunks)) for r in range(n)])
        total = torch.stack(tensors).sum(0)
        return [total.clone() for _ in range(n)]
    return cheat


def gather_whole(cluster, tensors):
    """Every rank forwards whole tensors around the ring and sums locally: a lot of bytes, but honest data flow."""
    n = cluster.n
    seen = [[t.clone()] for t in tensors]
    for k in range(n - 1):
        got = cluster.exchange([(r, (r + 1) % n, seen[r][k]) for r in range(n)])
        for r in range(n):
            seen[(r + 1) % n].append(got[r])
    return [torch.stack(row).sum(0) for row in seen]


def run(algorithm, n, shape=(13,), dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    inputs = [torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype) if dtype.is_floating_point
              else torch.randint(-1000, 1000, shape, generator=gen) for _ in range(n)]
    cluster = ex.Watched(C.ring(n))
    out = algorithm(cluster, [t.clone() for t in inputs])
    return inputs, cluster, out


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("shape", [(1,), (3,), (13,), (4, 25)])
def test_honest_rings_and_honest_detours_pass(n, dtype, shape):
    for algorithm in (ring, gather_whole):
        inputs, cluster, out = run(algorithm, n, shape, dtype, seed=n)
        assert cluster.steps == (2 * (n - 1) if algorithm is ring else n - 1)
        ex.provenance(inputs, cluster.log, out, "case")


@pytest.mark.parametrize("n", [3, 4, 7])
def test_a_local_sum_fails_whatever_travels_beside_it(n):
    decoys = {"its own input's chunks": lambda r, k, chunks: chunks[r][(r - k - 1) % n],
              "zeros": lambda r, k, chunks: torch.zeros_like(chunks[r][(r - k - 1) % n]),
              "random numbers": lambda r, k, chunks: torch.randn_like(chunks[r][(r - k - 1) % n])}
    for what, decoy in decoys.items():
        inputs, cluster, out = run(local_sum_with(decoy), n, (40,))
        assert cluster.steps == 2 * (n - 1), what
        with pytest.raises(CheckFailed, match="could not have computed"):
            ex.provenance(inputs, cluster.log, out, "case")


def test_a_message_with_data_the_sender_never_received_is_named():
    def leaks(cluster, tensors):
        n = cluster.n   # rank 0 sends rank 2's input in the first step
        got = cluster.exchange([(r, (r + 1) % n, tensors[2] if r == 0 else tensors[r]) for r in range(n)])
        return ring(cluster, tensors) if got else None

    inputs, cluster, out = run(leaks, 3, (6,))
    with pytest.raises(CheckFailed, match=r"step 1: rank 0 sent rank 1 6 element\(s\) that rank 0 could not have "
                                          r"computed .* of inputs rank 0 has not received"):
        ex.provenance(inputs, cluster.log, out, "case")


def test_the_checker_grades_a_local_sum_with_a_decoy_ring_as_no_allreduce():
    """Through ``simulated`` itself (its cluster, its inputs), with the student's process stood in for."""
    from dlperf.grading.probes import ring_allreduce as probe

    class Shared:
        def __init__(self, t):
            self.t = t.clone()

        def read(self):
            return self.t.clone()

    class Stand_in:
        def __init__(self, fn):
            self.module = type("module", (), {"ring_allreduce": staticmethod(fn)})

        def share(self, t):
            return Shared(t)

        def probe(self, name, remote, shared):
            return probe.simulated(self.module, remote.obj, [s.t for s in shared])

    cases = [(3, (10,), "float64", 1), (4, (1001,), "int64", 2), (8, (4, 5, 3), "float32", 3)]
    cheat = local_sum_with(lambda r, k, chunks: chunks[r][(r - k - 1) % len(chunks)])
    for what in ("values", "steps", "bytes"):
        ex.simulated(Stand_in(ring), cases, what)
        with pytest.raises(CheckFailed, match="could not have computed"):
            ex.simulated(Stand_in(cheat), cases, what)


def test_the_ring_topology_is_read_from_the_relay_s_record():
    ring_peers = [{"peers_sent": [(r + 1) % 4]} for r in range(4)]
    ex.ring_topology(ring_peers, "case")
    ex.ring_topology([{"peers_sent": [1]}, {"peers_sent": []}], "case")   # sending nothing is not a detour
    all_to_all = [{"peers_sent": sorted(set(range(4)) - {r})} for r in range(4)]
    with pytest.raises(CheckFailed, match=r"rank 0 sent to rank\(s\) \[2, 3\]: in a ring, rank r sends only to its "
                                          r"right neighbour \(r \+ 1\) % n = 1"):
        ex.ring_topology(all_to_all, "case")
    backwards = [{"peers_sent": [(r - 1) % 3]} for r in range(3)]
    with pytest.raises(CheckFailed, match="rank 0 sent to rank"):
        ex.ring_topology(backwards, "case")


def test_fixtures_say_why_and_include_correct_alternatives_and_the_cheats():
    fixtures = course.snippets("ring_allreduce")
    right = [p for p in fixtures if p.stem.startswith("correct_")]
    wrong = [p for p in fixtures if p not in right]
    assert len(wrong) >= 15 and len(right) >= 2, (len(wrong), len(right))
    for path in fixtures:
        snippet = course.Snippet.parse(path)
        assert snippet.why, path.name
        assert (sum(snippet.expect.values()) == 10) == (path in right), path.name
    names = {p.stem for p in fixtures}
    assert {"sim_local_sum_decoy_ring", "p2p_all_to_all"} <= names
    cheat = course.Snippet.parse(course.SUBMISSIONS / "ring_allreduce" / "sim_local_sum_decoy_ring.py")
    control = course.Snippet.parse(course.SUBMISSIONS / "ring_allreduce" / "sim_local_sum.py")
    part_a = [k for k in cheat.expect if "-sim-" in k]
    assert sum(cheat.expect[k] for k in part_a) <= sum(control.expect[k] for k in part_a)


def test_a_chunk_whose_sum_is_zero_still_counts_as_received():
    """int64 partial sums can be exactly 0; a one-element message of 0 carries the sum all the same."""
    inputs = [torch.tensor([5, 7]), torch.tensor([-5, 1]), torch.tensor([3, -8])]   # chunk 1 sums to 0
    cluster = ex.Watched(C.ring(3))
    out = ring(cluster, [t.clone() for t in inputs])
    assert [o.tolist() for o in out] == [[3, 0]] * 3
    assert any(c.numel() == 1 and int(c) == 0 for step in cluster.log for _, _, c in step)
    ex.provenance(inputs, cluster.log, out, "case")
