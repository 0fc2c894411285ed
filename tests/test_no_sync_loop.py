"""The instruments of the ``no_sync_loop`` exercise: the sync counter, the kept-graph check, the static reading.

Expected counts are written out by hand from what each snippet does (one event per call that
hands a value to Python), not computed by the counter's own rules.
"""

from __future__ import annotations

import ast
import inspect
import io
import math
import types

import nbformat
import pytest
import torch

from autograder import course
from autograder.exercises import no_sync_loop as grading
from dlperf.grading.probes import no_sync_loop as probe


def _count(fn) -> dict:
    with probe.SyncCounter() as syncs:
        fn()
    return syncs.summary()


t = torch.linspace(-1.0, 1.0, 5)


@pytest.mark.parametrize("what, fn, kind", [
    ("item", lambda: t[0].item(), "item"),
    ("the C method behind item", lambda: torch._C.TensorBase.item(t[0]), "item"),
    ("tolist", lambda: t.tolist(), "tolist"),
    ("float", lambda: float(t[1]), "__float__"),
    ("int", lambda: int(t[1]), "__int__"),
    ("a list index", lambda: [1, 2, 3][t.long()[2]], "__index__"),
    ("if on a tensor", lambda: 1 if t.sum() > 0 else 0, "__bool__"),
    ("print", lambda: print(t, file=io.StringIO()), "__repr__"),
    ("f-string", lambda: f"{t[0]:.3f}", "__format__"),
    ("cpu", lambda: t.cpu(), "cpu"),
    ("to('cpu')", lambda: t.to("cpu"), "to"),
    ("numpy", lambda: t.numpy(), "numpy"),
    ("boolean mask", lambda: t[t > 0], "index"),
    ("nonzero", lambda: torch.nonzero(t), "nonzero"),
    ("where with one argument", lambda: torch.where(t > 0), "nonzero"),
    ("argwhere", lambda: t.argwhere(), "nonzero"),
    ("unique", lambda: t.unique(), "_unique2"),
    ("equal", lambda: torch.equal(t, t), "equal"),
    ("a device value written into a host tensor", lambda: torch.zeros(5).__setitem__(0, t[0]), "to host"),
    ("a device value added into a host tensor", lambda: torch.zeros(()).add_(t[0]), "to host"),
    ("Python data copied to the device", lambda: torch.tensor([1.0, 2.0], device=t.device), "from host"),
    ("a host tensor copied to the device", lambda: torch.arange(3).to(t.device), "from host"),
    ("new_tensor on the device", lambda: t.new_tensor([1.0]), "from host"),
])
def test_each_synchronising_call_counts_once(what, fn, kind):
    assert _count(fn) == {"events": 1, "kinds": {kind: 1}, "cuda_warnings": None}, what


def test_torch_tensor_of_device_scalars_reads_each_one():
    assert _count(lambda: torch.tensor([t[0], t[1], t[2]]))["kinds"] == {"tensor": 3}


@pytest.mark.parametrize("what, fn", [
    ("cpu then tolist", lambda: t.cpu().tolist()),
    ("to('cpu') then arithmetic on the host copy then tolist", lambda: (t.to("cpu").double() * 2).tolist()),
    ("cpu then item of each element", lambda: [v.item() for v in t.cpu()]),
    ("cpu then numpy", lambda: t.cpu().numpy()),
    ("one cat, one cpu, split on the host", lambda: [p.tolist() for p in torch.cat([t, t]).cpu().split(5)]),
])
def test_a_transfer_counts_once(what, fn):
    assert _count(fn)["events"] == 1, what


def test_device_work_and_host_metadata_do_not_count():
    seen = _count(lambda: (t * 2 + 1, t.sum(), t.shape, len(t), t.to(torch.float64), t[1:3], t[torch.tensor([0, 2])],
                           t.device, t.dtype, list(t), torch.stack([t, t]).argmin(), torch.zeros(3).tolist(),
                           torch.tensor([1.0, 2.0]).sum().item()))
    assert seen["events"] == 0, seen


def test_torch_is_left_exactly_as_it_was():
    """Nothing of torch is patched: after counting, every method is the same object, no mode is left on the
    stacks, and torch.tensor of 0-dim tensors (which a patched __float__ used to break) works."""
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    before = dict(vars(torch.Tensor)), dict(vars(torch._C.TensorBase)), dict(vars(torch))
    _count(lambda: (t[0].item(), print(t, file=io.StringIO()), torch.tensor([t[0], t[1]]), t[t > 0]))
    after = dict(vars(torch.Tensor)), dict(vars(torch._C.TensorBase)), dict(vars(torch))
    assert all(a.keys() == b.keys() and all(a[k] is b[k] for k in a) for a, b in zip(before, after))
    assert _get_current_function_mode_stack() == [] and _get_current_dispatch_mode_stack() == []
    assert torch.tensor([t[0], t[1]]).tolist() == [-1.0, -0.5]
    assert float(t[0]) == -1.0


