"""The ``compile_clean`` exercise's instruments: what the grader loads of the cells, the reading of the cells, the
probe's graphs as data and the rules the checker applies to them (on the instructor's solution, the given code and
known-bad rewrites, and on hand-made reports that must be refused).

The graded outcomes of whole submissions are in tests/test_exercises.py and tests/test_autograder.py (the
fixtures of tests/submissions/compile_clean); these tests pin down the parts those outcomes rest on.
"""

from __future__ import annotations

import copy
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


def _solution_sources() -> list[str]:
    cells = course.solution_cells(AID)
    return [course.strip_solution_markers(cells[k]) for k in (f"{AID}-forward", f"{AID}-loss")]


@pytest.fixture(scope="module")
def solution() -> types.ModuleType:
    return _module(*_solution_sources())


@pytest.fixture(scope="module")
def setup() -> types.ModuleType:
    """The notebook's setup cell: the given (legacy) code."""
    return _module(*notebook._setup(nbformat.read(course.source_notebook(AID), as_version=4)))


@pytest.fixture(scope="module")
def given(setup) -> types.SimpleNamespace:
    return ex.legacy(setup.legacy_forward, setup.legacy_masked_loss)


def _parts(*sources: str) -> list[tuple[str, str]]:
    return [(f"<cell-{i}>", s) for i, s in enumerate(sources)]


# ---------------------------------------------------------------------------------------------
# What the grader loads of the cells, and the reading
# ---------------------------------------------------------------------------------------------


def test_only_imports_definitions_and_literal_constants_are_loaded_and_line_numbers_stay():
    source = ("import torch\nEPS = 1e-12\nNEG = -math.inf\nx = torch.randn(3)\nprint(forward(x))\n"
              "def forward(x):\n    return x + EPS\n\nimport math; open('/tmp/f', 'w')\nclass A:\n    pass\n")
    (_, loaded), = probe.definitions(_parts(source))
    assert loaded.splitlines() == ["import torch", "EPS = 1e-12", "NEG = -math.inf", "", "", "def forward(x):",
                                   "    return x + EPS", "", "", "class A:", "    pass"]


def test_the_loading_refuses_defaults_that_call_and_names_bound_by_statements_it_does_not_run():
    found = probe.refusals(_parts("import torch\n\ndef setup():\n    return 1\n\n"
                                  "def forward(x, flag=setup()):\n    return x\n"))
    assert any("default value" in f and "line 6" in f for f in found), found
    found = probe.refusals(_parts("import torch\nSCALE = torch.ones(())\n\ndef forward(x):\n    return x * SCALE\n"))
    assert any("SCALE" in f and "does not run" in f for f in found), found
    assert probe.refusals(_parts("import torch\nSCALE = 2.0\n\ndef forward(x: torch.Tensor) -> torch.Tensor:\n"
                                 "    return x * SCALE\n\nprint(forward(torch.ones(2)))\n")) == []


def test_the_reading_accepts_the_solution_and_alternatives_written_differently():
    assert probe.refusals(_parts(*_solution_sources())) == []
    alternatives = [
        "import torch\nimport torch.nn.functional as F\n\ndef forward(x, w1, b1, w2, b2, max_norm):\n"
        "    h = F.relu(torch.einsum('btd,dh->bth', x, w1) + b1)\n"
        "    n = torch.linalg.vector_norm(h, dim=-1, keepdim=True)\n"
        "    return torch.where(n > max_norm, h * (max_norm / n), h) @ w2 + b2\n",
        "import torch\nfrom torch.nn import functional as F\n\ndef masked_loss(pred, target, lengths):\n"
        "    pad = torch.arange(pred.shape[1], device=pred.device)[None] >= lengths[:, None]\n"
        "    e = F.mse_loss(pred, target, reduction='none').mean(-1).masked_fill(pad, 0.0)\n"
        "    tiny = torch.finfo(e.dtype).tiny\n"
        "    return (e.sum(1) / lengths.to(e.dtype).clamp_min(tiny)).mean() + e.new_zeros(()) * e.amax()\n",
    ]
    for source in alternatives:
        assert probe.refusals(_parts(source)) == [], (source, probe.refusals(_parts(source)))


