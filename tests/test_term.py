"""Several assignments graded in one run (``autograder grade A B C``, ``--all``): one start-up, one pool.

A small course of three assignments (the instructors' page's ``squares``, twice in trusted mode with
different setup imports and once in nbgrader mode, each with a right, a subtly wrong and a cheating
submission) is graded in one run and, in a copy, one assignment at a time: every record must be the
same, and the run must have started one check run for both trusted assignments (the warm check run
of its one worker serves the second assignment too, each job in a fork of its own), where the runs
one by one start one each.  The pool itself (which check run and which spare kernel a job gets) is
tested on real sandboxes below.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell

from autograder import cli, course, examples, slots
from autograder.engine import _next_preloads
from autograder.gradebook import Writer
from autograder.runner import Settings

PY = sys.executable
# assignment -> (mode, setup cell before the solution: its imports are what the warm kernel preloads)
TERM = {"sq_first": ("trusted", "import math"), "sq_second": ("trusted", "import json"),
        "sq_plain": ("nbgrader", "import math")}
# student -> (score, maximum) per mode, written out from the specification (tests/test_examples.py)
EXPECTED = {"nbgrader": {"right": (3, 3), "wrong": (1, 3), "cheat": (3, 3)},
            "trusted": {"right": (2, 2), "wrong": (0, 2), "cheat": (0, 2)}}


def _course(root: Path) -> Path:
    """The three assignments, released with nbgrader, and three submissions of each."""
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.root = {str(root)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(root / 'gradebook.db')!r}\n")
    for name, (mode, setup) in TERM.items():
        nb = examples.source_notebook(mode)
        nb.cells.insert(1, new_code_cell(setup))
        (root / "source" / name).mkdir(parents=True)
        nbformat.write(nb, root / "source" / name / "squares.ipynb")
        examples._run(["nbgrader", "generate_assignment", name], root)
        release = nbformat.read(root / "release" / name / "squares.ipynb", as_version=4)
        for student, code in examples.SUBMISSIONS.items():
            sub = nbformat.from_dict(release)
            for cell in sub.cells:
                if cell.metadata.get("nbgrader", {}).get("solution"):
                    cell.source = code
            (root / "submitted" / student / name).mkdir(parents=True)
            nbformat.write(sub, root / "submitted" / student / name / "squares.ipynb")
    return root


def _grade(root: Path, *args: str) -> str:
    run = subprocess.run([PY, "-m", "autograder", "--course", str(root), "grade", *args, "--workers=1",
                          "--timeout=300", "--memory=2", "--processes=256"], capture_output=True, text=True,
                         timeout=900, cwd=course.REPO)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return run.stdout


def _records(root: Path) -> dict[tuple[str, str], tuple]:
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        return {(r["assignment"], r["student"]): (r["outcome"], r["score"], r["max_score"], json.dumps(r["cells"]),
                                                  r["mode"]) for r in writer.records()}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_term_in_one_run_grades_as_one_assignment_at_a_time(tmp_path: Path, bubblewrap: None) -> None:
    together = _course(tmp_path / "together")
    apart = {name: tmp_path / f"apart-{name}" for name in TERM}   # a copy each: one grader per course root
    for root in apart.values():
        shutil.copytree(together, root)
    # The four runs two at a time (each is mostly one worker's start-up; nothing here is timed).
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        running = pool.submit(_grade, together, "--all")
        alone_runs = {name: pool.submit(_grade, root, name) for name, root in apart.items()}
        out = running.result()
        alone = {name: run.result() for name, run in alone_runs.items()}

    got = _records(together)
    expected = {key: value for name, root in apart.items() for key, value in _records(root).items()
                if key[0] == name}
    assert set(got) == {(a, s) for a in TERM for s in examples.SUBMISSIONS}
    assert got == expected
    for (assignment, student), (outcome, score, max_score, _, mode) in got.items():
        assert mode == TERM[assignment][0] and outcome == "graded"
        assert (score, max_score) == EXPECTED[mode][student], (assignment, student)
    # one start-up and one progress count over all nine submissions
    assert out.count("on 1 CPU worker(s)") == 1, out
    assert "grading 9 submission(s) of 3 assignment(s) (sq_first 3, sq_plain 3, sq_second 3)" in out, out
    assert re.search(r"\[9/9\] sq_\w+/\w+: ", out), out
    # one check run for both trusted assignments (a fresh check run's first job says jobs == 1); one each apart
    assert "9 submission(s) graded in this run, 1 check run(s) started for them" in out, out
    assert all(f"{name}: grading 3 submission(s) on 1 CPU worker(s)" in alone[name] for name in TERM)
    # one report per assignment and the term's
    for name in TERM:
        assert (together / "reports" / f"{name}.html").is_file()
    term = (together / "reports" / "term.html").read_text()
    assert all(name in term for name in TERM)
    # nothing left: a second run grades nothing and starts no cluster
    again = _grade(together, "sq_first", "sq_second", "sq_plain")
    assert all(f"{name}: 3 submission(s) already graded" in again for name in TERM) and "CPU worker(s)" not in again


def test_which_names_are_assignments_and_which_students(tmp_path: Path) -> None:
    root = tmp_path / "course"
    for name in ("alpha", "beta"):
        (root / "source" / name).mkdir(parents=True)
        nbformat.write(examples.source_notebook("nbgrader"), root / "source" / name / "squares.ipynb")
    (root / "nbgrader_config.py").write_text(f"c = get_config()\nc.CourseDirectory.root = {str(root)!r}\n")
    (root / "submitted" / "ada" / "beta").mkdir(parents=True)
    (root / "submitted" / "ada" / "beta" / "squares.ipynb").write_text("{}")

    def targets(*names: str, everything: bool = False) -> tuple[list[str], list[str]]:
        return cli._grade_targets(argparse.Namespace(names=list(names), all=everything), root)

    assert targets("alpha") == (["alpha"], [])
    assert targets("alpha", "ada", "bob") == (["alpha"], ["ada", "bob"])
    assert targets("alpha", "beta", "ada") == (["alpha", "beta"], ["ada"])
    assert targets("nosuch", "ada") == (["nosuch"], ["ada"])   # the first name is always an assignment
    assert targets("ada", everything=True) == (["beta"], ["ada"])   # --all: those with a submission
    with pytest.raises(ValueError, match="--all"):
        targets()


def test_a_worker_warms_the_kernel_of_its_likely_next_job() -> None:
    class J:
        def __init__(self, assignment: str) -> None:
            self.assignment = assignment

    todo = [J(a) for a in "aaabbc"]
    kinds = {"a": ("x",), "b": ("y",), "c": ("z",)}
    assert _next_preloads(todo, kinds, 1) == [("x",), ("x",), ("y",), ("y",), ("z",), ("z",)]
    assert _next_preloads(todo, kinds, 2) == [("x",), ("y",), ("y",), ("z",), ("z",), ("z",)]


SETTINGS = Settings(memory_bytes=2 * 2**30, processes=256)


def _job(source: str) -> dict:
    return {"notebooks": [{"name": "", "setup": [], "solutions": [], "tests": [{"grade_id": "t", "source": source}]}],
            "budget": 60.0, "secret": "s", "files": {}}


def _out(reply: dict) -> str:
    return "".join(o.get("text", "") for o in reply["tests"][""]["t"]["outputs"]).strip()


def _warm(key: tuple) -> object:
    """What the worker keeps warm for a submission of ``key``: its kernel server where kernels are served,
    else its spare slot."""
    with slots._lock:
        return slots._kernel_servers.get(key) or slots._spare.get(key)


def _kept() -> list:
    with slots._lock:
        return [*slots._kernel_servers, *slots._spare]


@pytest.mark.parametrize("served", ["served", "warm kernels"])
@pytest.mark.usefixtures("bubblewrap")
def test_a_worker_warms_up_then_one_check_run_serves_two_assignments_and_the_spare_is_the_next_ones(
        served: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DLPERF_KERNEL_SERVER", "1" if served == "served" else "0")
    union = ("colorsys", "wave")      # two modules nothing else here imports
    first_key, next_key = (SETTINGS, None, ("colorsys",), 1), (SETTINGS, None, ("wave",), 1)
    try:
        # the worker warms up before its first job comes (the engine asks while it reads the assignments)
        slots.warm(SETTINGS, None, True, ("colorsys",), 1, check_preload=union)
        with slots._lock:
            warming = list(slots._warming)
        concurrent.futures.wait(warming, timeout=120)
        warm_kernel = _warm(first_key)
        assert warm_kernel is not None
        warm_server = slots._servers[(SETTINGS, None, union, 1)]
        first = slots.take_slot(SETTINGS, None, prewarm=True, checks=True, preload=("colorsys",), threads=1,
                                check_preload=union, next_preload=("wave",))
        assert (first.kernels is not None) == (served == "served")
        server = first.server
        assert (first.kernels or first) is warm_kernel and server is warm_server and server.run.jobs == 0
        first.checks.ready(120)
        reply = first.checks.run(_job("import sys\nprint({'colorsys', 'wave'} <= set(sys.modules))"), timeout=60)
        assert reply["done"] and _out(reply) == "True"     # the check run imported the union
        first.close()
        with slots._lock:
            warming = list(slots._warming)
        concurrent.futures.wait(warming, timeout=120)
        # the next assignment's kernel (its own imports) is warm; a spare slot is the only one kept, a
        # kernel server is kept beside the one just used
        spare = _warm(next_key)
        assert spare is not None
        assert sorted(_kept()) == sorted([first_key, next_key] if served == "served" else [next_key])
        second = slots.take_slot(SETTINGS, None, prewarm=False, checks=True, preload=("wave",), threads=1,
                                 check_preload=union)
        assert (second.kernels or second) is spare   # warm: no sandbox to wait for
        assert second.server is server               # the same warm check run ...
        second.checks.ready(60)
        reply = second.checks.run(_job("print(globals().get('x', 'fresh'))\nx = 2"), timeout=60)
        assert reply["done"] and server.run.jobs == 2  # ... in a fresh fork for this job
        assert _out(reply) == "fresh"
        second.close()
        # without a union (one assignment per run), a check run is the assignment's own, as before
        other = slots.take_slot(SETTINGS, None, prewarm=False, checks=True, preload=("wave",), threads=1)
        assert other.server is not server
        other.close()
    finally:
        slots.release_spares()
    assert not slots._servers and not slots._spare and not slots._kernel_servers


def test_a_new_gradebook_is_stamped_with_alembics_head_read_in_process(tmp_path: Path) -> None:
    """A new gradebook asks nbgrader for the head of its migrations; the grader reads it in its own process
    (course.alembic_head) instead of starting the ``alembic heads`` command: the same answer."""
    import sqlite3

    from nbgrader import api

    course.alembic_on_path()
    assert getattr(api.get_alembic_version, "_in_process", False)
    with api._temp_alembic_ini("sqlite:////tmp/gradebook.db") as ini:
        printed = subprocess.run(["alembic", "-c", ini, "heads"], capture_output=True, text=True, check=True).stdout
    head = printed.split("\n")[0].split(" ")[0]
    assert head and course.alembic_head() == head == api.get_alembic_version()
    with Writer(f"sqlite:///{tmp_path / 'gradebook.db'}", tmp_path):
        pass
    assert sqlite3.connect(tmp_path / "gradebook.db").execute("SELECT version_num FROM alembic_version").fetchall() \
        == [(head,)]
