"""The ``roofline_place`` checker's own parts: its expected values against closed forms written here and against
PyTorch's FLOP counter, its placements against cases worked by hand, the bytes its counting host reports
against the kernels' closed forms, its cases (each operation either side of its ridge, for any submission's
seed), the reading's rules, and every fixture's verdicts for many seeds.

The exercise's notebook, its stub and its fixtures are graded whole through nbgrader and the class autograder
(test_exercises.py, test_autograder.py); here the checker is held against what it was not written from.
"""

from __future__ import annotations

import math

import pytest

from autograder import course
from autograder.exercises import roofline_place as ex
from autograder.trusted import CheckFailed, Student, set_secret
from dlperf.grading.probes import roofline_place as probe
from dlperf.grading.reading import read

S = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "int8": 1}


def closed_form(name: str, a: dict) -> tuple[int, int]:
    """The textbook closed forms, written here apart from the checker (which derives them from shapes)."""
    s = S[a["dtype"]]
    if name == "matmul_cost":
        return 2 * a["m"] * a["n"] * a["k"], (a["m"] * a["k"] + a["k"] * a["n"] + a["m"] * a["n"]) * s
    if name == "elementwise_cost":
        return a["ops"] * a["n"], (a["inputs"] + 1) * a["n"] * s
    if name == "softmax_cost":
        return 5 * a["rows"] * a["cols"], 2 * a["rows"] * a["cols"] * s
    if name == "layer_norm_cost":
        return 7 * a["rows"] * a["cols"], (2 * a["rows"] * a["cols"] + 2 * a["cols"]) * s
    if name == "conv2d_cost":
        ho = a["height"] + 2 * a["padding"] - a["kernel"] + 1
        wo = a["width"] + 2 * a["padding"] - a["kernel"] + 1
        out = a["batch"] * a["c_out"] * ho * wo
        weights = a["c_out"] * a["c_in"] * a["kernel"] ** 2
        return 2 * out * a["c_in"] * a["kernel"] ** 2, (a["batch"] * a["c_in"] * a["height"] * a["width"]
                                                        + weights + out) * s
    if name == "attention_cost":
        q = a["batch"] * a["heads"] * a["seq"] * a["head_dim"]
        return 4 * q * a["seq"], 4 * q * s
    raise ValueError(name)


def kernel_bytes(case: list) -> tuple[int, int]:
    """What the interpreter counts: matmul_tiled re-reads A's panel once per column of tiles and B's once per
    row of tiles, masked lanes move nothing, C is float32; layer_norm reads the weight and bias per row."""
    kind, *shape = case
    s = S[shape[-1]]
    if kind == "tiled":
        m, n, k, bm, bn, _ = shape[:6]
        return s * k * (m * math.ceil(n / bn) + n * math.ceil(m / bm)), 4 * m * n
    rows, cols = shape[:2]
    return 3 * rows * cols * s, rows * cols * s


@pytest.fixture
def secrets():
    """Draw the hidden cases as the class autograder does, with a new secret per submission; fixed afterwards."""
    def use(i: int) -> None:
        set_secret(f"submission {i}")
    yield use
    set_secret(None)


def test_the_expected_costs_are_the_closed_forms_on_every_hidden_case(secrets):
    for i in range(30):
        secrets(i)
        for name, args in ex.hidden_runs()["costs"]:
            assert ex.cost(name, args) == closed_form(name, args), (name, args)
    for name, args in ex.SELF_CHECK_RUNS["costs"]:
        assert ex.cost(name, args) == closed_form(name, args)
    assert probe.DTYPES == S


def test_the_products_flops_are_what_pytorchs_counter_reports_for_the_real_operations():
    import torch
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    def counted(fn, *shapes, **kwargs):
        with FlopCounterMode(display=False) as counter:
            fn(*(torch.empty(*s, device="meta") for s in shapes), **kwargs)
        return counter.get_total_flops()

    assert ex.cost("matmul_cost", {"m": 7, "n": 5, "k": 3, "dtype": "float32"})[0] == counted(torch.mm, (7, 3), (3, 5))
    conv = {"batch": 2, "c_in": 3, "height": 9, "width": 7, "c_out": 4, "kernel": 3, "padding": 1, "dtype": "float16"}
    assert ex.cost("conv2d_cost", conv)[0] == counted(F.conv2d, (2, 3, 9, 7), (4, 3, 3, 3), padding=1)
    att = {"batch": 2, "heads": 3, "seq": 11, "head_dim": 8, "dtype": "bfloat16"}
    assert ex.cost("attention_cost", att)[0] == counted(F.scaled_dot_product_attention, *[(2, 3, 11, 8)] * 3)


