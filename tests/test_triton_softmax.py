"""The checker of the ``triton_softmax`` exercise: its source reading against snippets written here, the minimum
traffic and the expected values (no kernel runs here: the fixtures in tests/submissions/triton_softmax run them)."""

from __future__ import annotations

import pytest
import torch

from autograder.exercises import triton_softmax as ts

KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + r * stride_x + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + r * stride_out + c, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=c < n_cols)
'''
LAUNCHER = '''
import torch
import triton


def softmax(x):
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError("a contiguous 2-D tensor")
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0),
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
'''


def findings(kernel: str = KERNEL, launcher: str = LAUNCHER) -> str:
    return "\n".join(ts.static_findings([kernel, launcher]))


def test_a_plain_kernel_and_launcher_pass():
    assert findings() == ""


def test_allowed_variations_pass():
    # tl imported from triton, a grid lambda, a helper of the launcher, a helper kernel, math on Python numbers
    kernel = KERNEL.replace("import triton.language as tl", "from triton import language as tl").replace(
        "    e = tl.exp(v - tl.max(v, axis=0))", "    e = shifted_exp(v)") + '''

@triton.jit
def shifted_exp(v):
    return tl.exp(v - tl.max(v, axis=0))
'''
    launcher = LAUNCHER.replace("import triton\n", "import math\n\nimport triton\n").replace(
        "    out = torch.empty_like(x)", "    out = allocate(x)\n    grid = lambda meta: (x.shape[0],)").replace(
        "softmax_kernel[(x.shape[0],)]", "softmax_kernel[grid]").replace(
        "BLOCK=triton.next_power_of_2(x.shape[1])", "BLOCK=2 ** math.ceil(math.log2(x.shape[1]))") + '''

def allocate(x):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
'''
    assert findings(kernel, launcher) == ""


@pytest.mark.parametrize("old, new, expect", [
    ("    out = torch.empty_like(x)", "    out = torch.softmax(x, dim=1)", "uses torch.softmax outside the kernel"),
    ("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    x = x.exp()", "calls .exp(...) outside"),
    ("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    m = x.max(dim=1)", "calls .max(...) outside"),
    ("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    s = (x - 1) / 2", ""),   # arithmetic alone: no call
    ("import torch\n", "import torch\nimport numpy as np\n", "imports numpy"),
    ("import torch\n", "import torch\nfrom dlperf.kernels.triton_kernels import softmax_kernel\n",
     "imports dlperf.kernels.triton_kernels"),
    ("import torch\n", "import torch\nfrom torch import softmax\n", "imports torch.softmax"),
    ("    out = torch.empty_like(x)", "    out = getattr(torch, 'empty_like')(x)", "uses getattr"),
    ("    out = torch.empty_like(x)", "    out = torch._C._nn.softmax(x)", "private or special attribute ._C"),
    ("    return out", "    return out.to(x.dtype)", "calls .to(...) outside"),
    ("    softmax_kernel[", "    k = softmax_kernel\n    k[", "not a @triton.jit function"),
])
def test_the_launcher_may_not_work_on_the_data(old, new, expect):
    assert old in LAUNCHER
    text = findings(launcher=LAUNCHER.replace(old, new))
    if expect:
        assert expect in text, text
    else:
        assert text == "", text


@pytest.mark.parametrize("old, new, expect", [
    ("@triton.jit\n", "", "no function is decorated with @triton.jit"),
    ("@triton.jit\n", "@triton.autotune(configs=[], key=[])\n@triton.jit\n", "uses .autotune"),
    ("    v = tl.load(", "    v = helper(x_ptr)\n    v = tl.load(", "the kernel softmax_kernel uses helper"),
    ("    v = tl.load(", "    v = torch.softmax(x_ptr)\n    v = tl.load(", "the kernel softmax_kernel uses torch"),
    ("    v = tl.load(x_ptr + r * stride_x + c, mask=c < n_cols, other=-float(\"inf\"))",
     "    v = tl.load(tl.make_block_ptr(x_ptr, (n_cols,), (1,), (0,), (BLOCK,), (0,)))", "uses .make_block_ptr"),
    ("    e = tl.exp(", "    tl.atomic_add(out_ptr, 0.0)\n    e = tl.exp(", "uses .atomic_add"),
    ("    v = tl.load(", "    w = x_ptr.handle\n    v = tl.load(", "uses .handle"),
])
def test_the_kernel_is_a_kernel(old, new, expect):
    assert old in KERNEL
    text = findings(kernel=KERNEL.replace(old, new))
    assert expect in text, text


def test_loads_stores_and_a_launch_are_required():
    no_load = KERNEL.replace('tl.load(x_ptr + r * stride_x + c, mask=c < n_cols, other=-float("inf"))',
                             "tl.zeros((BLOCK,), dtype=tl.float32)")
    assert "no kernel calls tl.load" in findings(kernel=no_load)
    no_store = KERNEL.replace("    tl.store(", "    tl.device_print(\"y\", ")
    assert "no kernel calls tl.store" in findings(kernel=no_store)
    assert "nothing launches" in findings(launcher="import torch\n\n\ndef softmax(x):\n    return x\n")
    assert "without a grid" in findings(launcher=LAUNCHER.replace("softmax_kernel[(x.shape[0],)]", "softmax_kernel"))


def test_a_cell_that_does_not_parse_is_said():
    assert "does not parse" in findings(launcher="def softmax(x):\n    return (\n")


def test_minimum_traffic_and_expected_values():
    assert ts.minimum_bytes(13, 300, 4) == 15_600 and ts.minimum_bytes(16, 200, 2) == 6_400
    x = torch.tensor([[0.0, 0.0], [1e4, 1e4 + 8]], dtype=torch.float16)   # float16 steps of 8 near 1e4
    y = ts.expected(x)
    assert y.dtype == torch.float16
    assert torch.equal(y[0], torch.tensor([0.5, 0.5], dtype=torch.float16))
    want = torch.softmax(torch.tensor([0.0, 8.0]), 0).half()
    assert torch.equal(y[1], want)
    a, b = ts.make_input("case", 3, 5), ts.make_input("case", 3, 5)
    assert a.shape == (3, 5) and a.dtype == torch.float32 and torch.equal(a, b) and a.is_contiguous()
