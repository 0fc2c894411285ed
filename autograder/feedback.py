"""Feedback for students: nbgrader's HTML, with nothing of the hidden tests in it.

nbgrader's ``generate_feedback`` renders the graded notebooks with the course's
feedback preprocessors (``course/nbgrader_config.py``: hidden test source
removed, tracebacks cut).  An instructor's course (its own ``nbgrader_config.py``)
keeps its own feedback steps and ``feedback_directory``, with two more: the
hidden-test regions cleared from the test cells (``ClearHiddenTestsInTestCells``,
unless the course clears them itself) and every traceback line that quotes a
hidden-test line replaced (:class:`RedactHiddenTracebacks`: in nbgrader mode the
tests ran in the student's kernel, and IPython quotes a failed ``assert``).
What is not removed: a visible test's source, the message of a failed check (an
``AssertionError``'s text, which the instructor wrote to be read), and anything
the student's own code printed (the student's to see).  The check run already reports a test cell's error in
one line, without frames, and no student code can reach a hidden test (the
checks run in a process of their own).  As a second line of defence, every
feedback file is finally scanned for the assignment's hidden-test lines (:func:`autograder.course.secret_lines`
with ``solutions=False``: each distinctive hidden-test line that is shown
nowhere public) that are not in the student's own submission, and each one
found is replaced; the command says when it did.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
from nbgrader import utils
from nbgrader.preprocessors import ClearHiddenTests, NbGraderPreprocessor
from traitlets import List

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


ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class RedactHiddenTracebacks(NbGraderPreprocessor):
    """Every line of an error's traceback that quotes a hidden-test line, replaced (ANSI colours dropped
    from an entry where one was): in nbgrader mode a failed hidden ``assert`` is quoted by IPython's
    traceback, which ``ClearHiddenTests`` (the source only) leaves in the output."""

    hidden = List([], help="the hidden-test lines (stripped)").tag(config=True)

    def preprocess_cell(self, cell, resources, cell_index):  # type: ignore[no-untyped-def]
        lines = [h for h in self.hidden if h]
        for output in cell.get("outputs", []) if lines else []:
            if output.get("output_type") == "error":
                output["traceback"] = [redact_traceback(entry, lines) for entry in output.get("traceback", [])]
        return cell, resources


def redact_traceback(entry: str, hidden: Sequence[str]) -> str:
    plain = ANSI.sub("", entry)
    kept = [REDACTED if any(h in line for h in hidden) else line for line in plain.split("\n")]
    return "\n".join(kept) if kept != plain.split("\n") else entry


def hidden_test_lines(course_root: Path, assignment: str, config: Any) -> set[str]:
    """The lines of the hidden-test regions of an assignment's test cells (its source notebooks) that its
    student version does not show anyway."""
    from nbgrader.coursedir import CourseDirectory

    from .assignment import source_folder

    begin = config.get("ClearHiddenTests", {}).get("begin_test_delimeter", "BEGIN HIDDEN TESTS")
    end = config.get("ClearHiddenTests", {}).get("end_test_delimeter", "END HIDDEN TESTS")
    coursedir = CourseDirectory(config=config)
    release = Path(coursedir.format_path(coursedir.release_directory, ".", assignment))
    public = "\n".join(p.read_text(errors="replace") for p in release.glob("*.ipynb")) if release.is_dir() else ""
    lines: set[str] = set()
    for path in sorted(source_folder(course_root, assignment, config).glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if not (utils.is_grade(cell) and not utils.is_solution(cell)):
                continue
            inside = False
            for line in cell.source.splitlines():
                if begin in line:
                    inside = True
                elif end in line:
                    inside = False
                elif inside and len(line.strip()) >= 6 and json.dumps(line.strip())[1:-1] not in public:
                    lines.add(line.strip())
    return lines


def _course_api(course_root: Path, db_url: str, assignment: str) -> tuple[Any, set[str], Path]:
    """nbgrader's API for the feedback of ``course_root``; the hidden lines to redact; the feedback folder
    (``CourseDirectory.feedback_directory``, with ``{student}`` in place of the student's id)."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.apps import NbGraderAPI
    from nbgrader.converters import GenerateFeedback
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.preprocessors import GetGrades

    from .assignment import course_config
    from .nbconfig import own_config

    if own_config(course_root) is None:         # the project's course: its own feedback configuration
        return (course._api(course_root, db_url=db_url), course.secret_lines(assignment, solutions=False),
                course_root / "feedback" / "{student}" / assignment)
    config = course_config(course_root, db_url)
    hidden = hidden_test_lines(course_root, assignment, config)
    # The course's feedback steps, with the hidden tests cleared from the test cells' source and from the
    # tracebacks that quote them (in nbgrader mode the tests ran in the student's kernel).
    steps = list(config.GenerateFeedback.preprocessors if "preprocessors" in config.get("GenerateFeedback", {})
                 else GenerateFeedback.preprocessors.default() or [GetGrades, CSSHTMLHeaderPreprocessor])
    if not any(isinstance(x, type) and issubclass(x, ClearHiddenTests) for x in steps):
        steps.insert(1 if steps and steps[0] is GetGrades else 0, ClearHiddenTestsInTestCells)
    steps.append(RedactHiddenTracebacks)
    config.GenerateFeedback.preprocessors = steps
    delimiters = {config.get("ClearHiddenTests", {}).get(k, d) for k, d in (
        ("begin_test_delimeter", "BEGIN HIDDEN TESTS"), ("end_test_delimeter", "END HIDDEN TESTS"))}
    config.RedactHiddenTracebacks.hidden = sorted(hidden | delimiters)   # the region's lines and its bounds
    coursedir = CourseDirectory(config=config)
    folder = Path(coursedir.format_path(coursedir.feedback_directory, "{student}", assignment))
    return NbGraderAPI(coursedir=coursedir, config=config), hidden, folder


def generate_feedback(assignment: str, course_root: Path, db_url: str,
                      students: Sequence[str] | None = None, failures: dict[str, str] | None = None) -> list[Path]:
    """Write the feedback of graded students (``<feedback_directory>/<student>/<assignment>/*.html``, the
    course's ``CourseDirectory.feedback_directory``, ``feedback`` by default); the paths.

    A student whose feedback cannot be generated does not stop the others: ``failures`` (if given)
    receives the reason per student, else the first failure is raised after all were tried.
    """
    api, hidden, feedback = _course_api(course_root, db_url, assignment)
    targets = list(students) if students else sorted(
        p.parent.name for p in (course_root / "autograded").glob(f"*/{assignment}") if p.is_dir())
    paths = []
    problems: dict[str, str] = {}
    for student in targets:
        submitted = course_root / "submitted" / student / assignment
        own = "\n".join(p.read_text(errors="replace") for p in sorted(submitted.glob("*.ipynb")))
        secrets = {line for line in hidden if line not in own}
        try:
            course._ok(api.generate_feedback(assignment, student, force=True), f"generate_feedback {student}")
        except RuntimeError as exc:
            problems[student] = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else "failed"
            continue
        for path in sorted(Path(str(feedback).replace("{student}", student)).glob("*.html")):
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
