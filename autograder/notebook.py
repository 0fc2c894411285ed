"""A submitted notebook, made gradable: restored against the instructor's, split into two runs, merged back.

Grading runs a submission twice, in two sandboxed processes, and never lets
student code decide a score:

* **the student run** executes the notebook as the student wrote it (their
  cells) in a Jupyter kernel, *without* the hidden test cells and without the
  self-checks (read-only, ungraded cells whose grade id ends in ``-check``: they
  grade nothing, the hidden tests check the same properties in the check run,
  and the student ran them before submitting): its outputs are what the student
  sees in the feedback, a self-check's output a note saying it was not re-run;
* **the check run** (:mod:`autograder.checks`) is a plain Python process in which
  no student code ever runs: it executes the instructor's setup cells, binds each
  solution name to a pointer at the student's solution cell, and executes the
  hidden test cells, whose checks run the student's cell in a fresh child process
  (:func:`dlperf.grading.isolated`).  The test cells' outputs, and therefore
  the scores, come from this run only.

Student code in the kernel can therefore replace ``dlperf.grading``, IPython's
error handling or the clock without changing a score, and the hidden tests are
never sent to the student's kernel.

This module is pure data handling (no processes): :func:`prepare` restores the
instructor's locked and test cells by grade id (as nbgrader's ``OverwriteCells``
does, but from the instructor's notebooks instead of the gradebook, so workers
need no database), records tampering, and extracts what the check run needs;
:func:`merge` puts the two runs' outputs into one notebook for nbgrader.
"""

from __future__ import annotations

import ast
import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import nbformat
from nbformat import NotebookNode


class InvalidSubmission(ValueError):
    """The file cannot be graded as this assignment (not a notebook, another assignment's notebook)."""


@dataclass(frozen=True)
class SolutionCell:
    """A solution cell: the student's code, and the names the hidden tests may ask for."""

    grade_id: str
    source: str
    names: tuple[str, ...]


@dataclass(frozen=True)
class TestCell:
    """A hidden test cell (instructor's source, with its hidden tests) and its points."""

    grade_id: str
    source: str
    points: float


@dataclass
class Prepared:
    """A submission ready for the two runs."""

    notebook: NotebookNode                  # restored, outputs cleared; test cells hold the hidden tests
    setup: list[str]                        # instructor code cells before the first solution cell
    solutions: list[SolutionCell]
    tests: list[TestCell]
    tampered: list[str] = field(default_factory=list)   # what the student changed that they must not
    keep_tests: bool = False                # nbgrader mode: the kernel runs the test cells too

    def student_run(self) -> NotebookNode:
        """The notebook the student's kernel executes: in trusted mode without the test cells (never
        sent to it) and without the self-checks (:func:`is_self_check`: work that grades nothing, done
        twice); in nbgrader mode with both, as nbgrader runs it."""
        nb = copy.deepcopy(self.notebook)
        if not self.keep_tests:
            for cell in nb.cells:
                if is_test(cell) or is_self_check(cell):
                    cell.source = ""
        return nb

    def check_job(self) -> dict[str, Any]:
        """What the check run needs (JSON-able)."""
        return {
            "setup": list(self.setup),
            "solutions": [{"grade_id": s.grade_id, "source": s.source, "names": list(s.names)}
                          for s in self.solutions],
            "tests": [{"grade_id": t.grade_id, "source": t.source} for t in self.tests],
        }


def _meta(cell: Any) -> Mapping[str, Any]:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def grade_id(cell: Any) -> str | None:
    return _meta(cell).get("grade_id")


def is_solution(cell: Any) -> bool:
    return bool(_meta(cell).get("solution"))


def is_test(cell: Any) -> bool:
    """A graded code cell that is not a solution: a (hidden) test cell."""
    meta = _meta(cell)
    return bool(meta.get("grade")) and not meta.get("solution") and cell.get("cell_type") == "code"


def is_self_check(cell: Any) -> bool:
    """A self-check: a read-only, ungraded instructor code cell whose grade id ends in ``-check`` (the
    course's convention, checked for every exercise by ``tests/test_exercises.py``).  It runs the student's
    code on visible cases for the student; in trusted mode the autograder does not re-run it."""
    meta = _meta(cell)
    return (cell.get("cell_type") == "code" and bool(meta.get("locked")) and not meta.get("grade")
            and not meta.get("solution") and str(meta.get("grade_id", "")).endswith("-check"))