@pytest.mark.parametrize("source, finding", [
    ("import torch\ndef f(x):\n    print(x)\n", "builtin print"),
    ("import torch\ndef f(x):\n    return x.numpy()\n", ".numpy"),
    ("import torch\ndef f(x):\n    return x.data_ptr()\n", ".data_ptr"),
    ("from torch import _dynamo\n", "private"),
    ("import torch\ndef f(x):\n    torch.relu = f\n", "assigns to torch.relu"),
    ("import torch\ndef f(x):\n    t = torch\n    return t.compile\n", "as a value"),
    ("import torch\ndef f(x):\n    return torch.compile(x)\n", "torch.compile"),
    ("import torch\ndef f(x):\n    torch._dynamo.config.verbose = True\n", "torch._dynamo"),
    ("import torch\ndef f(x):\n    return getattr(torch, 'comp' + 'ile')\n", "getattr"),
    ("import os\ndef f(x):\n    return x\n", "imports os"),
    ("import torch\n@torch.compiler.disable\ndef f(x):\n    return x\n", "decorates"),
    ("import torch\nclass M:\n    def f(self, x):\n        return x\n", "class"),
    ("import torch\ndef f(x):\n    return helper(x)\n", "helper"),
    ("def f(:\n", "does not parse"),
])
def test_the_reading_refuses_what_the_rules_do_not_name(source, finding):
    found = probe.refusals(_parts(source))
    assert any(finding in f for f in found), (source, found)


def test_a_host_runs_no_top_level_statement_of_the_cells(tmp_path):
    cell = ("import torch\n\ndef forward(x, w1, b1, w2, b2, max_norm):\n    return x @ w1\n\n"
            "raise RuntimeError('a top-level statement ran')\n")
    args = ex.make_case("unit", 2, 3)["forward"]
    with ex.student(cells=_parts(cell)) as host:
        got = host.probe("compile_clean:eager", "forward", list(args))
    torch.testing.assert_close(got, args[0] @ args[1])


# ---------------------------------------------------------------------------------------------
# The graphs as data, and the rules of a graph
# ---------------------------------------------------------------------------------------------


def test_the_solution_is_one_graph_that_keeps_every_rule_and_equals_the_given_code(solution, given):
    args = ex.make_case("unit", 4, 6)
    for name in probe.FUNCTIONS:
        run = probe.compiled(solution, name, [args[name]], dynamic=False)
        assert probe.graph_problems(run, probe.shapes_of([args[name]]), max_graphs=1) == [], run
        assert run["counters"] == {"unique_graphs": 1, "graph_breaks": 0}
        assert probe.work_problems(run["graphs"][0], ex.given_families(given, "forward")
                                   if name != "masked_loss" else ex.given_families(given, "masked_loss")) == []
        torch.testing.assert_close(run["outputs"][0], probe.eager(given, name, args[name]), rtol=1e-5, atol=1e-6)
    assert ex.given_families(given, "forward")["matrix product"] == 2


def test_the_given_forward_breaks_twice_and_fullgraph_refuses_it(setup):
    args = ex.make_case("unit", 3, 5)["forward"]
    report = probe.explain(types.SimpleNamespace(forward=setup.legacy_forward), "forward", args)
    assert (report["graphs"], report["breaks"]) == (3, 2), report
    assert [r["line"].split("(")[0] for r in report["reasons"]] == ["print", "if norm.max"], report
    run = probe.compiled(types.SimpleNamespace(forward=setup.legacy_forward), "forward", [args])
    assert run["error"] is not None and run["failed_call"] == 0 and run["outputs"] == [], run
    assert "failed" in probe.graph_problems(run, probe.shapes_of([args]), max_graphs=1)[0]


def test_int_of_a_tensor_compiles_without_a_break_but_is_a_host_read_in_the_graph(setup):
    """torch 2.13 captures ``int(lengths[i])`` as an ``item`` node: no graph break, yet a host read."""
    args = ex.make_case("unit", 3, 5)["masked_loss"]
    run = probe.compiled(types.SimpleNamespace(masked_loss=setup.legacy_masked_loss), "masked_loss", [args])
    assert run["error"] is None and run["counters"]["graph_breaks"] == 0, run
    problems = probe.graph_problems(run, probe.shapes_of([args]), max_graphs=1)
    assert any("reads tensor data" in p and "Tensor.item" in p for p in problems), problems
    assert probe.graph_problems(run, probe.shapes_of([args]), max_graphs=1, host_reads=False) == []
    # the reading lets host reads through (the functions are only traced): the graph judges every spelling
    assert probe.refusals(_parts("import torch\n\ndef f(x):\n    return x[x.nonzero()[:, 0]].sum().item()\n")) == []
    floated = _module("import torch\n\ndef masked_loss(pred, target, lengths):\n"
                      "    return (pred - target).square().sum() / float(lengths.sum())\n")
    run = probe.compiled(floated, "masked_loss", [args])
    assert any("reads tensor data" in p for p in probe.graph_problems(run, probe.shapes_of([args]), max_graphs=1))


