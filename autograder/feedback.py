"""Feedback for students: nbgrader's HTML, with nothing of the hidden tests in it.

nbgrader's ``generate_feedback`` renders the graded notebooks with the course's
feedback preprocessors (``course/nbgrader_config.py``: hidden test source
removed, tracebacks cut).  The check run already reports a test cell's error in
one line, without frames, and no student code can reach a hidden test (the
checks run in a process of their own).  As a second line of defence, every
feedback file is finally scanned for the assignment's hidden-test lines (:func:`autograder.course.secret_lines`
with ``solutions=False``: each distinctive hidden-test line that is shown
nowhere public) that are not in the student's own submission, and each one
found is replaced; the command says when it did.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests

from . import course

REDACTED = "[hidden test line removed]"


class ClearHiddenTestsInTestCells(ClearHiddenTests):
    """nbgrader's ``ClearHiddenTests`` for the instructor's test cells only.

    nbgrader's own preprocessor looks for hidden-test delimiters in *every* cell, so a student who
    writes the delimiter text anywhere in a cell of their own (a comment, a string) makes feedback
    generation fail for their notebook ("No end hidden tests statement found").  Hidden tests live
    in test cells, which grading restores from the instructor's notebook: only those are cleared.
    """

    def preprocess_cell(self, cell, resources, cell_index):  # type: ignore[no-untyped-def]
        if utils.is_grade(cell) and not utils.is_solution(cell):
            return super().preprocess_cell(cell, resources, cell_index)
        return cell, resources


def redact(text: str, secrets: set[str]) -> tuple[str, int]:
    """``text`` with every secret line (raw or HTML-escaped) replaced; and how many were replaced."""
    count = 0
    for line in sorted(secrets, key=len, reverse=True):
        for form in {line, html.escape(line, quote=False), html.escape(line)}:
            if form in text:
                count += text.count(form)
                text = text.replace(form, REDACTED)
    return text, count


def generate_feedback(assignment: str, course_root: Path, db_url: str,
                      students: Sequence[str] | None = None, failures: dict[str, str] | None = None) -> list[Path]:
    """Write ``feedback/<student>/<assignment>/<assignment>.html`` for graded students; the paths.

    A student whose feedback cannot be generated does not stop the others: ``failures`` (if given)
    receives the reason per student, else the first failure is raised after all were tried.
    """
    api = course._api(course_root, db_url=db_url)
    targets = list(students) if students else sorted(
        p.parent.name for p in (course_root / "autograded").glob(f"*/{assignment}") if p.is_dir())
    hidden = course.secret_lines(assignment, solutions=False)
    paths = []
    problems: dict[str, str] = {}
    for student in targets:
        submitted = course_root / "submitted" / student / assignment / f"{assignment}.ipynb"
        own = submitted.read_text(errors="replace") if submitted.is_file() else ""
        secrets = {line for line in hidden if line not in own}
        try:
            course._ok(api.generate_feedback(assignment, student, force=True), f"generate_feedback {student}")
        except RuntimeError as exc:
            problems[student] = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else "failed"
            continue
        for path in sorted((course_root / "feedback" / student / assignment).glob("*.html")):
            text, count = redact(path.read_text(), secrets)
            if count:
                path.write_text(text)
                print(f"  {student}: removed {count} hidden-test line(s) that the submission printed")
            paths.append(path)
    if failures is not None:
        failures.update(problems)
    elif problems:
        raise RuntimeError("feedback failed for " + "; ".join(f"{s}: {r}" for s, r in problems.items()))
    return paths
