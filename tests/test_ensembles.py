"""Training an ensemble with stack_module_state + vmap equals training its models one by one."""

from __future__ import annotations

import torch

from dlperf import ensembles as E

X, Y = E.demo_data()


def test_batched_training_equals_sequential_training():
    models = E.make_ensemble(5)
    seq = E.train_sequential(models, X, Y, steps=4, lr=0.1)
    bat = E.train_batched(models, X, Y, steps=4, lr=0.1)
    assert E.max_difference(seq, bat) < 1e-6
    torch.testing.assert_close(bat["losses"], seq["losses"], rtol=1e-6, atol=1e-7)
    assert seq["losses"][:, -1].lt(seq["losses"][:, 0]).all()  # every model learned something
    # the inputs are left alone: both train copies
    assert all(torch.equal(m[0].weight, f[0].weight) for m, f in zip(models, E.make_ensemble(5)))


def test_each_slice_is_its_own_model():
    models = E.make_ensemble(3)
    bat = E.train_batched(models, X, Y, steps=2, lr=0.1)
    alone = E.train_batched(models[1:2], X, Y, steps=2, lr=0.1)
    for k, v in alone["params"].items():
        torch.testing.assert_close(bat["params"][k][1], v[0], rtol=0, atol=1e-6)


def test_a_mean_instead_of_a_sum_of_the_losses_is_caught():
    # the batched step must differentiate the *sum* of the per-model losses; a mean would divide
    # every model's gradient by n, as training with lr / n does
    models = E.make_ensemble(4)
    seq = E.train_sequential(models, X, Y, steps=3, lr=0.1)
    wrong = E.train_batched(models, X, Y, steps=3, lr=0.1 / 4)
    assert E.max_difference(seq, wrong) > 1e-3


def test_activations_grow_with_the_models_the_input_does_not():
    x_bytes = X.numel() * X.element_size()
    hidden_bytes = X.shape[0] * 32 * 4  # one model's hidden layer, float32
    for n in (1, 3):
        models = E.make_ensemble(n)
        assert E.activation_bytes(models, X, batched=False) == x_bytes + hidden_bytes
        assert E.activation_bytes(models, X, batched=True) == x_bytes + n * hidden_bytes


def test_spread_over_dask_workers_equals_training_one_after_the_other():
    client = E.start_cluster(2)
    try:
        models = E.make_ensemble(5)
        seq = E.train_sequential(models, X, Y, steps=3, lr=0.1)
        for batched in (False, True):
            spread = E.train_spread(models, X, Y, steps=3, lr=0.1, client=client, batched=batched)
            assert len(spread["params"]) == 5
            for p, q in zip(seq["params"], spread["params"]):
                for k in p:
                    torch.testing.assert_close(q[k], p[k], rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(spread["losses"], seq["losses"], rtol=1e-5, atol=1e-6)
        # each model went to one worker, in turn: a model trained alone there gives the same as here
        shuffled = E.train_spread(models[::-1], X, Y, steps=3, lr=0.1, client=client)
        for p, q in zip(seq["params"][::-1], shuffled["params"]):
            torch.testing.assert_close(q["0.weight"], p["0.weight"], rtol=1e-5, atol=1e-6)
        timed = E.ways(4, 8, client, steps=2, rounds=1, repeat=1)
        assert set(timed["measurements"]) == {"sequential", "batched", "spread", "spread, batched"}
        assert max(timed["differences"].values()) < 1e-5
    finally:
        client.close()
        client.cluster.close()
