"""An ordinary nbgrader course, built as instructors build one, graded by plain nbgrader and by the class autograder.

Where ``tests/test_nbgrader_compat.py`` grades nbgrader's own fixture notebooks, this file
builds a course the way nbgrader's own tests of the exchange do: ``generate_assignment``,
``release_assignment``, each student ``fetch_assignment`` (a home and configuration of their
own), answers, ``submit``, the instructor ``collect``.  Then a copy of the course is graded
with plain ``nbgrader autograde`` and another with ``autograder grade``, side by side, and
the two are compared on what an instructor sees: the exported scores (late penalties
included), the course's configuration, kernels, feedback, manual-grading flags.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import early
import nbformat
import pytest

from autograder import course
from autograder.gradebook import Writer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2700)]

BIN = Path(sys.executable).parent
COURSE_ID = "course101"
DUE = "2026-01-15 12:00:00 UTC"

# ---------------------------------------------------------------------------------------------
# The assignment: ps1, two notebooks of 7 points each (a visible test of 4 points, a test of 3
# with a hidden part), and an answer cell graded by hand in p1.
# ---------------------------------------------------------------------------------------------

RIGHT = "def sum_of_squares(n):\n    return sum(i * i for i in range(1, n + 1))\n"
# why: the closed form, written otherwise than the reference: full marks
CLOSED_FORM = "def sum_of_squares(n):\n    return n * (n + 1) * (2 * n + 1) // 6\n"
# why: passes the visible checks only (the values it was shown): 4 of 7
SHOWN_ONLY = ("def sum_of_squares(n):\n    return {1: 1, 2: 5, 3: 14}.get(n, 0)\n")
LOOP = "def sum_of_squares(n):\n    while True:\n        pass\n"


def _cell(kind: str, source: str, **nbgrader: object) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source) if kind == "code" else nbformat.v4.new_markdown_cell(source)
    if nbgrader:
        cell.metadata["nbgrader"] = {"schema_version": 3, "locked": False, "solution": False, "grade": False,
                                     "task": False, **nbgrader}
    return cell


def source_notebook(name: str, kernel: str = "python3", test: str = "", manual: bool = False, setup: str = "") -> str:
    """The instructor's notebook ``name`` of ps1 (``test``: another visible test cell's source; ``setup``:
    a locked code cell first)."""
    cells = [
        _cell("markdown", f"# {name}: sums of squares", grade_id=f"{name}-intro", locked=True),
        *([_cell("code", setup, grade_id=f"{name}-setup", locked=True)] if setup else []),
        _cell("code", "def sum_of_squares(n):\n    ### BEGIN SOLUTION\n    return sum(i * i for i in range(1, n + 1))"
                      "\n    ### END SOLUTION\n", grade_id=f"{name}-answer", solution=True),
        _cell("code", test or "assert sum_of_squares(1) == 1\nassert sum_of_squares(2) == 5",
              grade_id=f"{name}-visible", grade=True, locked=True, points=4),
        _cell("code", "assert sum_of_squares(3) == 14\n### BEGIN HIDDEN TESTS\nassert sum_of_squares(11) == 506\n"
                      "### END HIDDEN TESTS", grade_id=f"{name}-hidden", grade=True, locked=True, points=3),
    ]
    if manual:
        cells.append(_cell("markdown", "Why does the closed form hold?", grade_id=f"{name}-why-q", locked=True))
        cells.append(_cell("markdown", "YOUR ANSWER HERE", grade_id=f"{name}-why", solution=True, grade=True,
                           points=2))
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    return nbformat.writes(nb)


def answered(release: str, answers: dict[str, str]) -> str:
    """The student's version ``release`` with solution cells answered: grade id -> new source."""
    nb = nbformat.reads(release, as_version=4)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in answers:
            cell.source = answers[gid]
    return nbformat.writes(nb)


# ---------------------------------------------------------------------------------------------
# Building a course through nbgrader's exchange
# ---------------------------------------------------------------------------------------------


def _env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""))
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")):
        env[var] = str(home / ".jupyter-home" / sub)
    env.pop("JUPYTER_PATH", None)
    env.update(extra or {})
    return env


