"""Ring attention on four real gloo ranks against full attention in one process; its counts against their formulas."""

from __future__ import annotations

import pytest
import torch

from dlperf.attention import Partial, merge, partial
from dlperf.launch import launch
from dlperf.parallel import context as CP

WORLD, N, HEADS, D = 4, 64, 2, 8


@pytest.fixture(scope="module")
def ranks():
    """One process group for every check of this file (the ranks start once)."""
    return launch("dlperf.parallel.context:chapter_worker", WORLD, args=(N, HEADS, D, False, 0, 1),
                  start_method="fork", verbose=False, timeout=120)


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-5, atol=1e-5)


def test_layouts_cover_the_sequence_once():
    for scheme in CP.LAYOUTS:
        pos = torch.cat([CP.positions(N, WORLD, r, scheme) for r in range(WORLD)])
        assert sorted(pos.tolist()) == list(range(N))
        x = torch.randn(HEADS, N, D)
        assert torch.equal(CP.unshard([CP.shard(x, WORLD, r, scheme) for r in range(WORLD)], scheme), x)
    assert CP.layout(4, "zigzag") == [[0, 7], [1, 6], [2, 5], [3, 4]]


@pytest.mark.parametrize("scheme", CP.LAYOUTS)
def test_ring_equals_full_attention(ranks, scheme):
    got = CP.unshard([r[scheme]["out"] for r in ranks], scheme)
    assert _close(got, CP.reference(N, HEADS, D, causal=True))


def test_non_causal_ring_equals_full_attention(ranks):
    got = CP.unshard([r["full"] for r in ranks], "contiguous")
    assert _close(got, CP.reference(N, HEADS, D, causal=False))


@pytest.mark.parametrize("variant", ["local_offsets", "no_rescale"])
def test_wrong_rings_are_caught(ranks, variant):
    got = CP.unshard([r[variant] for r in ranks], "zigzag")
    assert (got - CP.reference(N, HEADS, D)).abs().max() > 1e-2


@pytest.mark.parametrize("scheme", CP.LAYOUTS)
def test_bytes_sent_equal_r_minus_1_kv_blocks(ranks, scheme):
    want = (WORLD - 1) * 2 * HEADS * (N // WORLD) * D * 4
    assert CP.ring_bytes(N, WORLD, HEADS, D) == want
    for r in ranks:
        calls = r[scheme]["traffic"]
        assert len(calls) == WORLD - 1 and all(c.kind == "send" for c in calls)
        assert sum(c.nbytes for c in calls) == want


def test_work_counted_on_the_ranks_equals_the_layout_formula(ranks):
    for scheme in CP.LAYOUTS:
        assert [r[scheme]["work"] for r in ranks] == CP.tile_work(N, WORLD, scheme)
    c, cz = N // WORLD, N // (2 * WORLD)
    contiguous = [sum(w) for w in CP.tile_work(N, WORLD, "contiguous")]
    zigzag = [sum(w) for w in CP.tile_work(N, WORLD, "zigzag")]
    assert contiguous == [(r + 1) * c * c for r in range(WORLD)]          # rank r: r + 1 blocks
    assert zigzag == [(2 * WORLD + 1) * cz * cz] * WORLD                  # balanced: 2R + 1 tiles
    ratio = CP.critical_path(CP.tile_work(N, WORLD, "contiguous")) / CP.critical_path(CP.tile_work(N, WORLD, "zigzag"))
    assert ratio == pytest.approx(4 * WORLD / (2 * WORLD + 1))


def test_tile_matches_the_diagonal_mask_with_global_offsets():
    """Query chunk a = 3 against key chunk b = 3 at offsets 3c: the lower triangle, as full attention sees it."""
    c = 4
    q, k, v = (torch.randn(1, c, D) for _ in range(3))
    acc, work = CP.tile(Partial.empty(q), q, k, v, 3, 3, c)
    want = partial(q, k, v, torch.ones(c, c, dtype=torch.bool).tril())
    assert work == c * c and _close(acc.out, merge(Partial.empty(q), want).out)
    assert CP.tile(Partial.empty(q), q, k, v, 2, 3, c)[1] == 0        # the future: skipped


@pytest.mark.parametrize("scheme", CP.LAYOUTS)
def test_backward_ring_equals_autograd_and_sends_its_formula(ranks, scheme):
    want = CP.reference_grads(N, HEADS, D)
    for name in ("dq", "dk", "dv"):
        got = CP.unshard([r[scheme]["grads"][name] for r in ranks], scheme)
        assert _close(got, want[name]), name
    expected = (2 * WORLD - 1) * 2 * HEADS * (N // WORLD) * D * 4      # R - 1 K/V blocks, R dK/dV blocks
    assert CP.ring_backward_bytes(N, WORLD, HEADS, D) == expected
    for r in ranks:
        assert sum(c.nbytes for c in r[scheme]["backward_traffic"]) == expected
