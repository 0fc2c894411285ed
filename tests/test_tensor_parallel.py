"""The ``tensor_parallel`` checker's own parts: the reference against PyTorch's multi-head attention, the shards,
the reading's rules, and the verdicts on the chapter's own f and g (``dlperf.parallel.tensor``) run as a
submission, right and with one pass's all-reduce left out.

The exercise's notebook, its stub and its fixtures (wrong submissions and correct alternatives) are graded
through nbgrader and the class autograder (test_exercises.py, test_autograder.py); here the checker is held
against implementations it was not written from.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812 - the usual name

from autograder import course
from autograder.exercises import tensor_parallel as ex
from autograder.trusted import CheckFailed
from dlperf.grading.probes import tensor_parallel as probe
from dlperf.grading.reading import read


@pytest.mark.parametrize("tokens, heads, head_dim", [(5, 4, 3), (6, 6, 2), (7, 1, 5)])
def test_the_reference_is_pytorchs_multi_head_attention(tokens, heads, head_dim):
    tensors, grad_out = ex.inputs(tokens, heads, head_dim, 3)
    out, grads = ex.reference(tensors, heads, grad_out)
    leaves = [t.double().requires_grad_(True) for t in tensors]
    x, wq, bq, wk, bk, wv, bv, wo, bo = leaves
    xb = x.unsqueeze(1)                                     # tokens x batch 1 x hidden, MHA's layout
    want, _ = F.multi_head_attention_forward(
        xb, xb, xb, x.shape[1], heads, torch.cat([wq, wk, wv]), torch.cat([bq, bk, bv]), None, None, False, 0.0,
        wo, bo, training=False, need_weights=False)
    want = want.squeeze(1)
    want.backward(grad_out.double())
    assert torch.allclose(out, want.detach(), atol=1e-10)
    for name, got, leaf in zip(probe.NAMES, grads, leaves):
        assert torch.allclose(got, leaf.grad, atol=1e-10), name


@pytest.mark.parametrize("n, heads", [(2, 4), (3, 3), (3, 6)])
def test_the_shards_of_all_ranks_make_the_whole_tensors(n, heads):
    tensors, _ = ex.inputs(4, heads, 2, 1)
    shards = [ex.shard(tensors, heads, n, r) for r in range(n)]
    x, wq, bq, wk, bk, wv, bv, wo, bo = tensors
    for i, whole in ((1, wq), (2, bq), (3, wk), (4, bk), (5, wv), (6, bv)):
        assert torch.equal(torch.cat([s[i] for s in shards]), whole)
    assert torch.equal(torch.cat([s[7] for s in shards], dim=1), wo)
    assert all(torch.equal(s[0], x) and torch.equal(s[8], bo) for s in shards)
    assert shards[0][1].shape == (heads // n * 2, heads * 2)


def _solution_parts() -> list[tuple[str, str]]:
    return [(grade_id, course.strip_solution_markers(code)) for grade_id, code in
            course.solution_cells("tensor_parallel").items()]


def test_the_reading_lets_the_solution_through():
    assert read(_solution_parts(), probe.RULES) == []


@pytest.mark.parametrize("code", [
    "from dlperf.parallel import tensor as TP\n",
    "import torch\n\ndef f(q, k, v):\n    return torch.nn.functional.scaled_dot_product_attention(q, k, v)\n",
    "import torch.distributed.nn.functional as DF\n",
    "import torch.distributed as dist\n\ndef f(x):\n    return getattr(dist, 'all_reduce')\n",
    "import torch\n\ndef f(x):\n    return x.__class__\n",
    "import torch.distributed.tensor\n",
    "import torch\n\nclass G(torch.autograd.Function):\n    def __call__(self, x):\n        return x\n",
])
def test_the_reading_refuses_what_the_exercise_does_not_need(code):
    assert read([*_solution_parts(), ("extra", code)], probe.RULES)


# The chapter's f and g (dlperf.parallel.tensor, written apart from this checker) in an attention block written
# here; SKIP names the pass whose all-reduce is left out ("" for none).
_LIBRARY_BLOCK = '''
import math

import torch
from dlperf.parallel import tensor as TP


def copy_to_parallel(x):
    return x if SKIP == "backward" else TP.CopyToParallel.apply(x, None, None)


def reduce_from_parallel(x):
    return x if SKIP == "forward" else TP.ReduceFromParallel.apply(x, None, None)


def parallel_attention(x, wq, bq, wk, bk, wv, bv, wo, bo, heads):
    x = copy_to_parallel(x)
    d = wq.shape[0] // heads
    heads_out = []
    for j in range(heads):
        rows = slice(j * d, (j + 1) * d)
        q, k, v = (x @ w[rows].T + b[rows] for w, b in ((wq, bq), (wk, bk), (wv, bv)))
        heads_out.append(torch.softmax(q @ k.T / math.sqrt(d), dim=-1) @ v)
    return reduce_from_parallel(torch.cat(heads_out, dim=1) @ wo.T) + bo
'''
RUNS = [(2, [(5, 4, 3, 1)]), (3, [(4, 3, 4, 2)])]


def _verdicts(skip: str) -> dict[str, str]:
    """The verdicts of the library's f and g in a block, the reading skipped (it would refuse the library):
    ``passes`` or the first line of the failure, per run and aspect."""
    parts = [("library", _LIBRARY_BLOCK.replace("SKIP", repr(skip)))]
    out = {}
    for n, cases in RUNS:
        for run in ex._group(None, parts, n, cases):
            for what, verdict in (("values", ex._values), ("gradients", ex._gradients), ("traffic", ex._traffic)):
                try:
                    verdict(run)
                    out[f"{n} {what}"] = "passes"
                except CheckFailed as exc:
                    out[f"{n} {what}"] = str(exc).splitlines()[0]
    return out


def test_the_chapters_f_and_g_pass_and_a_missing_all_reduce_fails_where_it_is_missing():
    right = _verdicts("")
    assert set(right.values()) == {"passes"}, right
    no_backward = _verdicts("backward")          # f without its all-reduce: x's gradient is partial
    assert no_backward["3 values"] == "passes", no_backward
    assert "gradient of the input x" in no_backward["3 gradients"], no_backward
    assert "the backward pass made the collective(s) none" in no_backward["3 traffic"], no_backward
    no_forward = _verdicts("forward")            # g without its all-reduce: the partial outputs are not summed
    assert "differs from the unsharded block" in no_forward["2 values"], no_forward
    assert "traffic is graded on correct outputs only" in no_forward["2 traffic"], no_forward


def test_a_refused_reading_fails_every_cell_before_any_rank_starts():
    parts = [*_solution_parts(), ("extra", "from dlperf.parallel import tensor\n")]
    for what in ("values", "gradients", "traffic"):
        with pytest.raises(CheckFailed, match="reading of your cells refuses"):
            ex.check(source=parts, runs=RUNS, what=what)
