"""The ``ddp_buckets`` checker's own parts: the bucket rule, the reference training, the verdicts on timelines.

The exercise's notebook, its stub and its wrong-submission fixtures are graded
through nbgrader and the class autograder (test_exercises.py, test_autograder.py);
here the pieces are checked against values worked out by hand and against an
independent formulation of the same training.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F  # noqa: N812

from autograder.exercises import ddp_buckets as ex
from autograder.trusted import CheckFailed
from dlperf.grading.probes import ddp_buckets as probe

MLP = [6, 8, 8, 4]          # parameters of 48, 8, 64, 8, 32 and 4 elements: 192, 32, 256, 32, 128, 16 bytes


@pytest.mark.parametrize("nbytes, cap, want", [
    ([192, 32, 256, 32, 128, 16], 160, [[5, 4, 3], [2], [1, 0]]),          # 176, 256, 224 bytes
    ([192, 32, 256, 32, 128, 16], 176, [[5, 4, 3], [2], [1, 0]]),          # 176 reaches the cap exactly
    ([192, 32, 256, 32, 128, 16], 177, [[5, 4, 3, 2], [1, 0]]),            # 432, then 224 left over
    ([192, 32, 256, 32, 128, 16], 1, [[5], [4], [3], [2], [1], [0]]),
    ([192, 32, 256, 32, 128, 16], 10**6, [[5, 4, 3, 2, 1, 0]]),
    ([100, 4, 4, 100], 50, [[3], [2, 1, 0]]),                                # the last bucket may stay under it
    ([80, 16, 96, 24, 48, 8], 80, [[5, 4, 3], [2], [1, 0]]),                # 8 + 48 + 24 = 80: closed at the cap
    ([], 10, []),
])
def test_the_bucket_rule_by_hand(nbytes, cap, want):
    assert ex.buckets(nbytes, cap) == want


def test_bucket_sizes_follow_the_probes_model():
    assert ex.sizes_of(MLP) == [48, 8, 64, 8, 32, 4]
    assert ex.bucket_sizes(MLP, 160) == [44, 64, 56]
    assert sum(ex.bucket_sizes([5, 4, 6, 2], 80)) == sum(ex.sizes_of([5, 4, 6, 2])) == 68


@pytest.mark.parametrize("n", [1, 2, 3])
def test_reference_is_training_on_the_concatenated_batch(n):
    """Averaging n per-rank mean gradients = the gradient of the mean over all n equal batches: trained here
    the second way, from the same initial values and batches."""
    dims, seed = [5, 4, 6, 2], 99
    model = probe.build(dims, seed, 0)
    opt = torch.optim.SGD(model.parameters(), lr=ex.LR)
    for step in range(ex.STEPS):
        xs, ys = zip(*(probe.batch(dims, seed, r, step) for r in range(n)))
        opt.zero_grad()
        F.mse_loss(model(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    want = [p.detach() for p in model.parameters()]
    got = ex.reference(dims, seed, n)
    assert all(torch.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want))
    assert not torch.equal(got[0], next(probe.build(dims, seed, 0).parameters()))      # training moved them


def test_ranks_start_from_different_values():
    a, b = (list(probe.build(MLP, 5, r).parameters()) for r in (0, 1))
    assert all(not torch.equal(x, y) for x, y in zip(a, b))


# -- the overlap verdict, on timelines written by hand (MLP, cap 160: buckets [5, 4, 3], [2], [1, 0]) -------------

def _timeline(step_events, steps=ex.STEPS):
    out = [("post", 0, "broadcast", 48), ("mark", "built")]
    for k in range(steps):
        out.append(("mark", f"step {k}"))
        out += step_events(k)
    return [*out, ("mark", "done")]


def _run(step_events, n=2):
    return {"case": "test", "dims": MLP, "cap": 160, "n": n, "timeline": [_timeline(step_events)] * n}


def _grads(*indices):
    return [("mark", f"grad {i}") for i in indices]


def _post(k, numel):
    return ("post", k, "allreduce", numel)


def overlapped(k):
    base = 1 + 3 * k
    return [*_grads(5, 4, 3), _post(base, 44), *_grads(2), _post(base + 1, 64), *_grads(1, 0), _post(base + 2, 56),
            ("mark", "backward"), ("wait", base), ("mark", "synchronized")]


def test_an_overlapped_step_passes():
    ex._overlap(_run(overlapped), [])


@pytest.mark.parametrize("events, message", [
    (lambda k: [*_grads(5, 4, 3), _post(1 + 3 * k, 44), ("wait", 1 + 3 * k), *_grads(2), _post(2 + 3 * k, 64),
                *_grads(1, 0), _post(3 + 3 * k, 56), ("mark", "backward")], "waited for an all-reduce before"),
    (lambda k: [*_grads(5, 4, 3, 2, 1, 0), ("mark", "backward"), _post(1 + 3 * k, 44), _post(2 + 3 * k, 64),
                _post(3 + 3 * k, 56)], "after the backward pass had computed every gradient"),
    (lambda k: [*_grads(5), _post(1 + 3 * k, 44), *_grads(4, 3, 2), _post(2 + 3 * k, 64), *_grads(1, 0),
                _post(3 + 3 * k, 56), ("mark", "backward")], "bucket 0 .* was posted before"),
    (lambda k: [*_grads(5, 4, 3), _post(1 + 3 * k, 44), *_grads(2, 1), _post(2 + 3 * k, 64), *_grads(0),
                _post(3 + 3 * k, 56), ("mark", "backward")], "bucket 1 .* was posted after"),
    (lambda k: [*_grads(5, 4, 3, 2, 1, 0), ("mark", "backward")], "posted no all-reduce"),
])
def test_what_is_not_overlapped_is_named(events, message):
    with pytest.raises(CheckFailed, match=message):
        ex._overlap(_run(events), [])


def test_a_bucket_completed_early_waits_for_the_ones_before_it():
    """Gradients may arrive out of parameter order: bucket 1 ([2]) is complete before bucket 0 ([5, 4, 3]);
    launched in bucket order, both go right after the gradient that completes bucket 0."""
    def events(k):
        b = 1 + 3 * k
        return [*_grads(5, 2, 4, 3), _post(b, 44), _post(b + 1, 64), *_grads(1, 0), _post(b + 2, 56),
                ("mark", "backward")]
    ex._overlap(_run(events), [])


def test_one_bucket_is_launched_after_the_last_gradient_and_before_backward_returns():
    run = _run(lambda k: [*_grads(5, 4, 3, 2, 1, 0), _post(1 + k, 164), ("mark", "backward")])
    run["cap"] = 10**6
    ex._overlap(run, [])
    late = _run(lambda k: [*_grads(5, 4, 3, 2, 1, 0), ("mark", "backward"), _post(1 + k, 164)])
    late["cap"] = 10**6
    with pytest.raises(CheckFailed, match="bucket 0 .* was posted after"):
        ex._overlap(late, [])


def test_other_buckets_are_graded_for_overlap_only_where_the_rule_allows():
    """One all-reduce per parameter, each from its hook: the sizes are not the rule's (the buckets cell's
    business), and the communication did start during the backward pass."""
    def per_parameter(k):
        out = []
        for j, (i, numel) in enumerate(zip([5, 4, 3, 2, 1, 0], [4, 32, 8, 64, 8, 48])):
            out += [*_grads(i), _post(1 + 6 * k + j, numel)]
        return [*out, ("mark", "backward")]
    ex._overlap(_run(per_parameter), [])


def test_the_overlap_is_graded_only_when_the_reading_finds_nothing():
    with pytest.raises(CheckFailed, match="graded only when the reading"):
        ex._overlap(_run(overlapped), ["your cell, line 1: imports os"])


# -- the reading of the cells --------------------------------------------------------------------------------------

ALLOWED = """
import math
import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


