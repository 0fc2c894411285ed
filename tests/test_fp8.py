"""dlperf.fp8: the two formats' layouts, scaled casts against hand-worked values, and the captured operands."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from dlperf import fp8

E4M3, E5M2 = fp8.FP8["E4M3"], fp8.FP8["E5M2"]


def test_layouts_are_the_papers():
    a, b = fp8.layout(E4M3), fp8.layout(E5M2)      # Micikevicius et al. 2022, table 1
    assert (a["exponent"], a["mantissa"], a["max"], a["normal"], a["subnormal"]) == (4, 3, 448.0, 2**-6, 2**-9)
    assert (b["exponent"], b["mantissa"], b["max"], b["normal"], b["subnormal"]) == (5, 2, 57344.0, 2**-14, 2**-16)
    assert a["eps"] == 2**-3 and b["eps"] == 2**-2


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_tensorwise_scale_puts_amax_on_the_largest_value(dtype):
    x = torch.tensor([[1e-3, -2e-3], [4e-3, 5e-4]])
    xq, scale = fp8.quantize(x, dtype, "tensor")
    assert scale.item() == pytest.approx(torch.finfo(dtype).max / 4e-3)
    assert xq[1, 0].item() == pytest.approx(4e-3, rel=1e-6)          # amax is exact
    eps = torch.finfo(dtype).eps
    assert ((xq - x).abs() <= x.abs() * eps / 2 * 1.0001).all()      # normal values: half a spacing


def test_rowwise_scales_each_row_and_saves_the_small_rows():
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(0))
    x[0] *= 1e4                                                       # one outlier row
    _, scale = fp8.quantize(x, E4M3, "row")
    assert scale.shape == (4, 1)
    tensor = fp8.quantization_error(x, fp8.quantize(x, E4M3, "tensor")[0])
    row = fp8.quantization_error(x, fp8.quantize(x, E4M3, "row")[0])
    assert row["worst_row"] < 0.05 < tensor["worst_row"]
    assert row["underflow"] == 0.0 < tensor["underflow"]


def test_no_scale_saturates_and_underflows():
    x = torch.tensor([1000.0, 1e-4, 1.0])
    xq, _ = fp8.quantize(x, E4M3, "none")
    assert xq.tolist() == [448.0, 0.0, 1.0]                           # saturated, not NaN; flushed to 0
    assert fp8.quantization_error(x, xq)["underflow"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="granularity"):
        fp8.quantize(x, E4M3, "column")


def test_one_more_mantissa_bit_halves_the_error():
    x = torch.randn(256, 256, generator=torch.Generator().manual_seed(1))
    e4 = fp8.quantization_error(x, fp8.quantize(x, E4M3)[0])["relative"]
    e5 = fp8.quantization_error(x, fp8.quantize(x, E5M2)[0])["relative"]
    assert 1.6 < e5 / e4 < 2.4


def test_capture_linear_returns_each_layers_operands():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3))
    x, y = torch.randn(5, 8), torch.randint(0, 3, (5,))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = fp8.capture_linear(model, lambda: nn.functional.cross_entropy(model(x), y))
    assert list(got) == ["0", "2"]
    assert got["0"]["activation"].shape == (5, 8) and got["2"]["activation"].shape == (5, 6)
    assert got["2"]["gradient"].shape == (5, 3) and got["0"]["weight"].shape == (6, 8)
    torch.testing.assert_close(got["0"]["activation"], x)
    p = torch.softmax(model(x), -1)                                    # d(mean CE)/d(logits)
    torch.testing.assert_close(got["2"]["gradient"], (p - nn.functional.one_hot(y, 3)) / 5)
    assert not model[0]._forward_hooks and not model[0]._backward_hooks


@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_scaled_mm_operands_dequantise_to_the_inputs_and_their_product_to_the_product(granularity):
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(48, 64, generator=g), torch.randn(64, 40, generator=g)
    a[5] *= 100                                              # an outlier row of a
    a8, b8, sa, sb = fp8.scaled_mm_operands(a, b, granularity)
    assert a8.dtype == b8.dtype == torch.float8_e4m3fn and b8.stride() == (1, 64)       # b column-major
    assert sa.shape == (() if granularity == "tensor" else (48, 1))
    assert sb.shape == (() if granularity == "tensor" else (1, 40))
    fmax = torch.finfo(torch.float8_e4m3fn).max
    assert (a8.float() * sa).abs().amax() == pytest.approx(a.abs().amax().item(), rel=1e-6)
    assert (a8.float().abs().amax(dim=1) == fmax).all() == (granularity == "row")    # each row on the largest
    exact = a @ b
    got = fp8.scaled_mm(a, b, granularity).float()
    assert ((got - exact).norm() / exact.norm()).item() < 0.06      # E4M3: 3 mantissa bits
    with pytest.raises(ValueError, match="granularity"):
        fp8.scaled_mm_operands(a, b, "none")
    with pytest.raises(ValueError, match="M x K"):
        fp8.scaled_mm_operands(a, a, granularity)


@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_the_emulated_product_is_what_scaled_mm_computes(granularity):
    """The CPU stand-in for rowwise scales (torch 2.11's CPU backend has per-tensor scales only) against
    torch._scaled_mm itself, where this torch computes it on the CPU."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(64, 96, generator=g) * 5, torch.randn(96, 48, generator=g) / 3
    ops = fp8.scaled_mm_operands(a, b, granularity)
    try:
        real = torch._scaled_mm(*ops[:2], scale_a=ops[2], scale_b=ops[3], out_dtype=torch.float32)
    except RuntimeError as exc:
        pytest.skip(f"this torch's CPU _scaled_mm refuses {granularity} scales: {exc}")
    emulated = fp8.emulated_scaled_mm(*ops, out_dtype=torch.float32)
    torch.testing.assert_close(emulated, real, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(fp8.scaled_mm(a, b, granularity, out_dtype=torch.float32), real, rtol=1e-5, atol=1e-4)
