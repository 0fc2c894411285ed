"""The ``ddp_buckets`` checker's own parts: the bucket rule, the models, the reference training, the verdicts.

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
from dlperf.grading.reading import read

MLP = [6, 8, 8, 4]          # parameters of 48, 8, 64, 8, 32 and 4 elements: 192, 32, 256, 32, 128, 16 bytes
KEY = "k3y"


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


def test_the_random_rule_cases_reach_every_kind_of_cap():
    cases = ex.rule_cases(3)
    assert len(cases) == ex.RULE_CASES and cases == ex.rule_cases(3) and cases != ex.rule_cases(4)
    assert any(cap == 1 for _, cap in cases)
    assert any(cap < max(n) for n, cap in cases if n and cap > 1)                    # under one parameter
    assert any(n and cap == sum(n[-j:]) for n, cap in cases for j in range(1, len(n)))  # closed at the cap
    assert any(n and cap > sum(n) for n, cap in cases)                               # one bucket
    assert any(len(set(n)) > 2 and len(n) > 4 for n, _ in cases)
    assert ex._as_buckets([(1, 0), [2]]) == [[1, 0], [2]] and ex._as_buckets([[1.0]]) is None


def test_therule_verdict_names_the_first_wrong_case():
    rule = [([8, 8], 8, [[1], [0]]), ([8, 8], 16, [[1], [0]])]
    with pytest.raises(CheckFailed, match=r"assign_buckets\(\[8, 8\], 16\) returned \[\[1\], \[0\]\]; the rule gives "
                                          r"\[\[1, 0\]\].*1 of 2 random cases"):
        ex.rule_verdict(rule)
    ex.rule_verdict(rule[:1])


def test_bucket_sizes_follow_the_probes_models():
    assert ex.sizes_of("mlp", MLP) == [48, 8, 64, 8, 32, 4]
    assert ex.bucket_sizes("mlp", MLP, 160) == [44, 64, 56]
    assert ex.sizes_of("reordered", [4, 6, 5, 3]) == [15, 3, 24, 6, 30, 5]     # the last layer registered first
    assert ex.sizes_of("tied", [5, 6, 6, 5]) == [5, 30, 6, 36, 6]        # its own parameter first, shared once
    assert ex.sizes_of("unused", [3, 5, 4, 2]) == [15, 5, 25, 5, 20, 4, 8, 2]
    with pytest.raises(ValueError):
        probe.build("tied", [5, 6, 7, 5], 0)


def _arrival(model, dims):
    net = probe.build(model, dims, 1)
    order = []
    for i, p in enumerate(net.parameters()):
        p.register_hook(lambda g, i=i: order.append(i))
    x, y = probe.batch(dims, 1, 0, 0)
    F.mse_loss(net(x), y).backward()
    return order, [p.grad is None for p in net.parameters()]


def test_the_models_deliver_gradients_out_of_parameter_order():
    order, _ = _arrival("mlp", MLP)
    assert order == [5, 4, 3, 2, 1, 0]
    order, _ = _arrival("reordered", [4, 6, 5, 3])
    assert sorted(order) == list(range(6)) and order[:2] in ([0, 1], [1, 0])     # the last layer comes first
    order, _ = _arrival("tied", [5, 6, 6, 5])
    assert sorted(order) == list(range(5)) and order[0] == 0 and order[-1] == 1  # the shared weight: last, once
    order, missing = _arrival("unused", [3, 5, 4, 2])
    assert sorted(order) == [0, 1, 4, 5, 6, 7] and missing == [False, False, True, True] + [False] * 4


@pytest.mark.parametrize("model, dims", [("mlp", [5, 4, 6, 2]), ("reordered", [5, 4, 6, 2]),
                                         ("tied", [5, 6, 6, 5]), ("unused", [4, 3, 5, 2])])
@pytest.mark.parametrize("n", [1, 3])
def test_reference_is_training_on_the_concatenated_batch(model, dims, n):
    """Averaging n per-rank mean gradients = the gradient of the mean over all n equal batches: trained here
    the second way, from the same initial values and batches (an unused parameter keeps its value)."""
    seed = 99
    net = probe.build(model, dims, seed, 0)
    opt = torch.optim.SGD(net.parameters(), lr=ex.LR)
    for step in range(ex.STEPS):
        xs, ys = zip(*(probe.batch(dims, seed, r, step) for r in range(n)))
        opt.zero_grad()
        F.mse_loss(net(torch.cat(xs)), torch.cat(ys)).backward()
        opt.step()
    want = [p.detach() for p in net.parameters()]
    got = ex.reference(model, dims, seed, n)
    assert all(torch.allclose(g, w, rtol=1e-5, atol=1e-6) for g, w in zip(got, want))
    assert not torch.equal(got[0], next(probe.build(model, dims, seed, 0).parameters()))      # training moved them


def test_ranks_start_from_different_values():
    a, b = (list(probe.build("mlp", MLP, 5, r).parameters()) for r in (0, 1))
    assert all(not torch.equal(x, y) for x, y in zip(a, b))


# -- the overlap verdict, on timelines written by hand (MLP, cap 160: buckets [5, 4, 3], [2], [1, 0]) -------------

def _run(step_events, n=2, model="mlp", dims=MLP, cap=160, key=KEY):
    steps = [{"timeline": [step_events(k)] * n, "keys": [key] * n, "log": [], "census": [{}] * n}
             for k in range(ex.STEPS)]
    return {"case": "test", "model": model, "dims": dims, "cap": cap, "n": n, "steps": steps}


def _grads(*indices, key=KEY):
    return [("mark", f"grad {i}", key) for i in indices]


def _post(k, numel):
    return ("post", k, "allreduce", numel)


END = [("mark", "backward", KEY)]
SYNCED = [("mark", "synchronized", KEY), ("mark", "done", KEY)]


def overlapped(k):
    return [*_grads(5, 4, 3), _post(0, 44), *_grads(2), _post(1, 64), *_grads(1, 0), _post(2, 56), *END,
            ("wait", 0), ("wait", 1), ("wait", 2), *SYNCED]


def test_an_overlapped_step_passes():
    ex.overlap(_run(overlapped), [])


@pytest.mark.parametrize("events, message", [
    (lambda k: [*_grads(5, 4, 3), _post(0, 44), ("wait", 0), *_grads(2), _post(1, 64), *_grads(1, 0), _post(2, 56),
                *END, *SYNCED], "waited for \\(or polled\\) an all-reduce before"),
    (lambda k: [*_grads(5, 4, 3), _post(0, 44), ("poll", 0), *_grads(2), _post(1, 64), *_grads(1, 0), _post(2, 56),
                *END, *SYNCED], "waited for \\(or polled\\) an all-reduce before"),
    (lambda k: [*_grads(5, 4, 3, 2, 1, 0), *END, _post(0, 44), _post(1, 64), _post(2, 56), *SYNCED],
     "bucket 0 .* was posted after"),
    (lambda k: [*_grads(5), _post(0, 44), *_grads(4, 3, 2), _post(1, 64), *_grads(1, 0), _post(2, 56), *END,
                *SYNCED], "bucket 0 .* was posted before"),
    (lambda k: [*_grads(5, 4, 3), _post(0, 44), *_grads(2, 1), _post(1, 64), *_grads(0), _post(2, 56), *END,
                *SYNCED], "bucket 1 .* was posted after"),
    (lambda k: [*_grads(5, 4, 3, 2, 1, 0), *END, *SYNCED], "posted no all-reduce"),
    (lambda k: [*_grads(5, 4, 3, 2, 1, 0), *END, *SYNCED, _post(0, 164)], "not the probe's|after finish"),
])
def test_what_is_not_overlapped_is_named(events, message):
    with pytest.raises(CheckFailed, match=message):
        ex.overlap(_run(events), [])


def test_a_bucket_completed_early_waits_for_the_ones_before_it():
    """Gradients may arrive out of parameter order: bucket 1 ([2]) is complete before bucket 0 ([5, 4, 3]);
    launched in bucket order, both go right after the gradient that completes bucket 0."""
    def events(k):
        return [*_grads(5, 2, 4, 3), _post(0, 44), _post(1, 64), *_grads(1, 0), _post(2, 56), *END, *SYNCED]
    ex.overlap(_run(events), [])
    def eager(k):          # bucket 1 posted as soon as it was complete: another order than the rule's
        return [*_grads(5, 2), _post(0, 64), *_grads(4, 3), _post(1, 44), *_grads(1, 0), _post(2, 56), *END, *SYNCED]
    ex.overlap(_run(eager), [])      # the order is the buckets cell's business; it overlapped


def test_a_bucket_with_a_parameter_without_gradient_goes_after_backward():
    """unused, [3, 5, 4, 2], cap 80: buckets [7, 6, 5, 4], [3, 2] (aux: never a gradient), [1, 0]."""
    def events(k):
        return [*_grads(7, 6, 5, 4), _post(0, 34), *_grads(1, 0), *END, _post(1, 30), _post(2, 20),
                ("wait", 0), ("wait", 1), ("wait", 2), *SYNCED]
    ex.overlap(_run(events, model="unused", dims=[3, 5, 4, 2], cap=80), [])
    def early(k):
        return [*_grads(7, 6, 5, 4), _post(0, 34), *_grads(1, 0), _post(1, 30), _post(2, 20), *END, *SYNCED]
    with pytest.raises(CheckFailed, match="bucket 1 .* got no gradient"):
        ex.overlap(_run(early, model="unused", dims=[3, 5, 4, 2], cap=80), [])


def test_one_bucket_is_launched_after_the_last_gradient_and_before_backward_returns():
    ex.overlap(_run(lambda k: [*_grads(5, 4, 3, 2, 1, 0), _post(0, 164), *END, *SYNCED], cap=10**6), [])
    late = _run(lambda k: [*_grads(5, 4, 3, 2, 1, 0), *END, _post(0, 164), *SYNCED], cap=10**6)
    with pytest.raises(CheckFailed, match="bucket 0 .* was posted after"):
        ex.overlap(late, [])


def test_other_buckets_are_graded_for_overlap_only_where_the_rule_allows():
    """One all-reduce per parameter, each from its hook: the sizes are not the rule's (the buckets cell's
    business), and the communication did start during the backward pass; one bucket for all does not."""
    def per_parameter(k):
        out = []
        for j, (i, numel) in enumerate(zip([5, 4, 3, 2, 1, 0], [4, 32, 8, 64, 8, 48])):
            out += [*_grads(i), _post(j, numel)]
        return [*out, *END, *SYNCED]
    ex.overlap(_run(per_parameter), [])
    with pytest.raises(CheckFailed, match="first all-reduce was posted after the backward pass had computed every"):
        ex.overlap(_run(lambda k: [*_grads(5, 4, 3, 2, 1, 0), _post(0, 164), *END, *SYNCED]), [])


def test_the_overlap_is_graded_only_when_the_reading_finds_nothing():
    with pytest.raises(CheckFailed, match="graded only when the reading"):
        ex.overlap(_run(overlapped), ["your cell, line 1: imports os"])


@pytest.mark.parametrize("forge", [
    lambda k: [("mark", m[1]) if m[0] == "mark" else m for m in overlapped(k)],             # no key
    lambda k: [("mark", m[1], "guess") if m[0] == "mark" else m for m in overlapped(k)],    # another key
    lambda k: [*_grads(5, 4, 3, 2, 1, 0), *END, _post(0, 44), ("mark", "grad 2"), _post(1, 64), ("mark", "grad 0"),
               _post(2, 56), *SYNCED],                                                       # a few added
    lambda k: [*_grads(5, 4, 3, 2, 1, 0), *END, _post(0, 44), *_grads(5, 4, 3), _post(1, 64), *_grads(2),
               _post(2, 56), *_grads(1, 0), *SYNCED],                                        # repeated, keyed
])
def test_marks_the_probe_did_not_send_fail_the_overlap(forge):
    with pytest.raises(CheckFailed, match="not the probe's"):
        ex.overlap(_run(forge), [])


def test_the_timeline_shows_which_marks_are_not_the_probes():
    line = ex.describe_step([*_grads(5), ("mark", "grad 4"), _post(0, 44), ("wait", 0), ("poll", 0), *END], KEY)
    assert line == "grad 5, (not the probe's: grad 4), [all_reduce 44 posted], (waits), (polls), backward"


# -- the buckets verdict on a run written by hand -------------------------------------------------------------------

def _logged(*numels, op="allreduce", root=-1):
    return [{"op": op, "root": root, "numel": n} for n in numels]


def _bucket_run(census=None, steps_log=None, built=None):
    census = census or [[{"tensors": 10, "handles": 0, "hooks": 12}] * 2] * ex.STEPS
    steps = [{"log": (steps_log or _logged(44, 64, 56)), "census": c} for c in census]
    return {"case": "test", "model": "mlp", "dims": MLP, "cap": 160, "n": 2, "rule": [],
            "built": {"log": built if built is not None else _logged(48, 8, 64, 8, 32, 4, op="broadcast", root=0)},
            "steps": steps}


def test_the_buckets_verdict():
    ex.verdict_buckets(_bucket_run())
    ex.verdict_buckets(_bucket_run(built=_logged(164, op="broadcast", root=0) + _logged(0, op="barrier")))
    with pytest.raises(CheckFailed, match="the constructor made the relay see broadcast of 164 from rank 1"):
        ex.verdict_buckets(_bucket_run(built=_logged(164, op="broadcast", root=1)))
    with pytest.raises(CheckFailed, match=r"all-reduces of \[56, 64, 44\]"):
        ex.verdict_buckets(_bucket_run(steps_log=_logged(56, 64, 44)))
    with pytest.raises(CheckFailed, match="broadcast of 4 from rank 0 besides"):
        ex.verdict_buckets(_bucket_run(steps_log=_logged(44, 64, 56) + _logged(4, op="broadcast", root=0)))


@pytest.mark.parametrize("what", ["tensors", "handles", "hooks"])
def test_what_grows_from_step_to_step_costs_the_buckets(what):
    base = {"tensors": 10, "handles": 0, "hooks": 12}
    grown = {**base, what: base[what] + 3}
    with pytest.raises(CheckFailed, match=f"rank 1 holds 3 more {what} after step 2"):
        ex.verdict_buckets(_bucket_run(census=[[base, base], [base, base], [base, grown]]))
    fewer = {**base, what: base[what] - 1}
    ex.verdict_buckets(_bucket_run(census=[[base, base], [fewer, base], [base, base]]))


# -- the reading of the cells: the probe's RULES, the checker's and the self-check's -----------------------------------

ALLOWED = """
import math
import itertools
import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