def test_placements_worked_by_hand():
    # an add of 1e6 float32 elements: 1e6 FLOP, 12e6 bytes, I = 1/12; 100 GFLOP/s and 20 GB/s: ridge 5
    add = ex.place(1e6, {"DRAM": 1.2e7}, 1e11, {"DRAM": 2e10})
    assert add["bound"] == "DRAM" and add["intensity"] == {"DRAM": pytest.approx(1 / 12)}
    assert add["attainable"] == pytest.approx(2e10 / 12)
    # a product with I = 2e9 / 3e6 = 667 FLOP/byte, above the ridge 5: the peak
    assert ex.place(2e9, {"DRAM": 3e6}, 1e11, {"DRAM": 2e10}) == {
        "intensity": {"DRAM": pytest.approx(2e9 / 3e6)}, "attainable": 1e11, "bound": "compute"}
    # two levels: DRAM's roof 667 x 5e10 = 3.3e13, L2's (I = 5) 5 x 2e11 = 1e12, both above the peak 2e11
    assert ex.place(2e9, {"DRAM": 3e6, "L2": 4e8}, 2e11, {"DRAM": 5e10, "L2": 2e11})["bound"] == "compute"
    # ... with a peak of 2e12 the cache's roof (1e12) binds
    two = ex.place(2e9, {"DRAM": 3e6, "L2": 4e8}, 2e12, {"DRAM": 5e10, "L2": 2e11})
    assert two["bound"] == "L2" and two["attainable"] == pytest.approx(1e12)
    # a tie is compute
    assert ex.place(10.0, {"DRAM": 1.0}, 100.0, {"DRAM": 10.0})["bound"] == "compute"


def test_the_hidden_cases_put_each_operation_on_both_sides_of_its_ridge_for_any_seed(secrets):
    for i in range(30):
        secrets(i)
        runs = ex.hidden_runs()
        roof = runs["place"]
        assert len(roof) == 15
        placed = [ex.place(*case[1:]) for case in roof]
        for j in range(0, 12, 2):          # each kind of operation: memory-bound, then compute-bound
            assert roof[j][1] == roof[j + 1][1] and roof[j][2] == roof[j + 1][2]
            assert (placed[j]["bound"], placed[j + 1]["bound"]) == ("DRAM", "compute")
        assert [p["bound"] for p in placed[12:]] == ["L2", "DRAM", "compute"]
        for case, p in zip(roof, placed):  # no case within 20 % of a tie
            flops, traffic, peak, bandwidth = case[1:]
            roofs = sorted([peak] + [flops / traffic[lv] * bandwidth[lv] for lv in traffic])
            assert roofs[1] > 1.2 * roofs[0], case[0]
            if "L2" in bandwidth:          # a cache faster than main memory
                assert bandwidth["L2"] > 2 * bandwidth["DRAM"], case[0]
        m, n, k, bm, bn = runs["kernels"][0][1:6]
        assert bm != bn and m != n and m % bm and n % bn
        assert {c[-1] for c in runs["kernels"] if c[0] == "tiled"} == {"float16", "float32"}
        costs = runs["costs"]
        assert all(S[args["dtype"]] >= 2 for _, args in costs[:6]) and costs[1][1]["ops"] >= 2
    secrets(0)
    first = ex.hidden_runs()
    secrets(1)
    assert ex.hidden_runs() != first


def test_the_counting_host_counts_the_kernels_closed_forms():
    cases = [*ex.SELF_CHECK_RUNS["kernels"], ex.hidden_runs()["kernels"][0],
             ["tiled", 33, 20, 17, 16, 16, 8, "bfloat16"], ["layer_norm", 3, 37, "float16"]]
    with Student(parts=[("setup", probe.SETUP)], timeout=120) as host:
        counted = host.probe("roofline_place:count", cases, 1)
    assert [tuple(c) for c in counted] == [kernel_bytes(c) for c in cases]


