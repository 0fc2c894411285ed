"""The graded exercises: student versions generated from the sources, nothing secret in them, working
self-checks, and hidden tests that give every wrong submission its expected score through nbgrader."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import early
import nbformat
import pytest

from autograder import course

EXERCISES = ["allreduce", "compile_clean", "ddp_buckets", "flash_attention", "gradscaler", "no_sync_loop",
             "pipeline_schedule", "ring_allreduce", "ring_attention", "roofline_place", "ssp_server", "tensor_parallel",
             "triton_softmax", "zero1"]
MARKERS = (course.BEGIN_SOLUTION, course.END_SOLUTION, course.BEGIN_HIDDEN, course.END_HIDDEN)


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def test_every_exercise_has_its_instructor_source():
    assert course.assignments() == EXERCISES


@pytest.mark.parametrize("aid", EXERCISES)
def test_exercises_folder_is_exactly_what_nbgrader_generates_from_solutions(aid):
    problems = course.stale(aid)
    assert not problems, f"exercises/{aid} is stale ({problems}): run `make exercises`"


@pytest.mark.parametrize("aid", EXERCISES)
def test_student_version_holds_no_solution_no_hidden_test_and_no_output(aid):
    folder = course.EXERCISES / aid
    assert sorted(p.name for p in folder.iterdir()) == [f"{aid}.ipynb"]
    text = (folder / f"{aid}.ipynb").read_text()
    assert len(course.secret_lines(aid)) >= 10  # the check below has something to find
    assert course.leaked_lines(aid, text) == []
    assert not [m for m in MARKERS if m in text]
    nb = nbformat.reads(text, as_version=4)
    kinds = {"solution": 0, "check": 0, "test": 0}
    for cell in nb.cells:
        meta = _meta(cell)
        assert not cell.get("outputs"), "a student notebook carries outputs"
        if meta.get("solution") and cell.cell_type == "code":
            kinds["solution"] += 1
            assert "raise NotImplementedError" in cell.source, f"{meta['grade_id']} has no stub"
        elif meta.get("grade"):
            kinds["test"] += 1
            assert meta["grade_id"].startswith(f"{aid}-") and "-test" in meta["grade_id"]
            code = [line for line in cell.source.splitlines() if line.strip() and not line.lstrip().startswith("#")]
            assert not code, f"{meta['grade_id']}: a graded cell shows code to the student: {code}"
        elif meta.get("grade_id", "").endswith("-check"):
            kinds["check"] += 1
            assert meta.get("locked"), f"{meta['grade_id']}: self-checks are read-only"
    assert kinds["solution"] >= 2 and kinds["check"] >= 2 and kinds["test"] >= 3, kinds
    points = course.graded_cells(aid)
    assert sum(points.values()) == 10, points


def test_the_leak_check_finds_a_solution_line_pasted_into_a_page():
    line = sorted(course.secret_lines("ring_allreduce"))[0]
    assert course.leaked_lines("ring_allreduce", f"<p>harmless</p>\n    {line}\n") == [line]


def _execute(nb, path):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path)}}).execute()
    return nb


def _errors(nb) -> dict[str, bool]:
    return {_meta(c)["grade_id"]: any(o.get("output_type") == "error" for o in c.get("outputs", []))
            for c in nb.cells if _meta(c).get("grade_id", "").endswith("-check")}


# The two slow tests of each exercise (its notebooks executed, its submissions graded by nbgrader) are
# light early jobs (tests/early.py), run beside the other tests, each in one of three processes kept for
# them (a fresh interpreter, not the test process): a job is mostly process starts and a kernel handing
# cells back and forth, so up to three run at once on the two cores.  Nothing in them is timed against
# anything but a reference in the same job.  Each test waits for its own exercise's job and checks its
# result exactly as it would have run it itself.


def _self_check_job(aid: str) -> dict[str, bool]:
    """The stub executed as a student runs it (in a process of the pool).  The reference's self-checks are
    read off the notebook ``nbgrader autograde`` executed in :func:`_nbgrader_job`: it runs the same cells, in
    the same order, before the hidden ones (one execution of the reference instead of two)."""
    folder = Path(tempfile.mkdtemp(prefix=f"dlperf-selfcheck-{aid}-"))
    try:
        return _errors(_execute(nbformat.read(course.release_notebook(aid), as_version=4), folder))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _nbgrader_job(aid: str) -> list[tuple[str, dict[str, float], course.Graded]]:
    """The reference and the first fixture graded by nbgrader's autograde (in a process of the pool), each with
    the notebook as nbgrader executed it."""
    fixtures = course.snippets(aid)
    assert len(fixtures) >= 5, f"tests/submissions/{aid} needs at least five wrong submissions"
    return course.check_submissions(aid, ["solution", fixtures[0].stem], progress=False)


_POOL: list[ProcessPoolExecutor] = []
_POOL_LOCK = threading.Lock()


def _in_pool(job: Callable[[str], Any], aid: str) -> Callable[[pytest.Session], Any]:
    def run(session: pytest.Session) -> Any:
        with _POOL_LOCK:
            if not _POOL:
                _POOL.append(ProcessPoolExecutor(max_workers=3, mp_context=multiprocessing.get_context("spawn")))
                early.at_end(_POOL[0].shutdown)   # its processes end with the jobs
        return _POOL[0].submit(job, aid).result()
    return run


def _job_name(test: str, aid: str) -> str:
    return f"{test}[{aid}]"


for _test, _job in {"test_self_checks_fail_on_the_stub_and_pass_with_the_solution": _self_check_job,
                    "test_plain_nbgrader_gives_the_stated_scores": _nbgrader_job}.items():
    for _aid in EXERCISES:
        early.early(_job_name(_test, _aid), order=3, light=True,
                    needed=lambda item, test=_test, aid=_aid: (getattr(item, "originalname", None) == test
                                                               and early.param(item, "aid") == aid)
                    )(_in_pool(_job, _aid))


@pytest.mark.slow
@pytest.mark.parametrize("aid", EXERCISES)
def test_self_checks_fail_on_the_stub_and_pass_with_the_solution(aid):
    failing = early.result(_job_name("test_self_checks_fail_on_the_stub_and_pass_with_the_solution", aid))
    rows = early.result(_job_name("test_plain_nbgrader_gives_the_stated_scores", aid))
    solved = next(graded.autograded for name, _, graded in rows if name == "solution")
    assert solved is not None, "nbgrader wrote no autograded notebook for the reference"
    passing = _errors(solved)
    text = json.dumps([c.get("outputs", []) for c in solved.cells])
    assert failing and all(failing.values()), f"self-checks that pass on the stub: {failing}"
    assert passing and not any(passing.values()), f"self-checks that fail on the solution: {passing}"
    assert "Self-check" in text  # the table was printed


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("aid", EXERCISES)
def test_plain_nbgrader_gives_the_stated_scores(aid):
    """The reference solution scores 10/10 and a fixture its stated per-cell scores, through plain nbgrader.

    Through plain ``nbgrader autograde`` (what the course supports without the class autograder):
    the reference and the first fixture of each exercise (about 10 s per notebook: the hidden cells
    start their own hosts), so that the hidden cells are seen to give full and partial marks when they
    run in the student's kernel.  The stub and every fixture are graded by the class autograder in
    tests/test_autograder.py, with the same hidden cells (which gives nbgrader's scores for all of them:
    ``python -m autograder.course grade <id>`` runs them all through nbgrader).
    """
    rows = early.result(_job_name("test_plain_nbgrader_gives_the_stated_scores", aid))
    report, wrong = [], []
    for name, expected, graded in rows:
        got = graded.scores
        report.append(f"{name:<32} {graded.total:>4g}/10 in {graded.seconds:5.1f} s "
                      f"(hidden tests {graded.test_seconds:4.1f} s)")
        if any(abs(got.get(k, -1.0) - v) > 1e-6 for k, v in expected.items()) or set(got) != set(expected):
            wrong.append(f"{name}: expected {expected}, got {got}")
    print(f"\n{aid}, graded by nbgrader autograde:\n" + "\n".join(report))
    assert not wrong, "\n".join(wrong)


def test_an_edited_solution_fixture_fails_loudly_when_the_solution_no_longer_has_its_block():
    edits = course.Edits.parse("<<<<<<< solution\n    return 2 * x\n=======\n    return 3 * x\n>>>>>>> mistake\n", "t")
    assert edits.apply("def f(x):\n    return 2 * x\n", "t") == "def f(x):\n    return 3 * x\n"
    with pytest.raises(ValueError, match="holds 0 copies"):
        edits.apply("def f(x):\n    return x + x\n", "t")
    with pytest.raises(ValueError, match="only '<<<<<<< solution'"):
        course.Edits.parse("stray code\n", "t")