class W(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self._m = m
        flat = torch._utils._flatten_dense_tensors([p.grad for p in m.parameters()])
"""


def test_the_reading_allows_what_a_solution_needs():
    assert ex.static_findings([("cell", ALLOWED)]) == []


@pytest.mark.parametrize("line, finding", [
    ("from torch.nn.parallel import DistributedDataParallel", "DistributedDataParallel"),
    ("import torch.nn.parallel", "DistributedDataParallel"),
    ("m.register_comm_hook(None, None)", "communication hooks"),
    ("from dlperf.grading import relay", "imports dlperf.grading"),
    ("dist.distributed_c10d._get_default_group()", "private attribute _get_default_group"),
    ("getattr(dist, 'all_reduce')", "getattr"),
    ("import os", "imports os"),
])
def test_the_reading_refuses_what_could_reach_the_relay_or_replace_the_exercise(line, finding):
    found = ex.static_findings([("cell", f"import torch\n{line}\n")])
    assert any(finding in f for f in found), found


def test_marks_outside_a_relayed_rank_send_nothing():
    from dlperf.grading.relay import mark

    assert mark("grad 0") is False


def test_marks_the_probe_did_not_send_fail_the_overlap():
    """A gradient marked twice, or after backward() returned, is not what the probe sends (e.g. a forged mark)."""
    def forged(k):
        b = 1 + 3 * k
        return [*_grads(5, 4, 3, 2, 1, 0), ("mark", "backward"), _post(b, 44), *_grads(5, 4, 3), _post(b + 1, 64),
                *_grads(2), _post(b + 2, 56), *_grads(1, 0)]
    with pytest.raises(CheckFailed, match="not the probe's"):
        ex._overlap(_run(forged), [])


def test_the_relay_group_offers_no_public_way_to_mark():
    """Marks come from the probe through dlperf.grading.relay.mark; the group's own method is private, so the
    reading (no private attributes) refuses `dist.group.WORLD._mark(...)` in a solution."""
    from dlperf.grading.relay import RelayGroup

    assert not hasattr(RelayGroup, "mark") and hasattr(RelayGroup, "_mark")
    found = ex.static_findings([("cell", "import torch.distributed as dist\ndist.group.WORLD._mark('grad 0')\n")])
    assert any("private attribute _mark" in f for f in found), found
