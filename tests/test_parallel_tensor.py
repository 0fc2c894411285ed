"""Tensor parallelism by hand and with PyTorch's API, on two real gloo ranks, against the unsharded block."""

from __future__ import annotations

import pytest
import torch

from dlperf.launch import launch
from dlperf.parallel import tensor as T

H, FFN, TOKENS = 16, 64, 8


@pytest.fixture(scope="module")
def ranks():
    return launch("dlperf.parallel.tensor:chapter_worker", 2, args=(H, FFN, TOKENS, 0), start_method="fork",
                  verbose=False, timeout=120)


@pytest.fixture(scope="module")
def unsharded():
    """The block in one process, written out here with plain nn.Linear and GELU."""
    torch.manual_seed(0)
    first, second = torch.nn.Linear(H, FFN), torch.nn.Linear(FFN, H)
    x, g = T.block_inputs(TOKENS, H, 0)
    x.requires_grad_(True)
    y = second(torch.nn.functional.gelu(first(x)))
    (y * g).sum().backward()
    return {"first": first, "second": second, "x": x, "y": y.detach()}


def _close(a, b):
    return torch.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_each_layer_alone(ranks, unsharded):
    first, second = unsharded["first"], unsharded["second"]
    for r in ranks:
        layers = r["layers"]
        assert _close(layers["column"], first(unsharded["x"]).detach())        # all-gathered columns
        assert _close(layers["row"], second(layers["row_input"]).detach())      # all-reduced partial sums, bias once
        assert [(c.kind, c.elements) for c in layers["traffic"]] == [("all-gather", TOKENS * FFN), ("all-reduce", TOKENS * H)]


@pytest.mark.parametrize("key", ["tp", "dtensor"])
def test_block_equals_the_unsharded_block(ranks, unsharded, key):
    first, second = unsharded["first"], unsharded["second"]
    for rank, r in enumerate(ranks):
        res = r[key]
        assert _close(res["output"], unsharded["y"])                   # replicated output
        assert _close(res["input_grad"], unsharded["x"].grad)
        rows = slice(rank * FFN // 2, (rank + 1) * FFN // 2)
        if key == "tp":   # this rank's shards: rows of the first weight, columns of the second
            want = {"0.weight": first.weight.grad[rows], "0.bias": first.bias.grad[rows],
                    "2.weight": second.weight.grad[:, rows], "2.bias": second.bias.grad}
        else:             # DTensor gradients come back whole
            want = {"0.weight": first.weight.grad, "0.bias": first.bias.grad,
                    "2.weight": second.weight.grad, "2.bias": second.bias.grad}
        for name, grad in want.items():
            assert _close(res["grads"][name], grad), (key, rank, name)


@pytest.mark.parametrize("key", ["sp", "dtensor_sp"])
def test_sequence_parallel_block(ranks, unsharded, key):
    first, second = unsharded["first"], unsharded["second"]
    outputs = torch.cat([r[key]["output"] for r in ranks])
    input_grads = torch.cat([r[key]["input_grad"] for r in ranks])
    assert ranks[0][key]["output"].shape == (TOKENS // 2, H)        # each rank keeps half of the tokens
    assert _close(outputs, unsharded["y"]) and _close(input_grads, unsharded["x"].grad)
    for rank, r in enumerate(ranks):
        bias = r[key]["grads"]["2.bias"]
        assert _close(bias, second.bias.grad), (key, rank)           # summed over both ranks' tokens
        first_grad = r[key]["grads"]["0.weight"]
        want = first.weight.grad if key == "dtensor_sp" else first.weight.grad[rank * FFN // 2:(rank + 1) * FFN // 2]
        assert _close(first_grad, want)


def test_traffic_per_block(ranks):
    S = TOKENS * H * 4                                  # one float32 activation of the block
    for r in ranks:
        tp = r["tp"]["traffic"]
        assert [(c.kind, c.phase, c.nbytes) for c in tp] == [("all-reduce", "forward", S), ("all-reduce", "backward", S)]
        # the profiler saw the same operations (a second pass, recorded by torch.profiler)
        assert [(c.kind, c.nbytes) for c in r["tp"]["profiled"]] == [("all-reduce", S), ("all-reduce", S)]
        # ring on 2 ranks: an all-reduce sends 2 (t-1)/t S = S per rank; one forward, one backward
        assert T.Traffic(tp).sent(2) == 2 * S
        sp = r["sp"]["traffic"]
        kinds = [(c.kind, c.phase, c.nbytes) for c in sp]
        assert kinds == [("all-gather", "forward", S), ("reduce-scatter", "forward", S),
                         ("all-gather", "backward", S), ("reduce-scatter", "backward", S),
                         ("all-reduce", "grad sync", H * 4)]
        assert [(c.kind, c.nbytes) for c in r["sp"]["profiled"]] == [(k, n) for k, _, n in kinds]
        # all-gather + reduce-scatter send (t-1)/t S each: the same bytes as the all-reduce they replace
        assert T.Traffic(sp).sent(2, "forward") == T.Traffic(tp).sent(2, "forward") == S
        timing = r["tp"]["timing"]       # measured in alternating rounds, the same number of calls on every rank
        assert [m.label for m in timing] == ["step", "collectives alone"]
        assert all(m.repeats == 15 and m.median > 0 for m in timing)
        dt, dsp = r["dtensor"], r["dtensor_sp"]
        assert dt["forward_counts"] == {"all_reduce": 1} and dt["backward_counts"] == {"all_reduce": 1}
        assert dsp["forward_counts"] == {"all_gather_into_tensor": 1, "reduce_scatter_tensor": 1}
        assert dt["weight_type"] == "DTensor" and dt["local_weight_shape"] == (FFN // 2, H)


def test_ring_bytes():
    assert T.ring_bytes_sent("all-reduce", 100, 4) == 150
    assert T.ring_bytes_sent("all-gather", 100, 4) == 75 == T.ring_bytes_sent("reduce-scatter", 100, 4)
    with pytest.raises(ValueError):
        T.ring_bytes_sent("broadcast", 1, 2)


def test_the_chapters_comparison(ranks):
    """T.compare, the chapter's table: small errors for the real runs, and a wrong shard is caught."""
    errors, layers = T.compare(ranks, H, FFN, TOKENS)
    assert set(errors) == set(T.BLOCK_RUNS) and max(max(e) for e in errors.values()) < 1e-5
    assert max(layers.values()) < 1e-5
    swapped = [{**r, "tp": {**r["tp"], "grads": ranks[1 - k]["tp"]["grads"]}} for k, r in enumerate(ranks)]
    assert T.compare(swapped, H, FFN, TOKENS)[0]["tp"][2] > 0.1          # rank 0's gradients on rank 1