SELF_CHECK_NOTE = ("(The self-check is not re-run when grading: the hidden tests below check the same "
                   "properties, on other inputs, in the check run.)\n")


def defined_names(source: str, imports: bool = True) -> set[str]:
    """Top-level names a cell defines (functions, classes, assignments, and imports unless ``imports=False``);
    empty if it does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and imports:
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
    return names


def setup_imports(source: NotebookNode, submodules: bool = False) -> list[str]:
    """The modules the setup cells (the code cells before the first solution cell) import, in order.

    ``submodules``: for ``from M import N`` both ``M`` and ``M.N`` (``N`` may be a submodule, as in ``from
    dlperf.grading.probes import compile_clean``), for the warm kernel (:mod:`autograder.warm_kernel`), which
    skips a name that is not a module.  Not for the check run: what it imports, the processes it forks
    for the student's code inherit (a probe imported there before the fork broke zero1's ranks)."""
    modules: list[str] = []
    for code in _setup(source):
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                modules += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                modules.append(node.module)
                if submodules:
                    modules += [f"{node.module}.{a.name}" for a in node.names if a.name != "*"]
    return list(dict.fromkeys(modules))


def read_submission(data: bytes | str) -> NotebookNode:
    """Parse a submitted file; :class:`InvalidSubmission` says what is wrong with it."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise InvalidSubmission(f"not a notebook: the file is not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidSubmission(f"not a notebook: invalid JSON at line {exc.lineno}, column {exc.colno} "
                                f"({exc.msg})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("cells"), list):
        raise InvalidSubmission("not a notebook: the JSON has no list of cells")
    try:
        nb = nbformat.reads(text, as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds
        raise InvalidSubmission(f"not a notebook: {type(exc).__name__}: {exc}") from None
    for cell in nb.cells:
        if not isinstance(cell.get("source", ""), str) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise InvalidSubmission("not a notebook: a cell has no valid type or source")
    return nb


def grade_ids(nb: NotebookNode) -> set[str]:
    return {g for g in (grade_id(c) for c in nb.cells) if g}


def prepare(submission: bytes | str, source: NotebookNode, release: NotebookNode, assignment: str,
            others: Mapping[str, set[str]] | None = None, keep_tests: bool = False) -> Prepared:
    """Restore ``submission`` against the instructor's ``source`` and the student version ``release``.

    * solution cells keep the student's source (instructor metadata);
    * every other nbgrader cell (locked, test, setup) gets the instructor's source
      back; one the student changed is reported in ``tampered``; one the student
      deleted is put back where it belongs and reported;
    * the student's own cells stay as they are, without nbgrader metadata;
    * outputs are cleared and the kernelspec is the instructor's.

    ``others`` maps other assignments to their grade ids, to say which assignment a
    wrongly submitted notebook belongs to.
    """
    nb = read_submission(submission)
    expected = {grade_id(c): c for c in source.cells if grade_id(c)}
    released = {grade_id(c): c for c in release.cells if grade_id(c)}
    found = grade_ids(nb)
    if expected and not found & set(expected):
        for other, ids in (others or {}).items():
            if other != assignment and found & ids:
                raise InvalidSubmission(f"this is the notebook of assignment {other!r}, not {assignment!r}")
        raise InvalidSubmission(f"not the {assignment!r} notebook: none of its graded or locked cells is there "
                                "(another notebook, or the cell metadata was removed)")

    tampered: list[str] = []
    cells: list[NotebookNode] = []
    seen: set[str] = set()
    for cell in nb.cells:
        gid = grade_id(cell)
        if gid in expected and gid not in seen:
            seen.add(gid)
            original = expected[gid]
            restored = _with_checksum(copy.deepcopy(original), released.get(gid))
            if is_solution(original):
                if cell.get("cell_type") != original.cell_type:
                    tampered.append(f"changed the type of solution cell {gid}")
                else:
                    restored.source = cell.source
            elif gid in released and cell.source != released[gid].source:
                tampered.append(f"edited {'test' if is_test(original) else 'locked'} cell {gid} (restored)")
            cells.append(restored)
        else:
            plain = copy.deepcopy(cell)
            if gid:
                plain.metadata.pop("nbgrader", None)   # unknown or duplicated grade id: an ordinary cell
                if gid not in expected:
                    tampered.append(f"a cell claims grade id {gid!r}, which this assignment does not have")
            cells.append(plain)

    missing = [gid for gid in expected if gid not in seen]
    if missing:
        tampered.append("deleted " + ", ".join(missing) + " (put back)")
        order = [grade_id(c) for c in source.cells if grade_id(c)]
        for gid in missing:
            # Insert after the nearest preceding instructor cell that is present.
            before = order[: order.index(gid)]
            position = 0
            for i, cell in enumerate(cells):
                if grade_id(cell) in before:
                    position = i + 1
            restored = _with_checksum(copy.deepcopy(expected[gid]), released.get(gid))
            if is_solution(restored) and gid in released:
                restored.source = released[gid].source   # the student's version of a deleted cell: the stub
            cells.insert(position, restored)

    for cell in cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    nb.cells = cells
    nb.metadata["kernelspec"] = copy.deepcopy(source.metadata.get("kernelspec", {}))
    return Prepared(nb, _setup(source), _solutions(nb, source), _tests(source), tampered, keep_tests)


def _with_checksum(cell: NotebookNode, released: NotebookNode | None) -> NotebookNode:
    """``cell`` with the checksum nbgrader stored for it when it made the student version (the release's):
    an answer the student left as it was is then scored as nbgrader scores it (0, no manual grading
    needed) and commented "No response."."""
    checksum = _meta(released).get("checksum") if released is not None else None
    if checksum and "nbgrader" in cell.metadata:
        cell.metadata.nbgrader["checksum"] = checksum
    return cell


def _setup(source: NotebookNode) -> list[str]:
    setup = []
    for cell in source.cells:
        if is_solution(cell):
            break
        if cell.cell_type == "code" and not is_test(cell) and cell.source.strip():
            setup.append(cell.source)
    return setup


def _solutions(nb: NotebookNode, source: NotebookNode) -> list[SolutionCell]:
    student = {grade_id(c): c.source for c in nb.cells if is_solution(c) and c.cell_type == "code"}
    result = []
    for cell in source.cells:
        if is_solution(cell) and cell.cell_type == "code":
            gid = grade_id(cell)
            code = student.get(gid, "")
            # Imports are not solution names: the check run keeps its own (the setup cells' torch, F, ...).
            names = defined_names(cell.source, imports=False) | defined_names(code, imports=False)
            result.append(SolutionCell(gid, code, tuple(sorted(names))))
    return result


def _tests(source: NotebookNode) -> list[TestCell]:
    return [TestCell(grade_id(c), c.source, float(_meta(c).get("points", 0))) for c in source.cells if is_test(c)]


def merge(prepared: Prepared, student_run: NotebookNode | None, checks: Mapping[str, Sequence[Any]]) -> NotebookNode:
    """The graded notebook: the student run's outputs, and the check run's outputs in the test cells.

    ``checks`` maps each test cell's grade id to its outputs (nbformat output
    dicts).  A test cell with no result from the check run gets an error output
    saying so (no points).
    """
    nb = copy.deepcopy(prepared.notebook)
    ran = student_run.cells if student_run is not None else [None] * len(nb.cells)
    for cell, executed in zip(nb.cells, ran):
        if cell.cell_type != "code":
            continue
        if is_test(cell):
            outputs = checks.get(grade_id(cell))
            if outputs is None:
                outputs = [error_output("NotGraded", "the hidden tests of this cell did not run")]
            cell.outputs = [nbformat.from_dict(o) for o in outputs]
        elif not prepared.keep_tests and is_self_check(cell):
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=SELF_CHECK_NOTE)]
        elif executed is not None and executed.cell_type == "code":
            cell.outputs = executed.outputs
            cell.execution_count = executed.execution_count
    return nb


def error_output(ename: str, evalue: str) -> dict[str, Any]:
    """An nbformat error output with a one-line traceback (no frames: nothing of a hidden test shows)."""
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]}
