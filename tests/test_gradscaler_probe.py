"""The gradscaler exercise's reference (dlperf.grading.probes.gradscaler): what the specification states
about its scope is what the reference enforces.

The hidden tests compare the student's scaler with this reference on every graded run; the fixture tests
require the reference solution's 10/10. So a statement the reference refuses to break (sparse gradients
are out of scope) holds for every graded run.
"""

from __future__ import annotations

import math

import pytest
import torch

from dlperf.grading.probes import gradscaler as probe


def sparse_optimizer() -> torch.optim.Optimizer:
    emb = torch.nn.Embedding(10, 3, sparse=True)
    emb(torch.tensor([1, 2, 2])).sum().backward()
    assert emb.weight.grad.is_sparse
    return torch.optim.SGD(emb.parameters(), lr=0.1)


def test_the_reference_refuses_sparse_gradients_in_every_call_that_unscales():
    ref = probe.reference("cpu")
    with pytest.raises(ValueError, match="out of the gradscaler exercise's scope"):
        ref.unscale_grads_(sparse_optimizer(), 0.5)
    opt = sparse_optimizer()
    scaler = ref.GradScaler(init_scale=4.0)
    scaler.scale(torch.ones(()))            # as after a scaled backward
    with pytest.raises(ValueError, match="out of the gradscaler exercise's scope"):
        scaler.step(opt)                    # step() unscales first


def test_the_reference_is_torchs_scaler_on_dense_gradients():
    """On the graded runs (dense), the reference is torch.amp.GradScaler, a scale that stops at 2^127 included."""
    kw = {"init_scale": 2.0**124, "growth_interval": 1}
    ours = probe.update_trace(probe.reference("cpu"), "cpu", kw, 6, {}, False, False)
    theirs = probe.update_trace(
        type("torch", (), {"GradScaler": staticmethod(lambda **k: torch.amp.GradScaler("cpu", **k))}),
        "cpu", kw, 6, {}, False, False)
    assert ours == theirs and [math.log2(s) for s in ours] == [124, 125, 126, 127, 127, 127, 127]
