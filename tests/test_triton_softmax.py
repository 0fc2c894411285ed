"""The checker of the ``triton_softmax`` exercise: the public reading (an allow-list) against snippets written
here, the kernel's part the grader loads, the launcher's verdict from what the stand-in recorded, the canaries and
the traffic rule, and the two grader-side measurements through real hosts (the fixtures in
tests/submissions/triton_softmax grade whole submissions)."""

from __future__ import annotations

import pytest
import torch

from autograder import course
from autograder.exercises import triton_softmax as ts
from dlperf.grading.probes import triton_softmax as probe

KERNEL = '''import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    v = tl.load(x_ptr + r * stride_x + c, mask=c < n_cols, other=-float("inf")).to(tl.float32)
    e = tl.exp(v - tl.max(v, axis=0))
    tl.store(out_ptr + r * stride_out + c, (e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=c < n_cols)
'''
LAUNCHER = '''import torch
import triton


def softmax(x):
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError("a contiguous 2-D tensor")
    out = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0),
                                  BLOCK=triton.next_power_of_2(x.shape[1]))
    return out
'''


def kernel_findings(kernel: str = KERNEL) -> str:
    return "\n".join(probe.reading(kernel)[0])


def launcher_findings(launcher: str = LAUNCHER, kernel: str = KERNEL) -> str:
    return "\n".join(probe.reading(kernel, launcher)[1])


# ---------------------------------------------------------------------------------------------
# The reading
# ---------------------------------------------------------------------------------------------


def test_the_instructor_solution_passes_the_reading():
    cells = {k: course.strip_solution_markers(v) for k, v in course.solution_cells("triton_softmax").items()}
    kernel, launcher = cells["triton_softmax-kernel"], cells["triton_softmax-launcher"]
    assert probe.reading(kernel, launcher) == ([], [])
    assert kernel_findings() == "" and launcher_findings() == ""


def test_correct_variations_pass():
    # tl imported from triton, a jit helper, tl.where masking, exp2 with a module constant, a grid function,
    # x.size(0), torch.empty(x.shape, ...), math on Python numbers, launch options, keyword arguments
    kernel = '''import math

import torch
import triton
from triton import language as tl

LOG2E = 1.4426950408889634
SCALE: tl.constexpr = tl.constexpr(1.0)


@triton.jit
def shifted_exp2(v):
    return tl.exp2((v - tl.max(v, axis=0)) * LOG2E)


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK: tl.constexpr):
    row = tl.program_id(axis=0)
    cols = tl.arange(0, BLOCK)
    ok = cols < n_cols
    v = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    v = tl.where(ok, v, float("-inf"))
    p = shifted_exp2(v) * SCALE
    tl.store(out_ptr + row * stride_out + cols, p / tl.sum(p, axis=0), mask=ok)


def helper_not_run_by_the_grader(t):
    return torch.softmax(t, dim=1)


print(helper_not_run_by_the_grader(torch.randn(2, 3)))
'''
    launcher = '''import math

import torch
import triton


def softmax(x):
    if x.ndim != 2 or not x.is_contiguous():
        raise ValueError(f"expected a contiguous 2-D tensor, got {tuple(x.shape)}")
    rows, cols = x.size(0), x.size(1)
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    block = max(1, 2 ** math.ceil(math.log2(cols))) if cols > 1 else 1
    assert block == 1 << (cols - 1).bit_length() == triton.next_power_of_2(cols)
    grid = lambda meta: (triton.cdiv(rows, 1),)
    softmax_kernel[grid](x_ptr=x, out_ptr=out, n_cols=cols, stride_x=x.stride(0), stride_out=out.stride(0),
                         BLOCK=block, num_warps=4)
    return out
'''
    assert kernel_findings(kernel) == ""
    assert launcher_findings(launcher, kernel) == ""
    part = probe.kernel_source(kernel)
    assert "helper_not_run_by_the_grader" not in part and "print" not in part and "LOG2E = 1.44" in part
    assert part.count("\n") == kernel.count("\n")            # the cell's line numbers
    assert probe.kernel_parameters(kernel) == probe.PARAMETERS


