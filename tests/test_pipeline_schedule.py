"""The checker of the ``pipeline_schedule`` exercise: its executor, deadlock stories, activation counts and source
reading, against timelines worked by hand and schedules written here (not taken from the notebook or the library)."""

from __future__ import annotations

from collections import namedtuple
from fractions import Fraction

import pytest

from autograder import course
from autograder.exercises import pipeline_schedule as ps
from autograder.trusted import CheckFailed

Op = namedtuple("Op", "kind i")


def gpipe(p, m):
    return [[("F", i) for i in range(m)] + [("B", i) for i in range(m - 1, -1, -1)] for _ in range(p)]


def pipedream_flush(p, m, warmup=lambda p, s, m: min(p - s - 1, m)):
    stages = []
    for s in range(p):
        w = max(0, warmup(p, s, m))
        ops = [("F", i) for i in range(w)]
        for k in range(m - w):
            ops += [("F", w + k), ("B", k)]
        stages.append(ops + [("B", i) for i in range(m - w, m)])
    return stages


def test_a_timeline_worked_by_hand():
    # p=2, m=2, one micro-batch at a time, f=1, b=2: stage 0 F0 [0,1), stage 1 F0 [1,2), B0 [2,4), stage 0 B0 [4,6),
    # F1 [6,7), stage 1 F1 [7,8), B1 [8,10), stage 0 B1 [10,12).
    run = ps.execute([[("F", 0), ("B", 0), ("F", 1), ("B", 1)]] * 2, 1, 2)
    assert run.spans == [[(0, 1, "F", 0), (4, 6, "B", 0), (6, 7, "F", 1), (10, 12, "B", 1)],
                         [(1, 2, "F", 0), (2, 4, "B", 0), (7, 8, "F", 1), (8, 10, "B", 1)]]
    assert run.makespan == 12 and run.busy == [6, 6] and run.idle_fraction == Fraction(1, 2)
    assert ps.timeline(run).splitlines()[1:] == ["stage 0  F0......B0--F1......B1--",
                                                 "stage 1  ..F0B0--......F1B1--...."]


@pytest.mark.parametrize("f, b", [(1, 2), (1, 1), (2, 1), (3, 4)])
def test_both_schedules_reach_the_closed_form_and_1f1b_its_memory_bound(f, b):
    for p in range(1, 9):
        for m in range(1, 33, 3):
            for stages in (gpipe(p, m), pipedream_flush(p, m)):
                ps.complete(ps.well_formed(stages, p, m, "case"), p, m, "case")
                run = ps.execute(stages, f, b)
                assert run.makespan == ps.makespan(p, m, f, b) == (m + p - 1) * (f + b)
                assert run.idle_fraction == Fraction(p - 1, m + p - 1)
            assert ps.peak_activations(pipedream_flush(p, m)) == [min(p - s, m) for s in range(p)]
            assert ps.peak_activations(gpipe(p, m)) == [m] * p


def test_too_few_warmup_forwards_cost_time_and_too_many_cost_memory():
    few = pipedream_flush(4, 8, lambda p, s, m: min(p - s - 2, m))
    many = pipedream_flush(4, 8, lambda p, s, m: min(p - s, m))
    assert ps.execute(few, 1, 2).makespan > ps.makespan(4, 8, 1, 2)
    assert ps.execute(many, 1, 2).makespan == ps.makespan(4, 8, 1, 2)
    assert ps.peak_activations(many) == [5, 4, 3, 2]


def test_deadlocks_are_found_and_explained():
    mirrored = pipedream_flush(2, 2, lambda p, s, m: min(s, m))  # stage 0: F0 B0 F1 B1; stage 1: F0 F1 B0 B1
    with pytest.raises(ps.Deadlock, match=r'stage 0 is stuck at \("B", 0\).*needs \("B", 0\) of stage 1.*stage 1 is '
                                          r'stuck at \("F", 1\).*stage 0 lists \("F", 1\) after \("B", 0\)'):
        ps.execute(mirrored)
    with pytest.raises(ps.Deadlock, match=r'stage 0 is stuck at \("B", 0\).*its own \("F", 0\)'):
        ps.execute([[("B", 0), ("F", 0)]])