def _slow_mod():
    return types.SimpleNamespace(train_epoch=grading.slow_train_epoch)


def _code(function) -> str:
    """A function definition without its docstring and comments, for comparing two copies."""
    function.body = [n for n in function.body
                     if not (isinstance(n, ast.Expr) and isinstance(getattr(n, "value", None), ast.Constant))]
    function.name, function.returns = "f", None
    for arg in function.args.args:
        arg.annotation = None
    return ast.dump(function)


def test_the_checker_keeps_the_notebooks_slow_loop_exactly():
    """The checker keeps its own copy of train_epoch_slow (a trusted reference a solution cell cannot shadow);
    it must be the loop the notebook shows the student, statement for statement."""
    nb = nbformat.read(course.source_notebook("no_sync_loop"), as_version=4)
    setup = next(c.source for c in nb.cells
                 if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "no_sync_loop-setup")
    shown = next(n for n in ast.parse(setup).body if isinstance(n, ast.FunctionDef) and n.name == "train_epoch_slow")
    kept = ast.parse(inspect.getsource(grading.slow_train_epoch)).body[0]
    assert _code(kept) == _code(shown)


def test_the_slow_loop_counts_four_per_step_plus_one_per_new_best_and_the_reference_one():
    sizes = [6] * 9 + [2]
    slow = probe.train(_slow_mod(), "cpu", 5, sizes, 0.1)
    losses = slow["log"]["losses"]
    new_best = sum(1 for i, v in enumerate(losses) if v < min(losses[:i], default=math.inf))
    assert slow["syncs"]["events"] == 4 * len(sizes) + new_best
    assert slow["syncs"]["kinds"] == {"item": 3 * len(sizes) + new_best, "__bool__": len(sizes)}
    fast = probe.train(grading.reference(), "cpu", 5, sizes, 0.1)
    assert fast["syncs"]["events"] == 1
    assert fast["params"] and all(torch.equal(a, b) for a, b in zip(fast["params"], slow["params"]))
    assert fast["steps"] == slow["steps"] == len(sizes)


def test_a_loop_that_keeps_its_losses_keeps_every_graph():
    def keeps(model, optimizer, loss_fn, batches):
        kept = []
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            kept.append(loss)
        return len(kept)

    seen = probe.train(types.SimpleNamespace(train_epoch=keeps), "cpu", 0, [4] * 5, 0.1)
    assert seen["kept"] == [[], [], [0], [0, 1], [0, 1, 2]]
    ok = probe.train(grading.reference(), "cpu", 0, [4] * 5, 0.1)
    assert ok["kept"] == [[]] * 5


def test_a_loop_that_keeps_its_logits_keeps_every_graph_and_a_global_keeps_them_after():
    kept_outside = []

    def keeps_logits(model, optimizer, loss_fn, batches):
        outputs = []
        for x, y in batches:
            optimizer.zero_grad()
            logits = model(x)
            loss_fn(logits, y).backward()
            optimizer.step()
            outputs.append(logits)
        kept_outside.append(outputs[-1])
        return len(outputs)

    seen = probe.train(types.SimpleNamespace(train_epoch=keeps_logits), "cpu", 0, [4] * 5, 0.1)
    assert seen["kept"] == [[], [], [0], [0, 1], [0, 1, 2]]
    assert seen["alive_after"] == [4]
    assert probe.train(grading.reference(), "cpu", 0, [4] * 5, 0.1)["alive_after"] == []


def _reference_parts() -> list[tuple[str, str]]:
    return [(gid, course.strip_solution_markers(src)) for gid, src in course.solution_cells("no_sync_loop").items()]


def test_the_reading_finds_nothing_in_the_reference_solution():
    parts = _reference_parts()
    assert len(parts) == 2
    assert grading.reading(parts) == []


LOOP = """
import torch

def train_epoch(model, optimizer, loss_fn, batches):
    out, best = [], None
    total = torch.zeros((), device=batches[0][0].device)
    for step, (x, y) in enumerate(batches):
        loss = loss_fn(model(x), y)
        n = len(y)
        {line}
    return out
"""


