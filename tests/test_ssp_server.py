"""The ``ssp_server`` checker's own parts: the workers' driver, the reference copy, synchronous SGD, the
reading's rules, and the verdicts against servers built by hand here (in this process, no host).

The exercise's notebook, its stub and its fixtures (wrong submissions and correct alternatives) are graded
through nbgrader and the class autograder (test_exercises.py, test_autograder.py); here each fixture's
server is also driven in-process and must fail the cells its ``expect`` line says, for the reason its
``why`` line gives, and the checker is held against the chapter's rule (:func:`dlperf.staleness.ssp_ready`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from autograder import course
from autograder.exercises import ssp_server as ex
from autograder.trusted import CheckFailed
from dlperf import staleness as ST
from dlperf.grading.probes import ssp_server as probe
from dlperf.grading.reading import read

FIXTURES = Path(__file__).parent / "submissions" / "ssp_server"
RUNS = [(0, "round robin", 1), (0, "worker 0 straggles", 2), (1, "worker 0 straggles", 3), (1, "random", 4),
        (2, "worker 2 straggles", 5), (4, "random", 6)]           # the hidden cells' runs


class Chapter:
    """A server written from the chapter's rule (``ST.ssp_ready``), not from the exercise's solution: the pulls
    waiting in a dict, the copy kept as w0 plus a sum of scaled gradients."""

    def __init__(self, w, workers, staleness, lr):
        self.w0, self.delta, self.n, self.s, self.lr = w.clone(), torch.zeros_like(w), workers, staleness, lr
        self.clocks, self.asked = [0] * workers, {}

    def push(self, worker, grad):
        self.delta -= (self.lr / self.n) * grad
        self.clocks[worker] += 1
        self.asked[worker] = self.clocks[worker]
        ready = [k for k, c in self.asked.items() if ST.ssp_ready(c, min(self.clocks), self.s)]
        for k in ready:
            del self.asked[k]
        return [(k, self.w0 + self.delta) for k in ready]


def _runs(make, runs=RUNS, base: int = 1000) -> list[dict]:
    out = []
    for s, order, case_id in runs:
        server = make(torch.zeros(ex.FEATURES, dtype=torch.float64), ex.WORKERS, s, ex.LR)
        run = ex.drive(server.push, s, order, base + case_id)
        run["case"] = f"s={s} {order}"
        out.append(run)
    return out


def _verdicts(runs: list[dict]) -> dict[str, str]:
    """What each hidden cell says of these runs: ``passes`` or its message."""
    out = {}
    for what, verdict in ex._VERDICTS.items():
        try:
            for run in runs:
                if what == "waits" or (what == "sync") == (run["s"] == 0):
                    verdict(run)
            out[what] = "passes"
        except CheckFailed as exc:
            out[what] = str(exc)
    return out


def _solution_parts() -> list[tuple[str, str]]:
    return [(grade_id, course.strip_solution_markers(code)) for grade_id, code in
            course.solution_cells("ssp_server").items()]


def _define(code: str) -> type:
    names: dict = {}
    exec(compile(code, "<server>", "exec"), names)          # noqa: S102 - the course's own sources
    return names["SSPServer"]


def _code(snippet: course.Snippet) -> str:
    """The fixture's two cells as one module (the instructor's where it says ``solution``, edited or not)."""
    solutions = dict(_solution_parts())
    out = []
    for grade_id in ("ssp_server-rule", "ssp_server-server"):
        cell = snippet.cells[grade_id]
        if cell is course.SOLUTION:
            cell = solutions[grade_id]
        elif isinstance(cell, course.Edits):
            cell = cell.apply(solutions[grade_id], grade_id)
        out.append(cell)
    return "\n".join(out)


def test_synchronous_sgd_is_the_mean_gradient_step_and_the_problem_is_seeded():
    X, y = ex.problem(5)
    assert X.dtype == torch.float64 and torch.equal(X, ex.problem(5)[0]) and not torch.equal(X, ex.problem(6)[0])
    w = ex.synchronous_sgd(X, y, 5, workers=3, steps=2, lr=0.3)
    g = [ex.gradient(w[0], X, y, k, 0, 5) for k in range(3)]
    assert torch.allclose(w[1], w[0] - 0.3 * (g[0] + g[1] + g[2]) / 3)
    assert not torch.equal(g[0], g[1])                        # each worker its own minibatch
    assert ex.problem(5)[1].shape == (24,) and len(w) == 3


@pytest.mark.parametrize("s", [0, 1, 2, 4])
def test_the_chapters_rule_passes_and_waits_exactly_the_minimum(s):
    runs = _runs(Chapter, [r for r in RUNS if r[0] == s])
    assert set(_verdicts(runs).values()) == {"passes"}, _verdicts(runs)
    for run in runs:
        assert run["waits"] == run["needed"] and len(run["answers"]) == ex.WORKERS * ex.STEPS
        assert not run["late"] and run["stuck"] is None
        staleness = [a["clock"] - a["slowest"] for a in run["answers"]]
        assert max(staleness) <= s                             # the bound, by the grader's clocks


def test_the_orders_make_the_bound_bite():
    """The hidden runs with s >= 1 hold a pull back (so a barrier waits too long there) and would let a worker
    run more than s clocks ahead (so a server that never waits breaks the bound); the async run never waits."""
    runs = {(r["s"], r["order"]): r for r in _runs(Chapter)}
    assert runs[(1, "worker 0 straggles")]["needed"] > 0 and runs[(2, "worker 2 straggles")]["needed"] > 0
    assert runs[(4, "random")]["needed"] == 0
    assert all(runs[(0, o)]["needed"] == ex.STEPS * (ex.WORKERS - 1) for o in ("round robin",
                                                                                     "worker 0 straggles"))


def test_the_random_order_changes_with_the_seed_and_is_the_same_on_a_regrade():
    assert ex.order_pattern("random", 1) == ex.order_pattern("random", 1) != ex.order_pattern("random", 2)
    a, b = (_runs(Chapter, [(1, "random", i)]) for i in (1, 2))
    assert [x["worker"] for x in a[0]["answers"]] != [x["worker"] for x in b[0]["answers"]]


def test_a_server_that_answers_nothing_fails_every_cell():
    class Silent:
        def __init__(self, *args):
            pass

        def push(self, worker, grad):
            return []

    verdicts = _verdicts(_runs(Silent))
    assert all("the run stopped" in v for v in verdicts.values()), verdicts


@pytest.mark.parametrize("answer, says", [
    (lambda self, k, g: None, "returns a list of (worker, weights) pairs"),
    (lambda self, k, g: [(k, self.w), (k, self.w)], "has no pull waiting"),
    (lambda self, k, g: [(k, self.w.float())], "expected a torch.Tensor like w"),
    (lambda self, k, g: [(k, self.w.tolist())], "are a list"),
])
def test_a_malformed_answer_is_named(answer, says):
    class Odd:
        def __init__(self, w, *args):
            self.w = w

        push = answer

    verdicts = _verdicts(_runs(Odd, RUNS[:1]))
    assert says in verdicts["waits"] and says in verdicts["sync"], verdicts


def _fixtures() -> list[Path]:
    return sorted(FIXTURES.glob("*.py"))


@pytest.mark.parametrize("path", _fixtures(), ids=lambda p: p.stem)
def test_each_fixture_fails_the_cells_it_should_and_passes_the_others(path):
    snippet = course.Snippet.parse(path)
    expect = snippet.expect
    code = _code(snippet)
    refused = read([("ssp_server", code)], probe.RULES)
    full = {"values": 3, "bound": 3, "waits": 2, "sync": 2}
    if refused:                                                 # every cell refuses before any run
        assert path.stem == "imports_the_library" and "dlperf" in "\n".join(refused)
        assert set(expect.values()) == {0}
        return
    verdicts = _verdicts(_runs(_define(code)))
    for what, points in full.items():
        expected = expect[f"ssp_server-test-{what}"]
        assert expected in (0, points), (what, expected)
        assert (verdicts[what] == "passes") == (expected == points), (what, verdicts[what])
    # each wrong fixture fails for its stated reason
    reasons = {"bound_strict": ("sync", "the run stopped"), "bound_loose": ("bound", "was answered while"),
               "always_bsp": ("waits", "was left waiting"), "never_waits": ("bound", "was answered while"),
               "stale_local_copy": ("values", "the server's copy at that moment"),
               "sum_not_mean": ("values", "the server's copy at that moment"),
               "pull_before_push": ("values", "are [0, 0, 0, 0]"),
               "clock_table_lazy": ("bound", "was answered while the slowest worker was at clock 0"),
               "only_the_pusher": ("values", "the run stopped")}
    if path.stem in reasons:
        what, says = reasons[path.stem]
        assert says in verdicts[what], verdicts[what]
    else:
        assert path.stem.startswith("alt_") and set(verdicts.values()) == {"passes"}


def test_the_fixtures_verdicts_do_not_depend_on_the_submissions_seed():
    """The grader draws the problem and the random order per submission: every fixture's cells pass or fail
    alike for ten seeds."""
    for path in _fixtures():
        snippet = course.Snippet.parse(path)
        if path.stem == "imports_the_library":
            continue
        server = _define(_code(snippet))
        want = {what.removeprefix("ssp_server-test-"): points > 0 for what, points in snippet.expect.items()}
        for base in range(0, 1000, 100):
            got = {what: verdict == "passes" for what, verdict in _verdicts(_runs(server, base=base)).items()}
            assert got == want, (path.stem, base, got)


def test_sum_not_mean_is_workers_times_the_step():
    code = _code(course.Snippet.parse(FIXTURES / "sum_not_mean.py"))
    run = _runs(_define(code), [(4, "round robin", 1)])[0]
    first = run["answers"][0]                                   # worker 0's pull after its one push
    assert torch.allclose(first["weights"], ex.WORKERS * first["trusted"])


def test_the_reading_lets_the_solution_through_and_refuses_the_library():
    assert read(_solution_parts(), probe.RULES) == []
    for code in ("from dlperf.staleness import ssp_ready\n", "import dlperf.kvstore\n",
                 "import torch.distributed as dist\n", "import torch\n\ndef f(x):\n    return getattr(x, 'w')\n",
                 "import os\n"):
        assert read([*_solution_parts(), ("extra", code)], probe.RULES), code


def test_the_solution_passes_in_a_host_and_a_refused_reading_fails_every_cell_before_any_host_starts():
    parts = _solution_parts()
    for what in ("values", "bound", "waits", "sync"):
        ex.check(source=parts, runs=RUNS[:3], what=what)
    bad = [*parts, ("extra", "from dlperf.staleness import ssp_ready\n")]
    for what in ("values", "bound", "waits", "sync"):
        with pytest.raises(CheckFailed, match="reading of your cell refuses"):
            ex.check(source=bad, runs=RUNS[:3], what=what)