@pytest.mark.parametrize("old, new, expect", [
    ("    out = torch.empty_like(x)", "    out = torch.softmax(x, dim=1)", "uses torch.softmax"),
    ("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    x = x.exp()", "uses .exp"),
    ("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    m = x.max(dim=1)", "uses .max"),
    ("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    s = (x - 1) / 2", ""),  # the cross-check's job
    ("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    n = (x.shape[1] - 1).bit_length()", ""),
    ("import torch\n", "import torch\nimport numpy as np\n", "imports numpy"),
    ("import torch\n", "import torch\nfrom dlperf.kernels.triton_kernels import softmax_kernel\n",
     "imports from dlperf.kernels.triton_kernels"),
    ("import torch\n", "import torch\nfrom torch import softmax\n", "torch.softmax"),
    ("    out = torch.empty_like(x)", "    out = getattr(torch, 'empty_like')(x)", "getattr"),
    ("    out = torch.empty_like(x)", "    out = torch._C._nn.softmax(x)", "private name"),
    ("    out = torch.empty_like(x)", "    out = torch.nn.functional.softmax(x, 1)", "torch.nn.functional.softmax"),
    ("    return out", "    return out.to(x.dtype)", "uses .to"),
    ("    if x.dim()", "    x = x.contiguous()\n    if x.dim()", "not a copy"),
    ("    if x.dim()", "    if type(softmax_kernel) is None:\n        return x\n    if x.dim()", "type"),
    ("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    out.data = x", "uses .data"),
    ("    return out", "    return helper(out)", "uses helper, which these cells do not define"),
])
def test_the_launcher_s_reading(old, new, expect):
    assert old in LAUNCHER
    text = launcher_findings(LAUNCHER.replace(old, new))
    if expect:
        assert expect in text and text.startswith("your launcher's cell"), text
    else:
        assert text == "", text


@pytest.mark.parametrize("old, new, expect", [
    ("@triton.jit\n", "@triton.autotune(configs=[], key=[])\n@triton.jit\n", "triton.autotune"),
    ("    v = tl.load(", "    v = helper(x_ptr)\n    v = tl.load(", "uses helper, which these cells do not define"),
    ("    v = tl.load(", "    w = torch.softmax(x_ptr)\n    v = tl.load(", "torch"),
    ("    e = tl.exp(v - tl.max(v, axis=0))", "    e = tl.softmax(v)", "triton.language.softmax"),
    ("    v = tl.load(x_ptr + r * stride_x + c, mask=c < n_cols, other=-float(\"inf\"))",
     "    v = tl.load(tl.make_block_ptr(x_ptr, (n_cols,), (1,), (0,), (BLOCK,), (0,)))", "make_block_ptr"),
    ("    e = tl.exp(", "    tl.atomic_add(out_ptr, 0.0)\n    e = tl.exp(", "atomic_add"),
    ("    v = tl.load(", "    w = x_ptr.handle.data\n    v = tl.load(", ".handle"),
    ("    v = tl.load(", "    w = x_ptr.__class__\n    v = tl.load(", "special"),
    ("    v = tl.load(", "    w = getattr(tl, 'lo' + 'ad')\n    v = tl.load(", "getattr"),
    ("    v = tl.load(", "    w = tl.core.tensor\n    v = tl.load(", "triton.language.core.tensor"),
    ("import triton\n", "import triton\nimport dlperf.kernels.traffic as counter\n", "imports dlperf"),
    ("import triton\n", "import triton\nfrom triton.runtime import interpreter\n", "imports from triton.runtime"),
])
def test_the_kernel_s_reading(old, new, expect):
    assert old in KERNEL
    text = kernel_findings(KERNEL.replace(old, new))
    assert expect in text and text.startswith("your kernel's cell"), text


def test_the_kernel_s_part_is_its_kernels_imports_and_constants_only():
    cell = KERNEL + "\nx = torch.randn(3, 4)\nCOUNT = len([1, 2])\nHALF = 1 / 2\n"
    part = probe.kernel_source(cell)
    assert "randn" not in part and "COUNT" not in part and "HALF = 1 / 2" in part and "def softmax_kernel" in part
    # two statements on one line, one kept and one not: the part is rebuilt from the kept statements
    part = probe.kernel_source(cell + "import math; y = len([])\n")
    assert "import math" in part and "y =" not in part and "randn" not in part and "def softmax_kernel" in part
    # a helper of the kernel cell that is not a kernel is not loaded: the reading says so, not a NameError later
    helper = KERNEL.replace("    e = tl.exp(", "    e = shift(v)\n    e = tl.exp(") + "\n\ndef shift(v):\n    return v\n"
    assert "uses shift, which these cells do not define" in kernel_findings(helper)
    assert "does not parse" in kernel_findings("def softmax_kernel(:\n")
    wrapped = KERNEL.replace("@triton.jit\ndef softmax_kernel", "def plain") + "\nsoftmax_kernel = triton.jit(plain)\n"
    assert "no `@triton.jit` `def softmax_kernel(...)`" in kernel_findings(wrapped)


# ---------------------------------------------------------------------------------------------
# The launcher's verdict
# ---------------------------------------------------------------------------------------------


