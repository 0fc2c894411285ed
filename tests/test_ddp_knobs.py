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
               Knobs("unused", unused_layer=True), Knobs("unused, found", unused_layer=True, find_unused_parameters=True)]
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


def test_configurations_need_distinct_names():
    with pytest.raises(ValueError, match="distinct names"):
        run([Knobs("a"), Knobs("a")])