def _solution_parts() -> list[tuple[str, str]]:
    return [(gid, course.strip_solution_markers(code)) for gid, code in course.solution_cells("roofline_place").items()]


def test_the_reading_lets_the_solution_through():
    assert read(_solution_parts(), probe.RULES) == []


@pytest.mark.parametrize("code", [
    "import torch\n",
    "from dlperf.probe import attainable_flops\n",
    "import dlperf.kernels.traffic as T\n",
    "import triton\n",
    "def f(x):\n    return getattr(x, 'real')\n",
    "def f(x):\n    return x.__class__\n",
    "class Roof:\n    pass\n",
    "import os\n",
])
def test_the_reading_refuses_what_the_exercise_does_not_need(code):
    assert read([*_solution_parts(), ("extra", code)], probe.RULES)


def _simulate(parts: list[tuple[str, str]], runs: dict) -> dict[str, str]:
    """The verdicts of each hidden cell for the cells ``parts`` run in this process (the reading skipped), with
    the kernels' bytes from the closed forms (which the counting host is tested against above)."""
    ns: dict = {}
    exec(compile("\n".join(code for _, code in parts), "<fixture>", "exec"), ns)

    def call(name, *args, **kwargs):
        try:
            return ("ok", ns[name](*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - a stub's NotImplementedError is a verdict
            return ("raised", f"{type(exc).__name__}: {exc}")

    got = {"costs": [call(name, **args) for name, args in runs["costs"]],
           "place": [call("roofline", f, t, p, b) for _, f, t, p, b in runs["place"]],
           "kernels": [call(ex.KERNELS[c[0]], *c[1:]) for c in runs["kernels"]],
           "counted": [kernel_bytes(c) for c in runs["kernels"]]}
    out = {}
    for what, verdict in ex._VERDICTS.items():
        try:
            verdict(runs, got)
            out[f"roofline_place-test-{what}"] = "passes"
        except CheckFailed as exc:
            out[f"roofline_place-test-{what}"] = str(exc)
    return out


def test_every_fixture_gets_its_scores_for_every_seed(secrets):
    """The fixtures' expected scores hold for any submission's cases, not only for the fixed seed the fixture
    test grades with (the class autograder draws new cases for every submission)."""
    subjects = []
    for path in course.snippets("roofline_place"):
        snippet = course.Snippet.parse(path)
        if snippet.name == "imports_the_library":      # refused by the reading, whatever the cases
            continue
        nb = course.build_submission("roofline_place", snippet.cells)
        parts = [(c.metadata["nbgrader"]["grade_id"], course.strip_solution_markers(c.source)) for c in nb.cells
                 if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
        subjects.append((snippet.name, parts, {k: v > 0 for k, v in snippet.expect.items()}))
    subjects.append(("reference", _solution_parts(), dict.fromkeys(course.graded_cells("roofline_place"), True)))
    assert len(subjects) >= 14
    for i in range(25):
        secrets(i)
        runs = ex.hidden_runs()
        for name, parts, passes in subjects:
            got = _simulate(parts, runs)
            assert {k: v == "passes" for k, v in got.items()} == passes, (i, name, got)


def test_a_refused_reading_fails_every_cell_before_any_host_starts():
    parts = [*_solution_parts(), ("extra", "import torch\n")]
    for what in ("costs", "place", "kernels"):
        with pytest.raises(CheckFailed, match="reading of your cells refuses"):
            ex.check(source=parts, runs=ex.SELF_CHECK_RUNS, what=what)


def test_the_runs_are_made_once_for_the_three_cells(monkeypatch):
    made = []
    real = ex._make
    monkeypatch.setattr(ex, "_make", lambda *a: made.append(1) or real(*a))
    monkeypatch.setitem(ex._made, "key", None)
    runs = {"costs": ex.SELF_CHECK_RUNS["costs"][:2], "place": ex.SELF_CHECK_RUNS["place"][:1]}
    for what in ("costs", "place"):
        ex.check(source=_solution_parts(), runs=runs, what=what)
    assert made == [1]
