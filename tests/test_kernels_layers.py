"""dlperf.kernels.layers: per-layer FLOPs and bytes of a small network against hand counts."""

from __future__ import annotations

import torch
from torch import nn

from dlperf.kernels.layers import activation_bytes, characterize


def test_layers_counted_by_hand():
    batch = 8
    net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(2 * 4 * 4, 5))
    costs = characterize(net, torch.randn(batch, 1, 6, 6))
    assert [c.kind for c in costs] == ["Conv2d", "ReLU", "Linear"]          # Flatten is a view: left out
    conv, relu, linear = costs
    # convolution: every output element (8 x 2 x 4 x 4) is a dot product of 1 x 3 x 3 weights: 2 FLOPs each
    assert conv.flops == 2 * (batch * 2 * 4 * 4) * 9 and conv.counted
    assert conv.param_bytes == (2 * 1 * 3 * 3 + 2) * 4
    assert conv.input_bytes == batch * 36 * 4 and conv.output_bytes == batch * 2 * 16 * 4
    assert relu.flops == batch * 32 and not relu.counted                    # one per input element
    assert linear.flops == 2 * batch * 32 * 5 and linear.param_bytes == (32 * 5 + 5) * 4
    assert linear.intensity == linear.flops / (linear.param_bytes + batch * 32 * 4 + batch * 5 * 4)
    assert activation_bytes(costs) == (batch * 32 + batch * 32 + batch * 5) * 4