@pytest.mark.parametrize("line, found", [
    ("out.append(torch._C.TensorBase.item(loss))", "torch._C"),
    ("out.append(getattr(loss, 'item')())", "getattr"),
    ("out.append(operator.attrgetter('item')(loss)())", "operator"),
    ("import dlperf.grading.probes.no_sync_loop as c", "imports dlperf"),
    ("from torch.utils._python_dispatch import _disable_current_modes", "torch.utils"),
    ("import numpy", "imports numpy"),
    ("import threading", "imports threading"),
    ("torch.overrides.TorchFunctionMode", "torch.overrides"),
    ("torch.cuda.synchronize()", "torch.cuda"),
    ("torch.cuda.set_sync_debug_mode(0)", "torch.cuda"),
    ("best = x.device.type", ".type"),
    ("best = loss.is_meta", ".is_meta"),
    ("best = torch.device('meta')", "torch.device"),
    ("out.append(loss.grad_fn)", ".grad_fn"),
    ("out.append(loss_fn.marks)", ".marks"),
    ("out.append(loss.__class__)", "special"),
    ("out.append(optimizer._x)", "private"),
    ("try:\n            out.append(loss.item())\n        except RuntimeError:\n            pass", "try statement"),
    ("out.append(eval('loss.item()'))", "eval"),
])
def test_the_reading_refuses_what_could_reach_the_counter_or_tell_the_meta_run_apart(line, found):
    findings = grading.reading([("cell", LOOP.format(line=line))])
    assert any(found in f for f in findings), findings


def test_the_reading_refuses_typing_get_type_hints_which_evaluates_strings():
    """The shared standard-library list allows typing.*, and typing.get_type_hints evaluates string
    annotations: a private name spelled as text. This exercise allows only typing's plain names."""
    src = ('import typing\nimport torch\n\n\ndef hint(a: "torch._C.DisableTorchFunction") -> typing.Any:\n'
           '    pass\n\n\ndef train_epoch(model, optimizer, loss_fn, batches):\n'
           '    return typing.get_type_hints(hint)\n')
    findings = grading.reading([("cell", src)])
    assert len(findings) == 1 and "typing.get_type_hints" in findings[0], findings


@pytest.mark.parametrize("line", [
    "out.append(loss.detach())",
    "total += loss.detach() * n",
    "out.append(loss.data)",
    "out.append(torch.stack([loss.detach(), loss.detach()]).sum())",
    "print(f'step {step} of {len(batches)}, batch of {n}')",
    "best = step if step % 2 else best",
    "out.append(x.shape[0] * 2)",
    "out.append(torch.zeros_like(loss).new_zeros(()))",
    "out.append(torch.stack(out).cpu().tolist())",
    "with torch.no_grad():\n            out.append((model(x).argmax(1) == y).sum())",
    "out.append(math.fsum([1.0, 2.0]) + functools.reduce(lambda a, b: a + b, [n]))",
])
def test_the_reading_leaves_what_a_correct_loop_writes_alone(line):
    src = "import functools\nimport math\n" + LOOP.format(line=line)
    assert grading.reading([("cell", src)]) == []


def test_the_self_check_reads_with_the_graders_rules():
    """The notebook's self-check cell calls the probe's reading_check, which runs the grader's own findings()."""
    nb = nbformat.read(course.source_notebook("no_sync_loop"), as_version=4)
    checks = "\n".join(c.source for c in nb.cells
                        if c.get("metadata", {}).get("nbgrader", {}).get("grade_id", "").endswith("-check"))
    assert "reading_check(fetch)" in checks and "reading_check(fetch, train_epoch)" in checks
    assert "meta_case(train_epoch" in checks
    assert grading.reading is not None and inspect.getsource(grading.reading).count("probe.findings(parts)") == 1


@pytest.mark.parametrize("steps, batches, raised, passes", [
    (6, 6, ("NotImplementedError", "Cannot copy out of meta tensor; no data!"), True),
    (6, 6, ("RuntimeError", "Tensor.item() cannot be called on meta tensors"), True),
    (1, 6, ("RuntimeError", "Tensor.item() cannot be called on meta tensors"), False),
    (0, 1, ("RuntimeError", "Tensor.item() cannot be called on meta tensors"), False),
    (6, 6, ("RuntimeError", "Tensor on device cpu is not on the expected device meta!"), False),
    (6, 6, None, False),
    (7, 6, ("RuntimeError", "Tensor.item() cannot be called on meta tensors"), False),
])
def test_the_meta_verdict(steps, batches, raised, passes):
    assert (probe.meta_verdict(steps, batches, raised) is None) == passes


def _meta(train_epoch, sizes):
    got, want, ok = probe.meta_case(train_epoch, sizes)()
    return ok


def test_the_meta_run_passes_the_reference_and_stops_the_slow_loop_at_its_first_step():
    for sizes in ([5], [16] * 5 + [7], [4] * 24 + [9]):
        assert _meta(grading.reference().train_epoch, sizes)
    for sizes in ([16] * 5 + [7], [4] * 24 + [9]):
        assert not _meta(grading.slow_train_epoch, sizes)
    # one batch: the slow loop reads after its only step, which the meta run cannot tell from a read at the end
    assert _meta(grading.slow_train_epoch, [5])