def nbgrader(cwd: Path, *args: str, env: dict[str, str] | None = None, check: bool = True
             ) -> subprocess.CompletedProcess:
    course.alembic_on_path()
    out = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=_env(cwd, env), capture_output=True,
                         text=True, timeout=600, check=False)
    if check:
        assert out.returncode == 0, f"`nbgrader {' '.join(args)}` exited {out.returncode}:\n{out.stdout}{out.stderr}"
    return out


def autograder(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", "--course", str(root), *args], capture_output=True,
                          text=True, timeout=900, cwd=course.REPO, env=_env(root, env))


@dataclass
class Course:
    """A course built through the exchange, graded twice: ``plain`` by nbgrader, ``ours`` by the autograder."""

    plain: Path
    ours: Path
    exchange: Path
    graded: subprocess.CompletedProcess          # autograder grade's run
    plain_log: subprocess.CompletedProcess       # nbgrader autograde's run
    env: dict[str, str]


def build(base: Path, config: str, sources: dict[str, dict[str, str]],
          work: dict[str, dict[str, dict[str, str]]], stamps: dict[str, str] | None = None,
          plugin: str = "", env: dict[str, str] | None = None) -> Path:
    """The instructor's course at ``base/instructor`` after ``collect``.

    ``sources``: assignment -> notebook name -> source notebook (JSON).  ``work``: student ->
    assignment -> file name -> the student's file, where a value that starts with ``answers:`` is
    a JSON object of answers filled into the fetched notebook of that name (:func:`answered`).
    ``stamps``: student -> the timestamp.txt the collected submission is given afterwards (as
    nbgrader's own tests write it), to put it at a chosen distance from the due date.
    """
    exchange = base / "exchange"
    exchange.mkdir(parents=True)
    exchange.chmod(0o777)
    root = base / "instructor"
    (root / "source").mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()  # noqa: F821\nc.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.CourseDirectory.root = {str(root)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(root / 'gradebook.db')!r}\n"
        f"c.Exchange.root = {str(exchange)!r}\n{config}")
    if plugin:
        (root / "late_plugin.py").write_text(plugin)
    for assignment, notebooks in sources.items():
        for name, text in notebooks.items():
            (root / "source" / assignment).mkdir(parents=True, exist_ok=True)
            (root / "source" / assignment / f"{name}.ipynb").write_text(text)
        nbgrader(root, "db", "assignment", "add", assignment, "--duedate", DUE, env=env)
        nbgrader(root, "generate_assignment", assignment, env=env)
        nbgrader(root, "release_assignment", assignment, env=env)
    for student, assignments in work.items():
        home = base / "students" / student
        home.mkdir(parents=True)
        (home / "nbgrader_config.py").write_text(
            f"c = get_config()  # noqa: F821\nc.CourseDirectory.course_id = {COURSE_ID!r}\n"
            f"c.CourseDirectory.student_id = {student!r}\nc.Exchange.root = {str(exchange)!r}\n"
            f"c.Exchange.cache = {str(home / '.nbgrader_cache')!r}\n")
        for assignment, files in assignments.items():
            nbgrader(home, "fetch_assignment", assignment, env=env)
            folder = home / assignment
            fetched = {p.name: p.read_text() for p in folder.glob("*.ipynb")}
            for p in folder.glob("*.ipynb"):
                p.unlink()           # what the student hands in is exactly ``files``
            for name, what in files.items():
                if what.startswith("answers:"):
                    # a renamed copy (p1-final.ipynb) starts from the fetched notebook it copies
                    text = answered(fetched.get(name) or fetched[name.split("-")[0] + ".ipynb"],
                                    json.loads(what[len("answers:"):]))
                elif what == "fetched":
                    text = fetched[name]
                else:
                    text = what
                (folder / name).write_text(text)
            nbgrader(home, "submit", assignment, env=env)
    for assignment in sources:
        nbgrader(root, "collect", assignment, env=env)
    for student, stamp in (stamps or {}).items():
        for folder in (root / "submitted" / student).iterdir():
            (folder / "timestamp.txt").write_text(stamp)
    return root