def _launch(x, out, *rest, grid=None, **kwargs):
    rows, cols = x.shape
    args = [x, out, *rest] if rest else [x, out, cols, x.stride(0), out.stride(0), probe.next_power_of_2(cols)]
    return {"grid": [rows] if grid is None else grid, "args": args, "kwargs": kwargs}


def test_the_launcher_s_verdict():
    x = torch.randn(5, 300)
    want = probe.transform(x, -1.5, 0.25)
    out = torch.empty_like(x)
    right = _launch(x, out)
    assert probe.launcher_problems(x, want.clone(), [right], want) == []
    assert probe.launcher_problems(x, want.clone(), [{**right, "grid": [5, 1, 1]}], want) == []
    by_name = {"grid": [5], "args": [x], "kwargs": {"out_ptr": out, "n_cols": 300, "stride_x": 300, "stride_out": 300,
                                                     "BLOCK": 512, "num_warps": 4}}
    assert probe.launcher_problems(x, want.clone(), [by_name], want) == []

    def said(result, launches):
        return "; ".join(probe.launcher_problems(x, result, launches, want))

    assert "never launched" in said(want, [])
    assert "2 times" in said(want, [right, right])
    assert "grid was [1]" in said(want, [{**right, "grid": [1]}])
    assert "BLOCK was 1024, expected 512" in said(want, [_launch(x, out, 300, 300, 300, 1024)])
    assert "stride_x was 1" in said(want, [_launch(x, out, 300, 1, 300, 512)])
    assert "not x as given" in said(want, [_launch(x - 1, out)])
    assert "not x as given" in said(want, [_launch(x.half(), out)])
    assert "expected a new float32 tensor" in said(want, [_launch(x, out.double())])
    assert "did not return" in said(torch.softmax(x, 1), [right])
    assert "did not return" in said(want.double(), [right])
    assert "does not take" in said(want, [{**right, "kwargs": {"BLOCK_SIZE": 512}}])
    assert "did not pass" in said(want, [{**right, "args": right["args"][:5]}])


def test_the_recorder_writes_the_transform_into_the_output_it_is_given():
    x = torch.randn(3, 7)
    rec = probe.Recorder(x, 2.0, -1.0)
    out = torch.zeros_like(x)
    rec([3], x, out, 7, 7, 7, 8)
    assert torch.equal(out, probe.transform(x, 2.0, -1.0)) and rec.launches[0]["grid"] == [3]


def test_observe_runs_a_launcher_with_the_stand_in_in_this_process():
    namespace: dict = {}
    exec(LAUNCHER, namespace)   # noqa: S102 - the reference launcher, written here
    x = torch.randn(4, 9)
    got, raised, launches = probe.observe(namespace["softmax"], x, 3.0, 1.0)
    assert raised is None and probe.launcher_problems(x, got, launches, probe.transform(x, 3.0, 1.0)) == []
    assert "softmax_kernel" not in namespace           # the stand-in is gone afterwards
    _, raised, launches = probe.observe(namespace["softmax"], x.t(), 3.0, 1.0)
    assert isinstance(raised, ValueError) and launches == []


# ---------------------------------------------------------------------------------------------
# Canaries, traffic, expected values
# ---------------------------------------------------------------------------------------------


def test_the_layout_and_its_canaries():
    x = torch.arange(12.0).view(3, 4)
    flat = probe.layout(x, 6, -7.0)
    assert flat.numel() == 3 * 6 + 4 and torch.equal(probe.rows_of(flat, 3, 4, 6), x)
    assert probe.intact(flat, 3, 4, 6, -7.0)
    flat[4] = 0.0                      # row 0's padding
    assert not probe.intact(flat, 3, 4, 6, -7.0)
    half = probe.layout(x.half(), 4, -7.0)
    half[-1] = 1.0                     # past the last row
    assert not probe.intact(half, 3, 4, 4, -7.0)


def test_the_traffic_rule():
    need = 13 * 300 * 4
    assert probe.traffic_problem({"loaded": need, "stored": need}, 13, 300, 4) is None
    assert probe.traffic_problem({"loaded": int(1.5 * need), "stored": need}, 13, 300, 4) is None
    assert "at most 1.25x" in probe.traffic_problem({"loaded": 3 * need, "stored": need}, 13, 300, 4)
    assert "never read or written" in probe.traffic_problem({"loaded": need - 4, "stored": need}, 13, 300, 4)
    assert "malformed" in probe.traffic_problem({"loaded": 1.0, "stored": need}, 13, 300, 4)