def _cells(snippet: course.Snippet) -> list[tuple[str, str]]:
    """The two solution cells of a wrong-submission fixture, as the grader would receive them."""
    solutions = course.solution_cells("no_sync_loop")
    parts = []
    for gid in ("no_sync_loop-fetch", "no_sync_loop-train"):
        code = snippet.cells.get(gid)
        own = course.strip_solution_markers(solutions[gid])
        if code is course.SOLUTION:
            code = own
        elif isinstance(code, course.Edits):
            code = code.apply(own, gid)
        parts.append((gid, code))
    return parts


# Fixtures that synchronise per step in a way the meta device does not refuse: only the count sees them.
ONLY_COUNTED = {"prints_the_loss_tensor": "printing a meta tensor shows no value and raises nothing",
                "fetch_one_read_per_tensor": "its reads are all after the loop: two reads where one is allowed",
                "tensor_of_losses": "torch.tensor(losses) reads each loss, but only after the loop",
                "size_tensor_every_step": "torch.tensor(n, device='meta') copies nothing"}


@pytest.mark.parametrize("path", course.snippets("no_sync_loop"), ids=lambda p: p.stem)
def test_the_observations_that_do_not_run_in_the_students_process_tell_the_fixtures_that_synchronise(path):
    """Independent of the count in the student's process: the fixtures that lose the synchronisation points
    are found by the reading or the meta run (here in this process, as the self-check runs it), the others
    are not, save those listed in ONLY_COUNTED, which the count finds."""
    snippet = course.Snippet.parse(path)
    parts = _cells(snippet)
    refused = bool(grading.reading(parts))
    namespace: dict = {}
    if not refused:
        for name, source in parts:
            exec(compile(source, name, "exec"), namespace)  # noqa: S102 - the course's own fixtures
    meta_fails = not refused and not all(_meta(namespace["train_epoch"], sizes) for sizes in ([5], [4] * 6 + [3]))
    loses = snippet.expect["no_sync_loop-syncs-test"] == 0
    if path.stem in ONLY_COUNTED:
        assert loses and not refused and not meta_fails
        seen = probe.train(types.SimpleNamespace(**namespace), "cpu", 3, [4] * 6 + [3], 0.1)
        assert seen["syncs"]["events"] > 1
    else:
        assert (refused or meta_fails) == loses, (refused, meta_fails)


def test_on_a_gpu_the_summary_says_where_pytorch_reported_each_synchronisation(monkeypatch):
    # The CUDA path without a GPU: PyTorch's debug mode replaced by warnings of its text. A GPU run in which the
    # reference solution's count differed between the grader's process and the student's said nothing of where.
    import warnings
    modes = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    with probe.SyncCounter("cuda") as syncs:
        for _ in range(2):
            warnings.warn("called a synchronizing CUDA operation", UserWarning)
        warnings.warn("something else", UserWarning)
    summary = syncs.summary()
    assert modes == ["warn", "default"]
    assert summary["cuda_warnings"] == 2 and summary["events"] == 0
    (place, count), = summary["cuda_where"].items()
    assert count == 2 and place.startswith("test_no_sync_loop.py:")
    assert set(_count(lambda: None)) == {"events", "kinds", "cuda_warnings"}   # the CPU summary as before


def test_the_gpu_warm_up_before_the_counted_block_leaves_the_run_untouched(monkeypatch):
    # On a GPU, train() runs a step's operations once on copies before counting, so that a fresh process's
    # first CUDA use does not count for the student's process (the reference's count is taken in the grader's).
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    model, _, criterion, batches = probe.make_run("cpu", 3, [5, 4], 0.1)
    before = [p.detach().clone() for p in model.parameters()]
    probe._warm_up(model, batches)
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert criterion.marks == [] and criterion.alive() == []
    with probe.SyncCounter() as syncs:      # and it is no part of what a counted block sees
        pass
    assert syncs.events == 0


def test_the_sync_debug_modes_own_notice_is_not_a_synchronisation():
    """torch 2.11 on an H200: the first set_sync_debug_mode("warn") of a process warns once that the mode is a
    prototype; counted as a synchronisation, it cost the reference 3 points in the student's fresh process."""
    notice = ("Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
              "operations (Triggered internally at /pytorch/torch/csrc/cuda/Module.cpp:1003.)")
    report = "called a synchronizing CUDA operation (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:162.)"
    assert not probe.is_sync_report(notice)
    assert probe.is_sync_report(report)