def grade_both(base: Path, root: Path, assignment: str | list[str], env: dict[str, str] | None = None,
               grade_args: tuple[str, ...] = ()) -> Course:
    """Copies of the collected course graded by plain nbgrader and by the autograder, side by side."""
    assignments = [assignment] if isinstance(assignment, str) else assignment
    plain, ours = base / "plain", base / "ours"
    for to in (plain, ours):
        shutil.copytree(root, to, symlinks=True)
        text = (to / "nbgrader_config.py").read_text().replace(str(root), str(to))
        (to / "nbgrader_config.py").write_text(text)
    ours_run = subprocess.Popen([sys.executable, "-m", "autograder", "--course", str(ours), "grade", *assignments,
                                 "--workers=1", "--timeout=300", *grade_args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=course.REPO, env=_env(ours, env))
    try:
        logs = [nbgrader(plain, "autograde", a, env=env, check=False) for a in assignments]
        plain_log = subprocess.CompletedProcess(logs[0].args, max(x.returncode for x in logs),
                                                "".join(x.stdout for x in logs), "".join(x.stderr for x in logs))
        stdout, stderr = ours_run.communicate(timeout=900)
    finally:
        ours_run.kill()
    graded = subprocess.CompletedProcess(ours_run.args, ours_run.returncode, stdout, stderr)
    return Course(plain, ours, base / "exchange", graded, plain_log, dict(env or {}))


def exported(c: Course, assignment: str = "ps1") -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """``nbgrader export`` of the plain course and ``autograder export`` of ours: student -> row of ``assignment``."""
    nbgrader(c.plain, "export", "--to", str(c.plain / "grades.csv"), env=c.env)
    out = autograder(c.ours, "export", "--to", str(c.ours / "grades.csv"), env=c.env)
    assert out.returncode == 0, out.stdout + out.stderr
    read = lambda path: {r["student_id"]: r for r in csv.DictReader(path.open())  # noqa: E731
                         if r["assignment"] == assignment}
    return read(c.plain / "grades.csv"), read(c.ours / "grades.csv")


def records(root: Path, assignment: str) -> dict[str, dict]:
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        return {r["student"]: r for r in writer.records(assignment)}


# ---------------------------------------------------------------------------------------------
# Late penalties
# ---------------------------------------------------------------------------------------------

# A course's own plugin, a subclass of nbgrader's LateSubmissionPlugin: a point per started hour
# late, each notebook's whole score when more than 4 hours late.
LATE_PLUGIN = '''import math

from nbgrader.plugins import LateSubmissionPlugin


class HourlyThenZero(LateSubmissionPlugin):
    def late_submission_penalty(self, student_id, score, total_seconds_late):
        if total_seconds_late > 4 * 3600:
            return score
        return math.ceil(total_seconds_late / 3600)
'''

BOTH_RIGHT = {"p1.ipynb": "answers:" + json.dumps({"p1-answer": RIGHT}),
              "p2.ipynb": "answers:" + json.dumps({"p2-answer": CLOSED_FORM})}
LATE_WORK = {
    # why: on time, both notebooks right: 14 of 14, no penalty
    "ontime": {"ps1": BOTH_RIGHT},
    # why: one hour late (to the second): a point per notebook, 12 of 14
    "hour": {"ps1": BOTH_RIGHT},
    # why: 4.5 hours late with p1 half right and p2 not handed in: 4 raw, all of it taken: 0
    "late45": {"ps1": {"p1.ipynb": "answers:" + json.dumps({"p1-answer": SHOWN_ONLY})}},
    # why: handed in at 12:30 Berlin time (11:30 UTC), before the 12:00 UTC due date: no penalty
    "berlin": {"ps1": BOTH_RIGHT},
    # why: handed in at 08:30 New York time (13:30 UTC), 1.5 h late: 2 points per notebook
    "newyork": {"ps1": {"p1.ipynb": BOTH_RIGHT["p1.ipynb"], "p2.ipynb": "answers:" + json.dumps(
        {"p2-answer": SHOWN_ONLY})}},
    # why: worked in a renamed copy (p1-final.ipynb) beside the untouched p1.ipynb: p1 is graded as handed
    # in (0), p2 is missing (0); the record says which notebook was not graded
    "renamed": {"ps1": {"p1.ipynb": "fetched", "p1-final.ipynb": BOTH_RIGHT["p1.ipynb"]}},
}
LATE_STAMPS = {"ontime": "2026-01-15 11:59:59.000000 UTC", "hour": "2026-01-15 13:00:00.000000 UTC",
               "late45": "2026-01-15 16:30:00.000000 UTC", "berlin": "2026-01-15 12:30:00.000000 Europe/Berlin",
               "newyork": "2026-01-15 08:30:00.000000 America/New_York",
               "renamed": "2026-01-15 11:00:00.000000 UTC"}
# student -> (raw score, penalty, exported score), what nbgrader's own export must say
LATE_EXPECTED = {"ontime": (14, 0, 14), "hour": (14, 2, 12), "late45": (4, 4, 0), "berlin": (14, 0, 14),
                 "newyork": (11, 4, 7), "renamed": (0, 0, 0)}
HIDDEN_LINE = "assert sum_of_squares(11) == 506"


@early.early("late_course", order=2.4, light=True)
def _late_course(session: pytest.Session) -> Course:
    """Graded both ways by an early job (tests/early.py), beside the other tests."""
    base = early.tmp(session, "late")
    root = build(base, "c.AssignLatePenalties.plugin_class = 'late_plugin.HourlyThenZero'\n"
                       "c.CourseDirectory.feedback_directory = 'returned'\n",
                 {"ps1": {"p1": source_notebook("p1", manual=True), "p2": source_notebook("p2")}}, LATE_WORK,
                 LATE_STAMPS, plugin=LATE_PLUGIN)
    return grade_both(base, root, "ps1")


@pytest.fixture(scope="module")
def late_course(bubblewrap: None) -> Course:
    return early.result("late_course")


def test_export_gives_nbgraders_score_with_late_penalties(late_course: Course) -> None:
    c = late_course
    assert c.graded.returncode == 0, c.graded.stdout[-3000:] + c.graded.stderr[-3000:]
    plain, ours = exported(c)
    for student, (raw, penalty, score) in LATE_EXPECTED.items():
        row = plain[student]     # nbgrader's own export: else this test, not the autograder, is wrong
        assert (float(row["raw_score"]), float(row["late_submission_penalty"]), float(row["score"])) == \
            (raw, penalty, score), (student, row)
        mine = ours[student]
        assert (float(mine["raw_score"]), float(mine["penalty"]), float(mine["score"])) == (raw, penalty, score), \
            (student, mine)
        assert mine["outcome"] == "graded", (student, mine)
    assert float(ours["late45"]["max_score"]) == float(plain["late45"]["max_score"]) == 16

    # The HTML report shows the score nbgrader exports, and the raw score less the penalty beside it.
    report = autograder(c.ours, "report", "ps1", "--html", str(c.ours / "report.html"), env=c.env)
    assert report.returncode == 0, report.stdout + report.stderr
    page = (c.ours / "report.html").read_text()
    assert "12 / 16" in page and "14 less late penalty 2" in page, page[-3000:]
    assert "0 / 16" in page and "4 less late penalty 4" in page
    assert "not a notebook of ps1, not graded: p1-final.ipynb" in page


def test_answers_left_untouched_get_nbgraders_auto_score_and_manual_flag(late_course: Course) -> None:
    """The checksums nbgrader stored are put back on the restored cells: an untouched answer scores 0 and
    needs no manual grading (plain nbgrader's verdict), an answered one needs a grader."""
    from nbgrader.api import Gradebook

    def flags(root: Path) -> dict[tuple[str, str], tuple[float | None, bool]]:
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
            return {(s, g.name): (g.auto_score, bool(g.needs_manual_grade)) for s in LATE_WORK
                    for nb in gb.find_submission("ps1", s).notebooks for g in nb.grades}

    plain, ours = flags(late_course.plain), flags(late_course.ours)
    assert plain[("ontime", "p1-why")] == (0.0, False), plain      # untouched, as nbgrader sees it
    assert ours == plain


def test_a_renamed_notebook_is_reported_in_the_record(late_course: Course) -> None:
    record = records(late_course.ours, "ps1")["renamed"]
    assert record["outcome"] == "graded" and record["score"] == 0.0, record
    assert "not a notebook of ps1, not graded: p1-final.ipynb" in record["reason"], record
    assert "not submitted: p2.ipynb" in record["reason"]


# ---------------------------------------------------------------------------------------------
# Feedback
# ---------------------------------------------------------------------------------------------


def test_feedback_in_the_courses_folder_without_hidden_tests_released_and_fetched(late_course: Course) -> None:
    c = late_course
    # Plain nbgrader's feedback of the same course quotes the failed hidden assert in its traceback
    # (its default feedback steps keep hidden tests): what the autograder's must not show.
    nbgrader(c.plain, "generate_feedback", "ps1", env=c.env)
    assert HIDDEN_LINE in shown((c.plain / "returned" / "late45" / "ps1" / "p1.html").read_text())

    out = autograder(c.ours, "feedback", "ps1", env=c.env)
    assert out.returncode == 0, out.stdout + out.stderr
    pages = sorted((c.ours / "returned").glob("*/ps1/*.html"))
    assert {p.parent.parent.name for p in pages} == set(LATE_WORK) and not (c.ours / "feedback").exists()
    for page in pages:
        text = shown(page.read_text())
        assert HIDDEN_LINE not in text and "11) == 506" not in text, page
    failed = shown((c.ours / "returned" / "late45" / "ps1" / "p1.html").read_text())
    assert "AssertionError" in failed and "[hidden test line removed]" in failed
    assert "assert sum_of_squares(3) == 14" in failed          # the visible part of the test cell stays

    # nbgrader's exchange takes it: release_feedback (needs submission_secret.txt), and the student fetches it.
    assert (c.ours / "autograded" / "late45" / "ps1" / "submission_secret.txt").is_file()
    nbgrader(c.ours, "release_feedback", "ps1", env=c.env)
    home = c.exchange.parent / "students" / "late45"
    nbgrader(home, "fetch_feedback", "ps1", env=c.env)
    fetched = list((home / "ps1" / "feedback").glob("*/p1.html"))
    assert len(fetched) == 1 and HIDDEN_LINE not in shown(fetched[0].read_text())


def shown(page: str) -> str:
    """The text a reader of an HTML page sees (tags dropped: highlighted code is split into spans)."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", page))


# ---------------------------------------------------------------------------------------------
# The course's configuration
# ---------------------------------------------------------------------------------------------

# why: right, but each call takes 5 s: past the course's 2 s per cell, 0 under nbgrader
SLEEPY = "import time\n\n\ndef sum_of_squares(n):\n    time.sleep(5)\n    return sum(i * i for i in range(1, n + 1))\n"
CONFIG_WORK = {
    # why: right and quick: 7 of 7
    "quick": {"ps1": {"p1.ipynb": "answers:" + json.dumps({"p1-answer": RIGHT})}},
    "sleepy": {"ps1": {"p1.ipynb": "answers:" + json.dumps({"p1-answer": SLEEPY})}},
    # why: never returns: each test cell interrupted after 2 s, 0
    "loop": {"ps1": {"p1.ipynb": "answers:" + json.dumps({"p1-answer": LOOP})}},
}
CONFIG_EXPECTED = {"quick": 7, "sleepy": 0, "loop": 0}

# Kernels: an R assignment (no R kernel installed) and one whose notebooks run in a course kernel
# that puts a course library on the kernel's path.
R_SOURCE = nbformat.writes(nbformat.v4.new_notebook(cells=[
    _cell("code", "sum_of_squares <- function(n) {\n  ### BEGIN SOLUTION\n  sum((1:n)^2)\n  ### END SOLUTION\n}",
          grade_id="r-answer", solution=True),
    _cell("code", "stopifnot(sum_of_squares(2) == 5)", grade_id="r-test", grade=True, locked=True, points=1),
], metadata={"kernelspec": {"name": "ir", "display_name": "R", "language": "R"}}))
# why: a right R answer; in a Python kernel it would be a SyntaxError
R_ANSWER = "sum_of_squares <- function(n) sum((1:n)^2)"
LIBS_SOURCE = source_notebook("lib", kernel="course-py", setup="from coursehelpers import square",
                              test="assert sum_of_squares(2) == square(1) + square(2)")
CONFIG_WORK["quick"].update({"rlab": {"r.ipynb": "answers:" + json.dumps({"r-answer": R_ANSWER})},
                             "libs": {"lib.ipynb": "answers:" + json.dumps({"lib-answer": RIGHT})}})


def course_kernel(base: Path) -> dict[str, str]:
    """A course kernel ``course-py`` on a JUPYTER_PATH of its own: this Python, with ``coursehelpers`` on its path."""
    lib = base / "courselib"
    lib.mkdir()
    (lib / "coursehelpers.py").write_text("def square(x):\n    return x * x\n")
    spec = base / "jupyter" / "kernels" / "course-py"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Course Python", "language": "python", "env": {"PYTHONPATH": str(lib)}}))
    return {"JUPYTER_PATH": str(base / "jupyter")}


@early.early("config_course", order=2.4, light=True)
def _config_course(session: pytest.Session) -> Course:
    """Graded both ways by an early job (tests/early.py), beside the other tests."""
    base = early.tmp(session, "config")
    env = course_kernel(base)
    root = build(base, "c.Execute.timeout = 2\n", {"ps1": {"p1": source_notebook("p1")}, "rlab": {"r": R_SOURCE},
                                                    "libs": {"lib": LIBS_SOURCE}}, CONFIG_WORK, env=env)
    return grade_both(base, root, ["ps1", "rlab", "libs"], env=env)


@pytest.fixture(scope="module")
def config_course(bubblewrap: None) -> Course:
    return early.result("config_course")


def test_the_courses_execute_timeout_applies(config_course: Course) -> None:
    """``c.Execute.timeout = 2`` in the course's nbgrader_config.py, no --cell-timeout: nbgrader's grades."""
    c = config_course
    assert c.graded.returncode == 0, c.graded.stdout[-3000:] + c.graded.stderr[-3000:]
    assert "the course's nbgrader_config.py: c.Execute.timeout = 2 s per cell" in c.graded.stdout
    plain, ours = exported(c)
    for student, score in CONFIG_EXPECTED.items():
        assert float(plain[student]["score"]) == score, (student, plain[student])
        assert float(ours[student]["score"]) == score, (student, ours[student])
    assert ours["sleepy"]["outcome"] == ours["loop"]["outcome"] == "timed out"
    assert "ran past the 2 s limit" in ours["sleepy"]["reason"], ours["sleepy"]


def test_a_setting_the_autograder_cannot_honour_is_refused_by_name(config_course: Course, tmp_path: Path) -> None:
    ours = tmp_path / "course"
    shutil.copytree(config_course.ours, ours, symlinks=True)
    shutil.rmtree(ours / "autograded")
    (ours / "gradebook.db").unlink()
    config = (ours / "nbgrader_config.py").read_text().replace(str(config_course.ours), str(ours))
    (ours / "nbgrader_config.py").write_text(config + "c.Execute.extra_arguments = ['--matplotlib=inline']\n"
                                             "c.Execute.interrupt_on_timeout = False\n")
    run = autograder(ours, "grade", "ps1", "--workers=1")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "c.Execute.extra_arguments = ['--matplotlib=inline']" in run.stderr, run.stderr
    assert "c.Execute.interrupt_on_timeout = False" in run.stderr
    assert not (ours / "autograded").exists() and not (ours / "gradebook.db").exists()
    # A command-line option overrides the course's own setting.
    (ours / "nbgrader_config.py").write_text(config)
    run = autograder(ours, "grade", "ps1", "quick", "--workers=1", "--cell-timeout=30", "--timeout=300")
    assert run.returncode == 0 and "c.Execute.timeout" not in run.stdout, run.stdout + run.stderr


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


def test_a_kernel_that_is_not_installed_is_an_outcome_that_says_so(config_course: Course) -> None:
    c = config_course
    assert "No such kernel named ir" in c.plain_log.stdout + c.plain_log.stderr
    assert not (c.plain / "autograded" / "quick" / "rlab").exists()
    record = records(c.ours, "rlab")["quick"]
    assert record["outcome"] == "infrastructure failure" and "no kernel named ir" in record["reason"], record
    assert record["score"] is None and not (c.ours / "autograded" / "quick" / "rlab" / "r.ipynb").exists()
    _, ours = exported(c, "rlab")
    assert ours["quick"]["score"] == "" and ours["quick"]["outcome"] == "infrastructure failure"


def test_the_notebooks_course_kernel_is_used_with_its_library(config_course: Course) -> None:
    c = config_course
    plain, ours = exported(c, "libs")
    assert float(plain["quick"]["score"]) == 7, plain["quick"]
    assert float(ours["quick"]["score"]) == 7 and ours["quick"]["outcome"] == "graded", ours["quick"]


def test_status_lists_the_courses_assignments(config_course: Course) -> None:
    out = autograder(config_course.ours, "status", env=config_course.env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [line.split(":")[0] for line in out.stdout.splitlines()] == ["libs", "ps1", "rlab"], out.stdout
