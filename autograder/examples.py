"""A small assignment written both ways, for the instructors' page and its test.

``squares(n)`` returns ``[1, 4, ..., n*n]``.  :func:`source_notebook` builds its
instructor notebook (solution, a visible test, hidden tests, points) for either
grading mode, :func:`make_course` releases it with nbgrader and submits three
notebooks (right, subtly wrong, and a cheat), and :func:`grade` grades them with
the class autograder.  The book's page *Writing an exercise of your own*
(``book/writing-exercises.md``) shows the cells and grades them as it is built;
``tests/test_examples.py`` asserts the scores.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

__all__ = ["CELLS", "CHEAT", "SOLUTION", "SUBMISSIONS", "grade", "make_course", "source_notebook"]

INTRO = """# Squares

Write `squares(n)`: the list of the squares of 1, 2, ..., n (an empty list for n = 0)."""

SOLUTION = '''def squares(n):
    """The squares of 1..n, as a list."""
    ### BEGIN SOLUTION
    return [i * i for i in range(1, n + 1)]
    ### END SOLUTION'''

VISIBLE = '''assert squares(3) == [1, 4, 9], "squares(3) should be [1, 4, 9]"
print("the visible test passes")'''

# nbgrader mode: the test cell runs in the student's kernel, after the student's cells, and uses
# the student's function directly.
HIDDEN_NBGRADER = '''# Hidden tests (2 points): squares for several n, including 0
### BEGIN HIDDEN TESTS
for n in [0, 1, 5, 30]:
    assert squares(n) == [i * i for i in range(1, n + 1)], f"squares({n}) is wrong"
### END HIDDEN TESTS'''

# trusted mode: the test cell never runs student code; it drives it in a process of its own,
# with inputs drawn for each submission, and compares with what it computes itself.
HIDDEN_TRUSTED = '''# Hidden tests (2 points): squares for several n, including 0
### BEGIN HIDDEN TESTS
import random

from autograder import trusted

rng = random.Random(trusted.seed("squares"))    # new inputs for every submission
with trusted.Student(squares) as student:        # the student's cell, in a process of its own
    for n in [0, 1, 5, rng.randrange(10, 100)]:
        got = student.call("squares", n)          # plain data back: a list, or the student's exception
        expected = [i * i for i in range(1, n + 1)]
        if type(got) is not list or got != expected:
            raise trusted.CheckFailed(f"squares({n}) returned {got!r:.60}, expected {expected!r:.60}")
### END HIDDEN TESTS'''

# A submission that games nbgrader mode: its result compares equal to anything, so every
# ``squares(n) == expected`` in the student's own kernel is True.
CHEAT = '''class Anything(list):
    def __eq__(self, other):
        return True

def squares(n):
    return Anything()'''

CELLS = {"intro": INTRO, "solution": SOLUTION, "visible": VISIBLE, "nbgrader": HIDDEN_NBGRADER,
         "trusted": HIDDEN_TRUSTED, "cheat": CHEAT}


def _meta(grade_id: str, **flags: object) -> dict[str, object]:
    return {"nbgrader": {"grade_id": grade_id, "schema_version": 3, "grade": False, "solution": False,
                         "locked": False, **flags}}


def source_notebook(mode: str) -> nbformat.NotebookNode:
    """The instructor notebook of ``squares`` for ``mode`` (``"nbgrader"`` or ``"trusted"``)."""
    if mode not in ("nbgrader", "trusted"):
        raise ValueError(mode)
    nb = new_notebook()
    nb.metadata.kernelspec = {"display_name": "Python 3", "language": "python", "name": "python3"}
    if mode == "trusted":
        nb.metadata["dlperf"] = {"mode": "trusted"}
    nb.cells = [
        new_markdown_cell(INTRO, metadata=_meta("squares-intro", locked=True)),
        new_code_cell(SOLUTION, metadata=_meta("squares-code", solution=True)),
        # nbgrader mode may grade a visible test; in trusted mode a visible check is the student's
        # self-check (it runs the student's code in the student's kernel, so it counts nothing).
        new_code_cell(VISIBLE, metadata=_meta("squares-check", grade=True, locked=True, points=1)
                      if mode == "nbgrader" else {}),
        new_code_cell(HIDDEN_TRUSTED if mode == "trusted" else HIDDEN_NBGRADER,
                      metadata=_meta("squares-test", grade=True, locked=True, points=2)),
    ]
    return nb


SUBMISSIONS = {
    "right": "\n".join(line for line in SOLUTION.splitlines() if "### " not in line),
    "wrong": "def squares(n):\n    return [i * i for i in range(1, n + 1)] if n else None",   # n = 0 forgotten
    "cheat": CHEAT,
}


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    from . import course

    course.alembic_on_path()
    run = subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:3])} exited {run.returncode}:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
    return run


def make_course(root: Path, mode: str) -> Path:
    """An nbgrader course at ``root`` (a new folder): ``squares`` for ``mode``, released, and the
    notebooks of :data:`SUBMISSIONS` in ``submitted/<student>/squares/``."""
    root = Path(root)
    root.mkdir(parents=True)
    (root / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.root = {str(root)!r}\n"
        f"c.CourseDirectory.db_url = {'sqlite:///' + str(root / 'gradebook.db')!r}\n")
    (root / "source" / "squares").mkdir(parents=True)
    nbformat.write(source_notebook(mode), root / "source" / "squares" / "squares.ipynb")
    _run(["nbgrader", "generate_assignment", "squares"], root)
    release = nbformat.read(root / "release" / "squares" / "squares.ipynb", as_version=4)
    for student, code in SUBMISSIONS.items():
        nb = nbformat.from_dict(release)
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("solution"):
                cell.source = code
        (root / "submitted" / student / "squares").mkdir(parents=True)
        nbformat.write(nb, root / "submitted" / student / "squares" / "squares.ipynb")
    return root


def grade(root: Path, *options: str) -> dict[str, dict[str, float | None]]:
    """Grade the course of :func:`make_course` with ``autograder grade``; per student, the notebook's
    score, its maximum, the hidden test cell's score and the grading mode the gradebook records."""
    from nbgrader.api import Gradebook

    from . import course
    from .gradebook import Writer

    _run(["autograder", "--course", str(root), "grade", "squares", "--workers=1", *options], course.REPO)
    scores: dict[str, dict[str, float | None]] = {}
    with Gradebook(f"sqlite:///{Path(root) / 'gradebook.db'}") as gb:
        for student in SUBMISSIONS:
            nb = gb.find_submission_notebook("squares", "squares", student)
            scores[student] = {"score": nb.score, "max_score": nb.max_score,
                               "hidden": gb.find_grade("squares-test", "squares", "squares", student).score}
    with Writer(f"sqlite:///{Path(root) / 'gradebook.db'}", Path(root)) as writer:
        for record in writer.records("squares"):
            scores[record["student"]]["mode"] = record["mode"]
    return scores