def test_batch_sizes_compile_twice_by_default_and_once_when_marked_dynamic(solution):
    calls = [ex.make_case(("unit", B), B, 12)["step"] for B in (8, 16, 5, 32)]
    default = probe.compiled(solution, "step", calls)
    assert probe.graph_problems(default, probe.shapes_of(calls), max_graphs=2) == [], default
    assert [g["call"] for g in default["graphs"]] == [0, 1]
    x_shapes = [next(i["shape"] for i in g["inputs"] if i["position"] == 0) for g in default["graphs"]]
    assert [isinstance(s[0], str) for s in x_shapes] == [False, True], x_shapes      # the batch became a symbol
    assert x_shapes[1][0] in [i.get("expr") for i in default["graphs"][1]["inputs"] if i["kind"] == "size"]
    calls = [ex.make_case(("unit", B, T), B, T)["step"] for B, T in ((8, 12), (5, 20), (16, 7))]
    marked = probe.compiled(solution, "step", calls, mark_dynamic=ex.STEP_MARKS)
    assert probe.graph_problems(marked, probe.shapes_of(calls), max_graphs=1, marked=ex.STEP_MARKS) == [], marked
    fresh = [ex.make_case(("unit", "fresh"), 8, 12)["step"]]      # mark_dynamic stays on the tensors it marked
    unmarked = probe.compiled(solution, "step", fresh, dynamic=False)
    assert any("marked dynamic" in p for p in probe.graph_problems(unmarked, probe.shapes_of(fresh), max_graphs=1,
                                                                   marked=ex.STEP_MARKS))


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
    assert any("4 compilations" in p for p in probe.graph_problems(run, probe.shapes_of(calls), max_graphs=2))
    stopped = probe.compiled(looped, "masked_loss", calls, stop_after=2)    # the verdict is known after 3 graphs
    assert len(stopped["graphs"]) == 3 and len(stopped["outputs"]) == 3, stopped
    assert any("3 compilations for the first 3 of 4" in p
               for p in probe.graph_problems(stopped, probe.shapes_of(calls), max_graphs=2))
    marked = probe.compiled(looped, "masked_loss", calls[:2], mark_dynamic=[[0], [0], [0]])
    assert marked["error"] is not None and "Constraint" in marked["error"], marked


def test_a_user_function_put_in_the_graph_whole_is_refused(solution):
    mod = _module('''
import torch

def scale(h):
    return h * 2.0

torch._dynamo.allow_in_graph(scale)

def forward(x, w1, b1, w2, b2, max_norm):
    return scale(torch.relu(x @ w1 + b1)) @ w2 + b2
''')
    args = [ex.make_case("unit", 2, 3)["forward"]]
    run = probe.compiled(mod, "forward", args)
    assert run["error"] is None, run
    assert any("scale" in p and "hidden from the compiler" in p
               for p in probe.graph_problems(run, probe.shapes_of(args), max_graphs=1)), run["graphs"]


def test_the_checker_refuses_reports_whose_counts_disagree_with_the_sizes_or_the_counters(solution, given):
    calls = [ex.make_case(("unit", B), B, 12)["step"] for B in (8, 16, 5)]
    honest = probe.compiled(solution, "step", calls)
    shapes = probe.shapes_of(calls)
    assert probe.graph_problems(honest, shapes, max_graphs=2) == []
    one = copy.deepcopy(honest)
    one["graphs"] = one["graphs"][:1]            # "compiled once": but that graph's batch size is fixed at 8
    one["counters"]["unique_graphs"] = 1
    assert any("no graph compiled by then admits" in p for p in probe.graph_problems(one, shapes, max_graphs=1))
    counted = copy.deepcopy(honest)
    counted["counters"]["unique_graphs"] = 5
    assert any("counters say" in p for p in probe.graph_problems(counted, shapes, max_graphs=2))
    late = copy.deepcopy(honest)
    late["graphs"][0]["call"] = 1
    assert any("compiled at calls" in p for p in probe.graph_problems(late, shapes, max_graphs=2))
    empty = copy.deepcopy(honest)
    empty["graphs"][0]["nodes"] = [n for n in empty["graphs"][0]["nodes"] if "matmul" not in n["target"]]
    need = {k: ex.given_families(given, "forward")[k] + ex.given_families(given, "masked_loss")[k]
            for k in probe.families([])}
    assert probe.work_problems(empty["graphs"][0], need), empty["graphs"][0]["nodes"]


def test_the_meta_device_shows_a_tensor_created_without_device_and_nothing_else(solution, given, setup):
    args = ex.make_case("unit", 3, 4)["masked_loss"]
    want = probe.eager(given, "masked_loss", args)
    assert probe.device_problem(probe.on_meta(solution, "masked_loss", args), want.shape, want.dtype) is None
    cpu = _module("import torch\n\ndef masked_loss(pred, target, lengths):\n"
                  "    valid = torch.arange(pred.shape[1])[None] < lengths[:, None]\n"
                  "    return torch.where(valid, (pred - target).square().mean(-1), 0.0).sum(1).mean()\n")
    assert "device" in probe.device_problem(probe.on_meta(cpu, "masked_loss", args), want.shape, want.dtype)
    legacy = types.SimpleNamespace(masked_loss=setup.legacy_masked_loss)   # reads values: not a device problem
    assert probe.device_problem(probe.on_meta(legacy, "masked_loss", args), want.shape, want.dtype) is None