def test_minimum_traffic_and_expected_values():
    assert ts.minimum_bytes(13, 300, 4) == 15_600 and ts.minimum_bytes(16, 200, 2) == 6_400
    x = torch.tensor([[0.0, 0.0], [1e4, 1e4 + 8]], dtype=torch.float16)   # float16 steps of 8 near 1e4
    y = ts.expected(x)
    assert y.dtype == torch.float16
    assert torch.equal(y[0], torch.tensor([0.5, 0.5], dtype=torch.float16))
    assert torch.equal(y[1], torch.softmax(torch.tensor([0.0, 8.0]), 0).half())
    a, b = ts.make_input("case", 3, 5), ts.make_input("case", 3, 5)
    assert a.shape == (3, 5) and a.dtype == torch.float32 and torch.equal(a, b) and a.is_contiguous()
    assert probe.compare(y, y) is None and "outside the tolerance" in probe.compare(y.flip(1), y)
    assert probe.next_power_of_2(1) == 1 and probe.next_power_of_2(1500) == 2048 and probe.next_power_of_2(1024) == 1024


# ---------------------------------------------------------------------------------------------
# Through real hosts: the grader's launch of the kernel alone, and the stand-in's callbacks
# ---------------------------------------------------------------------------------------------


def test_the_grader_launches_the_kernel_alone_and_reads_its_output_itself():
    from autograder.trusted import CheckFailed, Student

    cell = KERNEL + "\nraise RuntimeError('the rest of the cell never runs in the grader')\n"
    with Student(parts=[ts._setup(True), ("kernel cell", probe.kernel_source(cell))]) as host:
        x = ts.make_input("test", 5, 300)
        ts.check_kernel(host, x, "padded", pad_x=17, pad_out=3)
        report = ts.check_traffic(host, x, "traffic")
        assert report["loaded"] == report["stored"] == 5 * 300 * 4
    unmasked = KERNEL.replace("(e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty), mask=c < n_cols)",
                              "(e / tl.sum(e, axis=0)).to(out_ptr.dtype.element_ty))")
    with Student(parts=[ts._setup(True), ("kernel cell", unmasked)]) as host:
        with pytest.raises(CheckFailed, match="wrote outside the output's rows"):
            ts.check_kernel(host, ts.make_input("test", 3, 100), "unmasked")


def test_the_stand_in_s_callbacks_see_the_launch_and_write_the_output():
    from autograder.trusted import CheckFailed, Student

    def host(launcher):
        h = Student(parts=[ts._setup(True), ("kernels", "softmax_kernel = None\n"), ("launcher cell", launcher)])
        h.parameters = probe.PARAMETERS
        return h

    x = ts.make_input("test", 3, 1500)
    with host(LAUNCHER) as h:
        ts.check_launcher(h, x, "reference")
        ts.check_rejects(h, ts.make_input("r", 6, 10), (10, 6), (1, 10), "transposed")
    in_place = LAUNCHER.replace("out = torch.empty_like(x)", "out = x")
    with host(in_place) as h, pytest.raises(CheckFailed, match="changed its input x"):
        ts.check_launcher(h, x, "in place")
    after = LAUNCHER.replace("    return out", "    return out / (out.sum(dim=1, keepdim=True) + 0 * x)")
    with host(after) as h, pytest.raises(CheckFailed, match="did not return"):
        ts.check_launcher(h, x, "operators after the launch")
    before = LAUNCHER.replace("    out = torch.empty_like(x)", "    out = torch.empty_like(x)\n    x = x - 0.5")
    with host(before) as h, pytest.raises(CheckFailed, match="not x as given"):
        ts.check_launcher(h, x, "operators before the launch")
    twice = LAUNCHER.replace("    return out", "    softmax_kernel[(1,)](x, out, 1, 1, 1, BLOCK=1)\n    return out")
    with host(twice) as h, pytest.raises(CheckFailed, match="2 times"):
        ts.check_launcher(h, x, "twice")
    no_check = LAUNCHER.replace(" or not x.is_contiguous()", "")
    with host(no_check) as h, pytest.raises(CheckFailed, match="without raising"):
        ts.check_rejects(h, ts.make_input("r", 6, 10), (10, 6), (1, 10), "transposed")


def test_every_fixture_says_why_and_there_are_enough():
    fixtures = course.snippets("triton_softmax")
    wrong = [p for p in fixtures if not p.stem.startswith("correct_")]
    right = [p for p in fixtures if p.stem.startswith("correct_")]
    assert len(wrong) >= 15 and len(right) >= 2, (len(wrong), len(right))
    for path in fixtures:
        snippet = course.Snippet.parse(path)
        assert snippet.why and set(snippet.expect) == {f"triton_softmax-{c}-test" for c in
                                                       ("values", "half", "traffic", "launcher")}, path.name
        assert (sum(snippet.expect.values()) == 10) == (path in right), path.name
