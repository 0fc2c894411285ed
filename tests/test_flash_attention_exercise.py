"""The checker of the ``flash_attention`` exercise: its reference, its closed form, its reading and its verdicts,
held against the chapter's own code (``dlperf.attention``, ``dlperf.kernels.flash``) and buffers written by hand.

(``tests/test_flash_attention.py`` tests the library's kernel.)  The exercise's notebook, its stub and its
fixtures are graded through nbgrader and the class autograder (test_exercises.py, test_autograder.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder import course
from autograder.exercises import flash_attention as ex
from dlperf import attention as A
from dlperf.grading.probes import flash_attention as probe
from dlperf.grading.reading import read
from dlperf.kernels import flash


def _cells() -> dict[str, str]:
    return {k: course.strip_solution_markers(v) for k, v in course.solution_cells("flash_attention").items()}


# -- the reference and the closed form --------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_the_reference_is_the_chapters_attention(causal):
    q, k, v = probe.inputs(2, 13, 16, torch.float16, 3)
    assert q.shape == (2, 13, 16) and q.dtype == torch.float16 and q.is_contiguous()
    out, lse = probe.reference(q, k, v, causal)
    assert out.dtype == torch.float64 and lse.shape == (2, 13)
    assert torch.allclose(out.float(), A.attention(q.float(), k.float(), v.float(), causal=causal), atol=1e-5)
    s = (q.double() @ k.double().transpose(-1, -2)) / 4.0
    if causal:
        s = s.masked_fill(torch.ones(13, 13, dtype=torch.bool).triu(1), float("-inf"))
        assert torch.allclose(lse[:, 0], s[:, 0, 0])          # query 0 sees key 0 only
    assert torch.allclose(lse, torch.logsumexp(s, -1))


def test_the_inputs_make_the_maximum_move_from_block_to_block():
    q, k, _ = probe.inputs(2, 40, 16, torch.float16, 1)
    s = q.double() @ k.double().transpose(-1, -2)
    first, later = s[..., :16].amax(-1), s[..., 16:].amax(-1)
    assert bool((first > later).any()) and bool((later > first).any())       # the rescale matters


def test_the_solution_s_closed_form_is_the_chapters():
    namespace: dict = {}
    exec(_cells()["flash_attention-bytes"], namespace)                       # noqa: S102 - the course's own cell
    cases = ex.BYTES_CASES + ex.SELF_CHECK_BYTES_CASES + [(1, n, 16, 2, bm, bn, c) for n in (1, 15, 16, 17, 63)
                                                          for bm, bn in ((16, 16), (32, 16), (64, 16)) for c in (0, 1)]
    for heads, n, d, s, bm, bn, causal in cases:
        assert namespace["kernel_bytes"](heads, n, d, s, bm, bn, causal) == flash.flash_bytes(
            heads, n, n, d, s, bm, bn, bool(causal))
    # FlashAttention moves far less than standard attention for every graded run
    for heads, n, d, dtype, causal, bm, bn in ex.RUNS:
        fb = flash.flash_bytes(heads, n, n, d, 2, bm, bn, causal)
        assert fb["load"] + fb["store"] < 0.8 * flash.standard_bytes(heads, n, n, d, 2)


# -- the reading ------------------------------------------------------------------------------------------------

def test_the_instructor_solution_passes_the_reading():
    cells = _cells()
    assert probe.reading(cells["flash_attention-kernel"]) == []
    assert read([("bytes", cells["flash_attention-bytes"])], probe.BYTES_RULES) == []


@pytest.mark.parametrize("old, new, expect", [
    ("    m_i = tl.full(", "    import torch\n    m_i = tl.full(", "torch"),
    ("    q = tl.load(", "    tl.atomic_add(lse_ptr, 0.0)\n    q = tl.load(", "atomic_add"),
    ("    q = tl.load(", "    tl.make_block_ptr(q_ptr, (1,), (1,), (0,), (1,), (0,))\n    q = tl.load(",
     "make_block_ptr"),
    ("import triton\n", "import triton\nfrom dlperf.kernels.flash import flash_fwd_kernel as _ref\n", "dlperf"),
    ("def flash_fwd_kernel(", "def my_kernel(", "no `@triton.jit` `def flash_fwd_kernel"),
    ("    head = tl.program_id(1)", "    head = getattr(tl, 'program_id')(1)", "getattr"),
])
def test_the_kernel_s_reading(old, new, expect):
    cell = _cells()["flash_attention-kernel"]
    assert cell.count(old) == 1
    assert expect in "\n".join(probe.reading(cell.replace(old, new)))


def test_the_kernel_s_part_is_its_kernels_imports_and_constants_only():
    cell = _cells()["flash_attention-kernel"] + "\nLOG2E = 1.4426950408889634\nprint('example')\nx = [1, 2]\n"
    kept = probe.kernel_source(cell)
    assert "LOG2E = 1.44" in kept and "print" not in kept and "x = [1, 2]" not in kept
    assert "def flash_fwd_kernel" in kept and kept.count("\n") == cell.count("\n")
    assert probe.reading(cell) == []             # what is not loaded is not read


def test_the_bytes_cell_may_not_call_the_library():
    cell = "from dlperf.kernels.flash import flash_bytes\n\n\ndef kernel_bytes(h, n, d, s, bm, bn, c):\n" \
           "    return flash_bytes(h, n, n, d, s, bm, bn, c)\n"
    assert "dlperf" in "\n".join(read([("bytes", cell)], probe.BYTES_RULES))


# -- the verdicts -----------------------------------------------------------------------------------------------

def _buffers(q, k, v, causal, dtype=torch.float16):
    out, lse = probe.reference(q, k, v, causal)
    return probe.buffer(out.to(dtype), probe.OUT_FILL), probe.buffer(lse.float(), probe.OUT_FILL)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_values_verdict(dtype):
    q, k, v = probe.inputs(2, 13, 16, dtype, 5)
    out, lse = _buffers(q, k, v, True, dtype)
    assert probe.values_problem(q, k, v, True, out, lse) is None
    assert "output differs" in probe.values_problem(q, k, v, False, out, lse)     # the mask matters
    bad = lse.clone()
    bad[7] += 1e-2
    assert "log-sum-exp differs for 1 of 26" in probe.values_problem(q, k, v, True, out, bad)
    bad = out.clone()
    bad[2 * 13 * 16] = 0.0                           # the first canary after out
    assert "past the end" in probe.values_problem(q, k, v, True, bad, lse)
    bad = out.clone()
    bad[5] = float("nan")
    assert "float64 for 1 of 26 queries" in probe.values_problem(q, k, v, True, bad, lse)
    flats = [probe.buffer(t, probe.IN_FILL) for t in (q, k, v)]
    assert probe.inputs_problem(flats, [f.clone() for f in flats]) is None
    changed = [f.clone() for f in flats]
    changed[1][-1] = 0.0
    assert "input k" in probe.inputs_problem(flats, changed)


def test_the_tolerances_tell_float16_scores_from_float32_ones():
    q, k, v = probe.inputs(2, 40, 16, torch.float16, 9)
    s = (q.float() @ k.float().transpose(-1, -2)).half().double() / 4.0      # scores rounded to float16
    out, lse = _buffers(q, k, v, False)
    bad = probe.buffer(torch.logsumexp(s, -1).float(), probe.OUT_FILL)
    assert "log-sum-exp differs" in probe.values_problem(q, k, v, False, out, bad)


def test_the_traffic_verdict():
    want = flash.flash_bytes(2, 37, 37, 32, 2, 32, 16, True)
    report = {"loaded": want["load"], "stored": want["store"]}
    assert probe.traffic_problem(report, 2, 37, 32, 2, 32, 16, True) is None
    assert "nothing else" in probe.traffic_problem({**report, "stored": want["store"] + 4}, 2, 37, 32, 2, 32, 16, True)
    assert "never loaded" in probe.traffic_problem({**report, "loaded": want["load"] - 2}, 2, 37, 32, 2, 32, 16, True)
    over = math.ceil(probe.TRAFFIC_FACTOR * want["load"]) + 2
    assert "above the diagonal" in probe.traffic_problem({**report, "loaded": over}, 2, 37, 32, 2, 32, 16, True)
    assert probe.traffic_problem({"loaded": 1.0, "stored": 2}, 2, 37, 32, 2, 32, 16, True) == \
        "the probe's report is malformed"
    # a causal kernel that skips no block above the diagonal loads more than the factor allows in a graded run
    assert any(flash.flash_bytes(h, n, n, d, 2, bm, bn, False)["load"]
               > probe.TRAFFIC_FACTOR * flash.flash_bytes(h, n, n, d, 2, bm, bn, True)["load"]
               for h, n, d, dtype, causal, bm, bn in ex.RUNS if causal)


# -- the kernel, in this process (the interpreter) ----------------------------------------------------------------

def test_the_solution_kernel_launched_by_the_probe_in_this_process():
    if not flash.MODE.interpreted:
        pytest.skip("compiled Triton: the probe's launch takes CPU tensors in the interpreter")
    import linecache

    source, name = _cells()["flash_attention-kernel"], "<flash_attention-kernel: the solution>"
    linecache.cache[name] = (len(source), None, source.splitlines(True), name)      # triton.jit reads the source
    namespace: dict = {"__name__": "flash_attention_solution"}
    exec(compile(source, name, "exec"), namespace)                                   # noqa: S102
    heads, n, d, dtype, causal, bm, bn = ex.RUNS[2]
    q, k, v = probe.inputs(heads, n, d, dtype, 4)
    out, lse = probe.buffer(torch.zeros_like(q), probe.OUT_FILL), probe.buffer(torch.zeros(heads, n), probe.OUT_FILL)
    report = probe.launch_kernel(namespace["flash_fwd_kernel"], q, k, v, probe.shaped(out, q.shape),
                                 probe.shaped(lse, (heads, n)), causal, bm, bn)
    assert report["grid"] == [2, 2]
    assert probe.values_problem(q, k, v, causal, out, lse) is None
    assert probe.traffic_problem(report, heads, n, d, 2, bm, bn, causal) is None


def test_every_fixture_says_why_and_there_are_enough():
    fixtures = course.snippets("flash_attention")
    right = [p for p in fixtures if p.stem.startswith("correct_")]
    assert len(fixtures) - len(right) >= 10 and len(right) >= 2
    for path in fixtures:
        snippet = course.Snippet.parse(path)
        assert snippet.why and set(snippet.expect) == {f"flash_attention-{c}-test" for c in
                                                       ("bytes", "values", "causal", "traffic")}, path.name
        assert (sum(snippet.expect.values()) == 10) == (path in right), path.name
