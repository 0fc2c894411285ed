"""The ``compile_clean`` exercise's instruments: the probe's counts (in-process, on the instructor's solution, the
given code and known-bad rewrites) and the checker's static reading of solution cells.

The graded outcomes of whole submissions are in tests/test_exercises.py and tests/test_autograder.py (the
fixtures of tests/submissions/compile_clean); these tests pin down the parts those outcomes rest on.
"""

from __future__ import annotations

import itertools
import linecache
import sys
import types

import nbformat
import pytest
import torch

from autograder import course, notebook
from autograder.exercises import compile_clean as ex
from dlperf.grading.probes import compile_clean as probe

AID = "compile_clean"
_count = itertools.count()


def _module(*sources: str) -> types.ModuleType:
    """The cells as one module, as the host loads a solution (registered, its source in linecache)."""
    module = types.ModuleType(f"compile_clean_cells_{next(_count)}")
    sys.modules[module.__name__] = module
    for i, source in enumerate(sources):
        filename = f"<{module.__name__}-{i}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - the course's own notebook cells
    return module


@pytest.fixture(scope="module")
def solution() -> types.ModuleType:
    cells = course.solution_cells(AID)
    return _module(*(course.strip_solution_markers(cells[k]) for k in (f"{AID}-forward", f"{AID}-loss")))


@pytest.fixture(scope="module")
def setup() -> types.ModuleType:
    """The notebook's setup cell: the given (legacy) code."""
    return _module(*notebook._setup(nbformat.read(course.source_notebook(AID), as_version=4)))


@pytest.fixture(scope="module")
def given(setup) -> types.SimpleNamespace:
    return ex.legacy(setup.legacy_forward, setup.legacy_masked_loss)


def test_the_solution_is_one_graph_without_breaks_and_equals_the_given_code(solution, given):
    args = ex.make_case("unit", 4, 6)
    report = probe.explain(solution, "forward", args["forward"])
    assert (report["graphs"], report["breaks"]) == (1, 0), report
    run = probe.compiled(solution, "step", [args["step"]], dynamic=False)
    assert run["error"] is None and len(run["graphs"]) == 1, run
    assert run["counters"] == {"unique_graphs": 1, "graph_breaks": 0}
    assert run["graphs"][0]["foreign"] == [] and run["graphs"][0]["operations"] >= ex.MIN_OPERATIONS["step"]
    torch.testing.assert_close(run["outputs"][0], probe.eager(given, "step", args["step"]), rtol=1e-5, atol=1e-6)


def test_the_given_forward_breaks_twice_and_fullgraph_refuses_it(setup, given):
    args = ex.make_case("unit", 3, 5)["forward"]
    report = probe.explain(types.SimpleNamespace(forward=setup.legacy_forward), "forward", args)
    assert (report["graphs"], report["breaks"]) == (3, 2), report
    assert [r["line"].split("(")[0] for r in report["reasons"]] == ["print", "if norm.max"], report
    run = probe.compiled(given, "forward", [args])
    assert run["error"] is not None and run["failed_call"] == 0 and run["outputs"] == [], run


def test_batch_sizes_compile_twice_by_default_and_once_when_marked_dynamic(solution):
    sizes = [ex.make_case(("unit", B), B, 12)["step"] for B in (8, 16, 5, 32)]
    default = probe.compiled(solution, "step", sizes)
    assert default["error"] is None and len(default["graphs"]) == 2, default
    assert [g["symbolic"] for g in default["graphs"]] == [False, True]
    shapes = [ex.make_case(("unit", B, T), B, T)["step"] for B, T in ((8, 12), (5, 20), (16, 7))]
    marked = probe.compiled(solution, "step", shapes, mark_dynamic=[[0, 1], [], [], [], [], [], [0, 1], [0]])
    assert marked["error"] is None and len(marked["graphs"]) == 1 and marked["graphs"][0]["symbolic"], marked


def test_a_loop_over_the_batch_recompiles_for_every_size_and_cannot_be_marked_dynamic(solution):
    looped = types.SimpleNamespace(forward=solution.forward, masked_loss=_module('''
import torch

def masked_loss(pred, target, lengths):
    steps = torch.arange(pred.shape[1])
    total = 0.0
    for i in range(pred.shape[0]):
        total = total + torch.where(steps < lengths[i], (pred[i] - target[i]).square().mean(-1), 0.0).sum() / lengths[i]
    return total / pred.shape[0]
''').masked_loss)
    calls = [ex.make_case(("unit", B), B, 6)["masked_loss"] for B in (4, 8, 3, 6)]
    run = probe.compiled(looped, "masked_loss", calls)
    assert run["error"] is None and len(run["graphs"]) == 4 and run["counters"]["unique_graphs"] == 4, run
    marked = probe.compiled(looped, "masked_loss", calls[:2], mark_dynamic=[[0], [0], [0]])
    assert marked["error"] is not None and "Constraint" in marked["error"], marked


def test_a_user_function_put_in_the_graph_whole_is_reported(solution):
    mod = _module('''
import torch

def scale(h):
    return h * 2.0

torch._dynamo.allow_in_graph(scale)

def forward(x, w1, b1, w2, b2, max_norm):
    return scale(torch.relu(x @ w1 + b1)) @ w2 + b2
''')
    run = probe.compiled(mod, "forward", [ex.make_case("unit", 2, 3)["forward"]])
    assert run["error"] is None, run
    assert any("scale" in name for name in run["graphs"][0]["foreign"]), run["graphs"]


def test_the_static_reading_accepts_the_solution_and_refuses_what_could_tamper_with_the_counts():
    cells = course.solution_cells(AID)
    assert ex.static_problems([cells[f"{AID}-forward"], cells[f"{AID}-loss"]]) == []
    fine = ["import torch.nn.functional as F\nimport math\nfrom torch.nn import functional\n",
            "def _mask(n):\n    return torch.arange(n)\n\ny = _mask(3)\n",
            "if torch.compiler.is_compiling():\n    pass\n"]
    for source in fine:
        assert ex.static_problems([source]) == [], source
    refused = {
        "import torch._dynamo\n": "imports torch._dynamo",
        "torch._dynamo.utils.counters.clear()\n": "private attribute ._dynamo",
        "torch.compile = lambda f, **k: f\n": "uses .compile",
        "torch.compiler.disable(f)\n": "uses .compiler",
        "from torch import compiler\n": "imports torch.compiler",
        "print(x)\n": "uses print",
        "n = x.sum().item()\n": "uses .item",
        "g = getattr(torch, 'comp' + 'ile')\n": "uses getattr",
        "m = __import__('sys')\n": "uses __import__",
        "import importlib\n": "imports importlib",
        "def f():\n    global calls\n": "uses global state",
        "torch.nn.modules.module.sys\n": "uses .modules",
        "def f(:\n": "does not parse",
    }
    for source, problem in refused.items():
        found = ex.static_problems([source])
        assert any(problem in p for p in found), (source, found)
