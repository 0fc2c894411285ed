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
    ("tolist", lambda: t.tolist(), "tolist"),
    ("float", lambda: float(t[1]), "__float__"),
    ("int", lambda: int(t[1]), "__int__"),
    ("if on a tensor", lambda: 1 if t.sum() > 0 else 0, "__bool__"),
    ("print", lambda: print(t, file=io.StringIO()), "__repr__"),
    ("f-string", lambda: f"{t[0]:.3f}", "__format__"),
    ("cpu", lambda: t.cpu(), "cpu"),
    ("to('cpu')", lambda: t.to("cpu"), "to"),
    ("numpy", lambda: t.numpy(), "numpy"),
    ("boolean mask", lambda: t[t > 0], "__getitem__"),
    ("nonzero", lambda: torch.nonzero(t), "nonzero"),
    ("unique", lambda: t.unique(), "unique"),
    ("equal", lambda: torch.equal(t, t), "equal"),
])
def test_each_synchronising_call_counts_once(what, fn, kind):
    assert _count(fn) == {"events": 1, "kinds": {kind: 1}, "cuda_warnings": None}, what


def test_device_work_and_host_metadata_do_not_count_and_patches_are_undone():
    before = {name: vars(torch.Tensor).get(name) for name in probe.HOST_METHODS}
    seen = _count(lambda: (t * 2 + 1, t.sum(), t.shape, len(t), t.to(torch.float64), t[1:3], t[torch.tensor([0, 2])],
                           t.device, t.dtype))
    assert seen["events"] == 0, seen
    assert {name: vars(torch.Tensor).get(name) for name in probe.HOST_METHODS} == before
    assert float(t[0]) == -1.0  # still works after the counter


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


def test_the_static_reading_finds_nothing_in_the_reference_solution():
    parts = [(gid, course.strip_solution_markers(src)) for gid, src in course.solution_cells("no_sync_loop").items()]
    assert len(parts) == 2
    assert grading.static_findings(parts) == []


LOOP = """
import torch

def train_epoch(model, optimizer, loss_fn, batches):
    out, best = [], None
    for step, (x, y) in enumerate(batches):
        loss = loss_fn(model(x), y)
        n = len(y)
        {line}
    return out
"""


@pytest.mark.parametrize("line, found", [
    ("out.append(loss.item())", ".item() inside a loop"),
    ("out.append(float(loss))", "float() of a tensor"),
    ("print(f'{step}: {loss}')", "formatted into a string"),
    ("print(loss)", "print() of a tensor"),
    ("best = step if loss < 1 else best", "a condition computed from tensors"),
    ("out.append('%.3f' % loss)", "formatted with %"),
    ("out.append(model(x).argmax(1).tolist())", ".tolist() inside a loop"),
    ("out.append(loss.to('cpu'))", ".to('cpu')"),
    ("out.append(torch._C.TensorBase.item(loss))", "private or special attribute _C"),
    ("out.append(getattr(loss, 'item')())", "uses getattr()"),
])
def test_the_static_reading_flags_each_synchronisation_in_the_loop(line, found):
    findings = grading.static_findings([("cell", LOOP.format(line=line))])
    assert any(found in f for f in findings), findings


@pytest.mark.parametrize("line", [
    "out.append(loss.detach())",
    "print(f'step {step} of {len(batches)}, batch of {n}')",
    "best = step if step % 2 else best",
    "out.append(float(len(y)))",
    "out.append(x.shape[0] * 2)",
])
def test_the_static_reading_leaves_host_only_lines_alone(line):
    assert grading.static_findings([("cell", LOOP.format(line=line))]) == []


def test_the_static_reading_leaves_a_loop_over_the_fetched_numbers_alone():
    src = LOOP.format(line="out.append(loss.detach())").replace("    return out", """    values = torch.stack(out).tolist()
    best = 0
    for (x, y), v in zip(batches, values):
        if v < values[best]:
            best = values.index(v)
        print(f"{v:.3f} on {len(y)} samples")
    return best""")
    assert grading.static_findings([("cell", src)]) == []


def test_the_static_reading_refuses_imports_that_could_reach_the_counter():
    src = "import dlperf.grading.probes.no_sync_loop as c\nfrom torch.utils._python_dispatch import x\nimport math\n"
    findings = grading.static_findings([("cell", src)])
    assert len(findings) == 2 and "dlperf" in findings[0] and "_python_dispatch" in findings[1], findings


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


@pytest.mark.parametrize("path", course.snippets("no_sync_loop"), ids=lambda p: p.stem)
def test_the_static_reading_alone_tells_the_fixtures_that_synchronise_per_step(path):
    """Independent of the count in the student's process: the fixtures that lose the synchronisation points
    (the counter-tampering one included) are found by the source reading, the others are not."""
    snippet = course.Snippet.parse(path)
    findings = grading.static_findings(_cells(snippet))
    assert bool(findings) == (snippet.expect["no_sync_loop-syncs-test"] == 0), findings