@pytest.mark.parametrize("schedule, message", [
    ("nope", "a list of p = 2 lists"),
    ([[("F", 0), ("B", 0)]], "1 stage lists"),
    ([[("F", 0), ("B", 0)], "F0 B0"], "stage 1's operations"),
    ([[("F", 0), ("B", 0)], ["F0", ("B", 0)]], "operation 0 of its list is 'F0'"),
    ([[("F", 0), ("B", 0)], [("f", 0), ("B", 0)]], 'expected the string "F"'),
    ([[("F", 0), ("B", 0)], [("F", 0.0), ("B", 0)]], "expected a Python int"),
    ([[("F", 0), ("B", 0)], [("F", True), ("B", 0)]], "expected a Python int"),
    ([[("F", 0), ("B", 0)], [("F", 1), ("B", 0)]], "micro-batch 1 does not exist"),
    ([[("F", 0), ("B", 0)], [Op("F", 0), ("B", 0)]], r"is Op\(kind='F', i=0\) \(of type Op\)"),
])
def test_malformed_schedules_are_named(schedule, message):
    with pytest.raises(CheckFailed, match=message):
        ps.well_formed(schedule, 2, 1, "case")


def test_missing_and_duplicated_operations_are_named():
    with pytest.raises(CheckFailed, match=r'stage 1 has 3 operations.*missing \("B", 0\), \("B", 1\); more than once \("F", 1\) \(2 times\)'):
        ps.complete([[("F", 0), ("F", 1), ("B", 1), ("B", 0)], [("F", 0), ("F", 1), ("F", 1)]], 2, 2, "case")


def test_the_source_reading_refuses_the_library_and_what_reaches_it():
    def findings(source):
        return ps.static_findings([("cell", source)])

    assert findings("import itertools\nimport torch\n\ndef f(p, m):\n    return [[('F', 0)] for _ in range(p)]\n") == []
    assert "imports dlperf.parallel" in findings("from dlperf.parallel import pipeline\n")[0]
    assert "imports autograder" in findings("import autograder.exercises.pipeline_schedule as x\n")[0]
    assert "imports importlib" in findings("import importlib\n")[0]
    found = " ".join(findings("import torch\nx = torch.sys.modules\n"))
    assert "the attribute sys " in found and "the attribute modules " in found
    assert "uses __import__" in findings("x = __import__('dlperf')\n")[0]
    assert "attribute __class__" in findings("x = ().__class__\n")[0]
    assert "does not parse" in findings("def f(:\n")[0]


def test_the_instructor_solution_passes_the_source_reading_and_every_fixture_says_why():
    for grade_id, source in course.solution_cells("pipeline_schedule").items():
        assert ps.static_findings([("cell", course.strip_solution_markers(source))]) == [], grade_id
    fixtures = course.snippets("pipeline_schedule")
    assert len(fixtures) >= 8
    for path in fixtures:
        snippet = course.Snippet.parse(path)
        assert snippet.why and sum(snippet.expect.values()) < 10, path.name


class _Schedules:
    """Stands in for the student's process: ``call("gpipe", p, m)`` answers with ``make(p, m)``."""

    def __init__(self, make):
        self.make = make

    def call(self, name, p, m):
        assert name == "gpipe"
        return self.make(p, m)


def test_gpipe_is_accepted_with_its_backwards_in_either_order_but_the_same_on_every_stage():
    pm, times = [(1, 1), (3, 1), (4, 6), (2, 5), (8, 32)], [(1, 2), (3, 1)]
    paper = gpipe                                                          # m-1, ..., 0
    pytorch = lambda p, m: [[("F", i) for i in range(m)] + [("B", i) for i in range(m)] for _ in range(p)]  # noqa: E731
    for make in (paper, pytorch):
        ps.check_gpipe(_Schedules(make), [], pm, times)

    def mixed(p, m):
        return [paper(p, m)[s] if s % 2 else pytorch(p, m)[s] for s in range(p)]

    with pytest.raises(CheckFailed, match=r"p=2, m=2.*same order"):   # each stage alone is fine, not together
        ps.check_gpipe(_Schedules(mixed), [], [(2, 2)], times)
    shuffled = lambda p, m: [[("F", i) for i in range(m)] + [("B", 1), ("B", 0), ("B", 2)] for _ in range(p)]  # noqa: E731
    with pytest.raises(CheckFailed, match=r"backwards run in the order"):
        ps.check_gpipe(_Schedules(shuffled), [], [(2, 3)], times)
