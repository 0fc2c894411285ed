"""DDP's options on two real gloo ranks: what each changes in a step, against what DDP's documentation says."""

from __future__ import annotations

import pytest

from dlperf.ddp_knobs import Knobs, run

LAYER = 256 * 256 + 256          # one Linear(256, 256)
P = 4 * LAYER                     # depth 3: four layers


@pytest.fixture(scope="module")
def results():
    configs = [Knobs("default"), Knobs("small buckets", bucket_cap_mb=0.25),
               Knobs("views", gradient_as_bucket_view=True), Knobs("bf16", hook="bf16"),
               Knobs("unused", unused_layer=True), Knobs("unused, found", unused_layer=True, find_unused_parameters=True),
               Knobs("unused, static", unused_layer=True, static_graph=True), Knobs("powersgd", hook="powersgd")]
    return {r["report"].knobs.name: r for r in run(configs, world=2, steps=3, width=256, depth=3)}


def sizes(r):
    return [c.elements for c in r["report"].allreduces]


def test_buckets_follow_bucket_cap_mb(results):
    assert sizes(results["default"]) == [P]                  # 1 MiB of gradients: one bucket under the 25 MiB cap
    assert sizes(results["small buckets"]) == [LAYER] * 4    # a layer (257 KiB) closes each 0.25 MiB bucket


def test_gradients_are_views_of_the_buckets_only_when_asked(results):
    assert results["views"]["report"].grads_in_buckets == results["views"]["report"].grads == 8
    assert results["default"]["report"].grads_in_buckets == 0


def test_the_bf16_hook_costs_accuracy_and_the_default_does_not(results):
    assert results["default"]["max_diff"] < 1e-4
    assert 1e-3 < results["bf16"]["max_diff"] < 0.2
    assert sizes(results["bf16"]) == [P]


def test_an_unused_layer_needs_find_unused_parameters(results):
    failed = results["unused"]["report"]
    assert failed.error and "prior iteration" in failed.error and results["unused"]["max_diff"] is None
    found = results["unused, found"]
    assert found["report"].error is None and found["max_diff"] < 1e-4
    # the unused layer's (zero) gradients travel too, and one more all-reduce marks which parameters were used
    assert sizes(found) == [P + LAYER, 10]


def test_static_graph_finds_the_unused_layer_once_and_sends_no_flags_afterwards(results):
    static = results["unused, static"]
    assert static["report"].error is None and static["max_diff"] < 1e-4
    assert static["report"].hook_sent == [P + LAYER]          # the zero gradients travel in the bucket
    assert sizes(static) == [P + LAYER]                       # and nothing else in a later step


def test_powersgd_sends_two_vectors_per_matrix_and_the_biases_whole(results):
    psgd = results["powersgd"]
    # after the first step's plain all-reduce: the four biases, then P (256 per matrix), then Q (256 each)
    assert psgd["report"].hook_sent == [4 * 256, 4 * 256, 4 * 256]
    assert results["default"]["report"].hook_sent == [P]
    assert 1e-4 < psgd["max_diff"] < 0.5                     # lossy: it changes the training


def test_an_unknown_hook_is_refused():
    from dlperf.ddp_knobs import _hook

    with pytest.raises(ValueError, match="powersgd"):
        _hook(Knobs("x", hook="fp8"), [])


def test_configurations_need_distinct_names():
    with pytest.raises(ValueError, match="distinct names"):
        run([Knobs("a"), Knobs("a")])
