"""The key-value store of the parameter-server chapter: placement, traffic, and real processes.

The process tests start one group of 3 gloo processes (``kv_checks`` below is
their worker, imported by the spawned processes from this module) and check
push/pull semantics with sharded, root-only and split placements, rank 0's
init values, the server-side updater, the agreement check of ``init``, the
traffic counters against :func:`expected_traffic`, and that data-parallel
training through the store equals single-process training.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from dlperf import kvstore as K
from dlperf.launch import launch

WORLD = 3
SIZES = {"a": 5, "b": 3, "c": 8, "d": 1, "big": 10}
STEPS, LR = 20, 0.1


# ---------------------------------------------------------------------------------------------
# The worker (runs in each spawned process)
# ---------------------------------------------------------------------------------------------


def kv_checks() -> dict:
    rank = dist.get_rank()
    out: dict = {
        "sharded": K.push_pull_demo(SIZES),
        "root": K.push_pull_demo(SIZES, servers=[0]),
        "split": K.push_pull_demo(SIZES, split_numel=6),
    }
    # init takes rank 0's values; the updater runs at the server; pull gives the updated value
    kv = K.KVStore(updater=K.sgd(0.5))
    kv.init({"w": torch.full((4,), 10.0 + rank), "v": torch.full((2, 2), 1.0 + rank)})
    out["init"] = kv.pull(["w", "v"])
    kv.push(["w", "v"], [torch.full((4,), float(rank)), torch.ones(2, 2)])
    out["updated"] = kv.pull(["w", "v"])
    # without an updater, a second round replaces the stored value by the new sum
    plain = K.KVStore()
    plain.init({"x": torch.zeros(3)})
    plain.push("x", torch.ones(3))
    plain.push("x", torch.full((3,), 2.0))
    out["second_round"] = plain.pull("x")
    # ranks that disagree on the keys: every rank gets an error, nobody hangs
    bad = K.KVStore()
    try:
        bad.init({"x": torch.zeros(3 if rank != 2 else 4)})
        out["mismatch"] = None
    except RuntimeError as err:
        out["mismatch"] = str(err)
    out["train"] = K.train_data_parallel(STEPS, LR)
    out["train_split"] = K.train_data_parallel(STEPS, LR, split_numel=256)
    return out


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return launch("test_kvstore:kv_checks", WORLD, backend="gloo", timeout=240, verbose=False)


# ---------------------------------------------------------------------------------------------
# Real processes
# ---------------------------------------------------------------------------------------------

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("mode", ["sharded", "root", "split"])
def test_push_sums_over_workers_per_key_and_pull_returns_it_everywhere(results, mode):
    total = sum(r + 1 for r in range(WORLD))
    for res in results:
        for key, m in SIZES.items():
            assert torch.equal(res[mode]["pulled"][key], total * torch.arange(1.0, m + 1)), (mode, key)
    owners = [res[mode]["owners"] for res in results]
    assert all(o == owners[0] for o in owners)  # every rank computed the same placement


def test_keys_are_sharded_over_the_servers(results):
    owners = results[0]["sharded"]["owners"]
    assert {o for key in SIZES for o in owners[key]} == set(range(WORLD))  # every rank holds something
    assert all(len(owners[k]) == 1 for k in SIZES)
    stored = [set(res["sharded"]["local_keys"]) for res in results]
    assert set().union(*stored) == set(SIZES) and sum(map(len, stored)) == len(SIZES)  # each key once
    assert all(results[0]["root"]["owners"][k] == (0,) for k in SIZES)
    assert results[1]["root"]["local_keys"] == [] and sorted(results[0]["root"]["local_keys"]) == sorted(SIZES)
    split = results[0]["split"]["owners"]
    assert split["c"] == (0, 1, 2) and split["big"] == (0, 1, 2) and len(split["a"]) == 1


@pytest.mark.parametrize("mode, servers, split", [("sharded", None, None), ("root", [0], None), ("split", None, 6)])
def test_traffic_counters_match_the_protocol(results, mode, servers, split):
    placement = K.place_keys(SIZES, range(WORLD) if servers is None else servers, split_numel=split)
    expected = K.expected_traffic(placement, 4, WORLD)
    for res in results:
        assert res[mode]["traffic"] == expected[res[mode]["rank"]]


def test_init_uses_rank0_values_and_the_updater_runs_at_the_server(results):
    for res in results:
        w, v = res["init"]
        assert torch.equal(w, torch.full((4,), 10.0)) and torch.equal(v, torch.ones(2, 2))
        w, v = res["updated"]
        assert torch.equal(w, torch.full((4,), 10.0 - 0.5 * (0 + 1 + 2)))
        assert torch.equal(v, torch.full((2, 2), 1.0 - 0.5 * WORLD))
        assert torch.equal(res["second_round"], torch.full((3,), 2.0 * WORLD))


def test_ranks_that_disagree_all_get_an_error(results):
    for res in results:
        assert res["mismatch"] is not None and "disagree" in res["mismatch"]


@pytest.mark.parametrize("mode", ["train", "train_split"])
def test_data_parallel_training_through_the_store_equals_one_process(results, mode):
    ref = K.train_single(STEPS, LR)
    for res in results:
        for name, p in ref["params"].items():
            assert torch.allclose(res[mode]["params"][name], p, atol=1e-5, rtol=0), name
            assert torch.equal(res[mode]["params"][name], results[0][mode]["params"][name])  # ranks agree exactly
    losses = [sum(res[mode]["losses"][i] for res in results) for i in range(STEPS)]
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(losses, ref["losses"]))
    assert ref["losses"][-1] < 0.5 * ref["losses"][0]  # it does learn


# ---------------------------------------------------------------------------------------------
# Without processes
# ---------------------------------------------------------------------------------------------


def test_place_keys_is_greedy_largest_first_and_keeps_the_callers_order():
    placement = K.place_keys({"small": 1, "big": 100, "mid": 50, "mid2": 50}, [0, 1, 2])
    assert list(placement) == ["small", "big", "mid", "mid2"]
    owners = {k: parts[0].owner for k, parts in placement.items()}
    assert owners == {"big": 0, "mid": 1, "mid2": 2, "small": 1}


def test_place_keys_splits_large_keys_over_all_servers():
    placement = K.place_keys({"w": 10, "b": 2}, [2, 0, 1], split_numel=10)
    parts = placement["w"]
    assert [(p.owner, p.start, p.stop) for p in parts] == [(2, 0, 4), (0, 4, 7), (1, 7, 10)]
    assert placement["b"][0].owner == 0  # least loaded (3 elements, ties broken by the order given)
    with pytest.raises(ValueError):
        K.place_keys({"w": 1}, [0, 0])


def test_balanced_placement_sends_what_a_ring_sends():
    n, numel = 4, 1000
    placement = K.place_keys({"w": numel}, range(n), split_numel=1)
    traffic = K.expected_traffic(placement, 4, n)
    for t in traffic:
        assert t["bytes_sent"] == t["bytes_received"] == 2 * (n - 1) * 4 * numel // n
        assert t["messages_sent"] == 2 * (n - 1)


def test_sgd_updates_in_place():
    w = torch.ones(3)
    K.sgd(0.1)("w", torch.full((3,), 2.0), w)
    assert torch.allclose(w, torch.full((3,), 0.8))


def test_the_store_needs_a_process_group():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="process group"):
        K.KVStore()