class W(torch.nn.Module):
    def __init__(self, m, cap):
        super().__init__()
        self._m = m
        flat = torch._utils._flatten_dense_tensors([p.grad for p in m.parameters()])
        dist.broadcast(flat, src=0)
        h = dist.all_reduce(flat, op=dist.ReduceOp.SUM, async_op=True)
        h.wait()
        flat /= dist.get_world_size() * math.prod([1])
        self._b = list(itertools.accumulate([1, 2]))
        for p in m.parameters():
            p.register_post_accumulate_grad_hook(lambda p: self.ready(p))

    def ready(self, p):
        return torch.cat([p.grad.reshape(-1), torch.zeros_like(p).flatten()])
"""


def test_the_reading_allows_what_a_solution_needs():
    assert read([("cell", ALLOWED)], probe.RULES) == []


@pytest.mark.parametrize("line, finding", [
    ("from torch.nn.parallel import DistributedDataParallel", "DistributedDataParallel does the exercise's work"),
    ("import torch.nn.parallel", "imports torch.nn.parallel"),
    ("torch.nn.parallel.DistributedDataParallel(None)", "DistributedDataParallel"),
    ("from dlperf.grading import relay", "imports from dlperf.grading"),
    ("dist.distributed_c10d._get_default_group()", "private name"),
    ("dist.group.WORLD._mark('grad 0')", "private name"),
    ("g = dist.group.WORLD", "the process group itself is the grader's relay"),
    ("self = dist.group.WORLD\nself._mark('grad 0')", "private attribute ._mark"),
    ("operator.attrgetter('_mark')(x)", "operator"),
    ("getattr(dist, 'all_reduce')", "getattr"),
    ("hasattr(x, 'y')", "hasattr"),
    ("import os", "imports os"),
    ("import gc", "imports gc"),
    ("dist.new_group([0, 1])", "torch.distributed.new_group"),
    ("h = dist.all_reduce(x, async_op=True)\nh._group._mark('grad 1')", "private attribute ._group"),
    ("x.__class__", "special attribute"),
])
def test_the_reading_refuses_what_could_reach_the_relay_or_replace_the_exercise(line, finding):
    found = read([("cell", f"import torch\nimport torch.distributed as dist\nimport operator\nx = 1\n{line}\n")],
                 probe.RULES)
    assert any(finding in f for f in found), found


def test_a_class_that_defines_mark_cannot_reach_the_groups():
    """`self._x` is allowed only in a method, on the method's own object, for a name the class sets: a class
    that defines `_mark` does not make `dist.group.WORLD._mark` (or a re-bound `self`) readable."""
    source = ("import torch\nimport torch.distributed as dist\n\nclass W(torch.nn.Module):\n"
              "    def _mark(self, label):\n        return label\n\n"
              "    def forge(self):\n        self = dist.group.WORLD\n        self._mark('grad 0')\n")
    found = read([("cell", source)], probe.RULES)
    assert any("re-binds self" in f for f in found) and any("torch.distributed.group" in f for f in found), found


def test_marks_outside_a_relayed_rank_send_nothing():
    from dlperf.grading.relay import mark

    assert mark("grad 0") is False and mark("grad 0", key=KEY) is False


def test_the_relay_group_and_its_handles_offer_no_public_way_to_mark():
    """Marks come from the probe through dlperf.grading.relay.mark; the group's own method is private, and a
    handle's group is too, so the reading (no private attributes) refuses reaching them from a solution."""
    from dlperf.grading.relay import RelayGroup, _Work

    assert not hasattr(RelayGroup, "mark") and hasattr(RelayGroup, "_mark")
    work = _Work.__new__(_Work)
    _Work.__init__(work, None, 1, "coll")      # type: ignore[arg-type]
    assert not any(name in vars(work) for name in ("group", "chan", "sock")) and "_group" in vars(work)
