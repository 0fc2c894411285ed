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


def test_the_reading_is_the_shared_allow_list_with_the_exercise_s_public_rules():
    from dlperf.grading.probes.pipeline_schedule import RULES
    from dlperf.grading.reading import read

    assert ps.RULES is RULES

    def findings(source):
        return ps.findings([("cell", source)])

    assert findings("from __future__ import annotations\nimport heapq, itertools, math\nfrom collections import deque\n"
                    "from typing import List\n\n\ndef f(p: int, m: int) -> List[list]:\n    q = deque([1])\n"
                    "    q.appendleft(0)\n    h = []\n    heapq.heappush(h, (math.ceil(p / 2), 1))\n"
                    "    return [list(itertools.chain([('F', 0)], q)) for _ in range(p)]\n") == []
    refused = {
        "from dlperf.parallel import pipeline\n": "the chapter's library has both schedules ready-made",
        "import torch.distributed.pipelining as tp\n": "the chapter's library has both schedules ready-made",
        "import autograder.exercises.pipeline_schedule as x\n": "imports autograder.exercises",
        "import importlib\n": "imports importlib",
        "import operator\nf = operator.attrgetter('parallel.pipeline')\n": "imports operator",
        "import functools\nx = functools.reduce(getattr, ['a'], 0)\n": "getattr",
        "x = __import__('dlperf')\n": "__import__",
        "x = ().__class__\n": "special attribute",
        "import torch\nx = torch.arange(3)\n": "plain Python data",
        "import typing\nx = typing.get_type_hints(len)\n": "it evaluates strings",
        "def f():\n    def g():\n        yield gen.gi_frame.f_back\n    gen = g()\n    return next(gen)\n": ".gi_frame",
        "def f(p, m):\n    return helper(p, m)\n": "which these cells do not define",
        "def f(:\n": "does not parse",
    }
    for source, message in refused.items():
        found = findings(source)
        assert found and message in " ".join(found), (source, found)
        assert found == read([("cell", source)], RULES)        # the same code the self-check runs
    # a class of the cell's own may keep private attributes on self
    assert findings("class Stage:\n    def __init__(self):\n        self._ops = []\n\n    def add(self, op):\n"
                    "        self._ops.append(op)\n        return self._ops\n") == []


def test_the_ready_made_schedules_are_switched_off_in_the_host():
    """Whatever the reading says, the host has no library schedule to call and no source of one to read."""
    from autograder.trusted import Student

    cell = (
        "import importlib, inspect\n\n\n"
        "def probe(p, m):\n"
        "    out = {}\n"
        "    lib = importlib.import_module('dlperf.parallel.pipeline')\n"
        "    for name in ('gpipe', 'one_f_one_b', 'SCHEDULES', 'simulate'):\n"
        "        try:\n"
        "            out[name] = repr(getattr(lib, name)(p, m))[:60]\n"
        "        except Exception as exc:\n"
        "            out[name] = type(exc).__name__ + ': ' + str(exc)[:80]\n"
        "    out['source'] = len(open(lib.__file__).read())\n"
        "    torch_schedules = importlib.import_module('torch.distributed.pipelining.schedules')\n"
        "    for name in ('Schedule1F1B', 'ScheduleGPipe', 'ScheduleInterleaved1F1B', '_get_1f1b_rank_ops'):\n"
        "        try:\n"
        "            out[name] = repr(getattr(torch_schedules, name)(None, m))[:60]\n"
        "        except Exception as exc:\n"
        "            out[name] = type(exc).__name__ + ': ' + str(exc)[:80]\n"
        "    out['torch source'] = len(open(torch_schedules.__file__).read())\n"
        "    return out\n")
    with Student(parts=[("cell", cell)], forbid=ps.FORBID) as student:
        out = student.call("probe", 3, 4)
    assert out.pop("source") == 0 and out.pop("torch source") == 0, out
    for name, what in out.items():
        assert what.startswith("RuntimeError") and "switched off" in what, (name, what)


def test_the_instructor_solution_passes_the_reading_and_every_fixture_says_why():
    for grade_id, source in course.solution_cells("pipeline_schedule").items():
        assert ps.findings([("cell", course.strip_solution_markers(source))]) == [], grade_id
    fixtures = course.snippets("pipeline_schedule")
    wrong = [p for p in fixtures if not p.stem.startswith("correct_")]
    right = [p for p in fixtures if p.stem.startswith("correct_")]
    assert len(wrong) >= 15 and len(right) >= 2, (len(wrong), len(right))
    for path in fixtures:
        snippet = course.Snippet.parse(path)
        total = sum(snippet.expect.values())
        assert snippet.why, path.name
        assert (total == 10) == (path in right), (path.name, total)


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
