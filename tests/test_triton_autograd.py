"""A Triton kernel in autograd (``dlperf.kernels.autograd``): values and gradients against PyTorch's GELU,
the bytes of the forward and backward kernels counted in the interpreter, and what autograd saves."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from dlperf.kernels import autograd as AG
from dlperf.kernels.traffic import count
from dlperf.memory import SavedTensors


def _exact(x: torch.Tensor, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GELU (tanh form) as x sigmoid(2u), its gradient times dy by float64 autograd (not the kernels'
    hand-derived slope), and the condition number of the value (how much float32's rounding of u is
    amplified: 1 + |2u| (1 - sigmoid(2u)), large far below zero)."""
    x64 = x.detach().double().requires_grad_()
    u = 0.7978845608028654 * (x64 + 0.044715 * x64**3)
    y = x64 * torch.sigmoid(2 * u)
    (grad,) = torch.autograd.grad(y, [x64], dy.double())
    with torch.no_grad():
        cond = 1 + (2 * u).abs() * (1 - torch.sigmoid(2 * u))
    return y.detach(), grad, cond


def test_the_reference_is_pytorchs_gelu():
    x = torch.linspace(-4, 4, 801, dtype=torch.float64)
    y, _, _ = _exact(x, torch.ones(801))
    torch.testing.assert_close(y, F.gelu(x, approximate="tanh"), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("n", [1, 1000, 4096 + 3])
def test_forward_and_backward_equal_gelu_in_float64_to_float32s_rounding(n):
    g = torch.Generator().manual_seed(n)
    x = (3 * torch.randn(n, generator=g)).requires_grad_()
    dy = torch.randn(n, generator=g)
    ours = AG.gelu(x)
    (ours * dy).sum().backward()
    y64, grad64, cond = _exact(x, dy)
    eps = torch.finfo(torch.float32).eps
    tiny = torch.finfo(torch.float32).tiny
    assert ((ours.double() - y64).abs() <= 4 * eps * cond * y64.abs() + tiny).all()
    scale = (grad64.abs() + dy.abs().double()) * cond * (1 + x.detach().abs().double())
    assert ((x.grad.double() - grad64).abs() <= 4 * eps * scale + tiny).all()


def test_half_precision_inputs_are_computed_in_float32_and_rounded_once():
    x = torch.linspace(-6, 6, 2001).half().requires_grad_()
    y = AG.gelu(x)
    assert y.dtype == torch.float16
    y64, grad64, _ = _exact(x, torch.ones(x.shape))
    ulp = (torch.finfo(torch.float16).eps * y64.abs()).clamp(min=2**-24)   # float16's unit in the last place
    assert ((y.double() - y64).abs() <= ulp).all()
    y.sum().backward()
    assert x.grad.dtype == torch.float16
    ulp = (torch.finfo(torch.float16).eps * grad64.abs()).clamp(min=2**-24)
    assert ((x.grad.double() - grad64).abs() <= ulp).all()


def test_the_kernels_move_the_bytes_of_one_pass_each():
    n, s = 3000, 4
    x = torch.randn(n, requires_grad=True)
    y, fwd = count(AG.gelu, x)
    assert (fwd.loaded_bytes, fwd.stored_bytes) == (n * s, n * s)
    _, bwd = count(lambda: y.backward(torch.ones(n)))
    assert (bwd.loaded_bytes, bwd.stored_bytes) == (2 * n * s, n * s)


def test_autograd_saves_the_input_only():
    x = torch.randn(4096, requires_grad=True)
    with SavedTensors(exclude=[x]) as ours:
        AG.gelu(x)
    with SavedTensors(exclude=[x]) as eager:
        0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))
    assert ours.nbytes == 0                          # x itself, excluded: nothing else is kept
    assert eager.nbytes >= 3 * x.numel() * 4         # the formula's intermediates, kept for its backward


def test_the_registered_operator_computes_the_same_value_and_gradient():
    op = AG.register_op("dlperf_test::triton_gelu")
    x = torch.linspace(-5, 5, 777, requires_grad=True)
    y = op(x)
    y.sum().backward()
    grad, x.grad = x.grad, None
    AG.gelu(x).sum().backward()
    torch.testing.assert_close(y, AG.gelu(x.detach()), rtol=0, atol=0)
    torch.testing.assert_close(grad, x.grad, rtol=0, atol=0)
