"""The single writer of the gradebook: nbgrader's tables for the grades, one table of our own for the runs.

Workers never open the database: they return graded notebooks (see
:mod:`autograder.runner`), and the coordinator calls :meth:`Writer.record` for
each, one after the other.  Each call is **one transaction**: the submission,
its grades and comments (scored by nbgrader's own ``determine_grade``, exactly
as ``nbgrader autograde`` scores them) and the run's record are committed
together or not at all, and the graded notebook is written (atomically, by
rename) to ``autograded/`` before the commit.  So a grader killed at any
moment leaves either the whole submission or nothing, and a second run grades
exactly the submissions that have no record yet.

nbgrader's ``Gradebook`` methods commit on their own; inside :meth:`Writer._transaction`
their commits are turned into flushes, so that everything lands in a single
commit at the end (SQLite and PostgreSQL alike).

The runs table ``autograder_runs`` keeps every attempt's record: outcome,
reason, scores per graded cell, host, device, worker, sandbox, durations,
attempts, whether it was graded on CPU where the exercise wants a GPU.  The
latest record of a (assignment, student) is the current one; a submission
(identified by the SHA-256 of its file) whose latest record is not an
infrastructure failure is done.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import sqlalchemy as sa

from .runner import Result

metadata = sa.MetaData()
RUNS = sa.Table(
    "autograder_runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("assignment", sa.String(128), nullable=False, index=True),
    sa.Column("student", sa.String(128), nullable=False, index=True),
    sa.Column("digest", sa.String(64), nullable=False),
    sa.Column("outcome", sa.String(32), nullable=False),
    sa.Column("reason", sa.Text, nullable=False, default=""),
    sa.Column("score", sa.Float, nullable=True),
    sa.Column("max_score", sa.Float, nullable=False, default=0.0),
    sa.Column("cells", sa.Text, nullable=False, default="{}"),
    sa.Column("host", sa.String(256), nullable=False, default=""),
    sa.Column("device", sa.String(256), nullable=False, default=""),
    sa.Column("worker", sa.String(256), nullable=False, default=""),
    sa.Column("sandbox", sa.String(512), nullable=False, default=""),
    sa.Column("seconds", sa.Text, nullable=False, default="{}"),
    sa.Column("attempts", sa.Integer, nullable=False, default=1),
    sa.Column("cpu_only", sa.Boolean, nullable=False, default=False),
    sa.Column("graded_at", sa.String(40), nullable=False),
    sa.Column("mode", sa.String(16), nullable=False, default=""),
)
# Columns added after the table's first version, with their SQL type: added to an older gradebook on open.
ADDED = {"mode": "VARCHAR(16) NOT NULL DEFAULT ''"}

FINAL = ("graded", "timed out", "crashed", "tampered", "invalid")


def _write_atomic(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    if isinstance(data, bytes):
        tmp.write_bytes(data)
    else:
        tmp.write_text(data)
    os.replace(tmp, path)


class Writer:
    """The coordinator's connection to the gradebook (nbgrader's ``db_url``)."""

    def __init__(self, db_url: str, course_root: Path):
        from nbgrader.api import Gradebook

        from .course import alembic_on_path

        alembic_on_path()
        self.course_root = Path(course_root)
        self._penalties: Any = None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self.gb = Gradebook(db_url)          # creates or migrates nbgrader's schema
        metadata.create_all(self.gb.engine, checkfirst=True)
        have = {c["name"] for c in sa.inspect(self.gb.engine).get_columns(RUNS.name)}
        for name, sql in ADDED.items():
            if name not in have:
                with self.gb.engine.begin() as conn:
                    conn.execute(sa.text(f"ALTER TABLE {RUNS.name} ADD COLUMN {name} {sql}"))

    def close(self) -> None:
        self.gb.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        session = self.gb.db
        session.commit = session.flush          # nbgrader's own commits become flushes ...
        try:
            yield
        except BaseException:
            del session.commit
            session.rollback()
            raise
        del session.commit
        session.commit()                        # ... and everything is committed once, here

    # -- reading -----------------------------------------------------------------------------

    def records(self, assignment: str | None = None) -> list[dict[str, Any]]:
        """The latest record of every (assignment, student), as dicts (see :mod:`autograder.report`)."""
        query = sa.select(RUNS).order_by(RUNS.c.id)
        if assignment is not None:
            query = query.where(RUNS.c.assignment == assignment)
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        with self.gb.engine.connect() as conn:
            for row in conn.execute(query).mappings():
                record = dict(row)
                record["cells"] = json.loads(record["cells"])
                record["seconds"] = json.loads(record["seconds"])
                latest[(record["assignment"], record["student"])] = record
        penalties = self.penalties(assignment)
        for key, record in latest.items():
            # nbgrader's late penalty of the submission (the sum of its notebooks', each clamped to
            # [0, notebook score] when it was assigned); "raw_score" is the record's own score.
            record["penalty"] = penalties.get(key, 0.0)
        return sorted(latest.values(), key=lambda r: (r["assignment"], r["student"]))

    def penalties(self, assignment: str | None = None) -> dict[tuple[str, str], float]:
        """``{(assignment, student): late penalty}`` as nbgrader's gradebook holds it (0 when none)."""
        from nbgrader.api import Assignment, Student, SubmittedAssignment

        query = self.gb.db.query(Assignment.name, Student.id, SubmittedAssignment.late_submission_penalty) \
            .join(SubmittedAssignment.assignment).join(SubmittedAssignment.student)
        if assignment is not None:
            query = query.filter(Assignment.name == assignment)
        return {(a, s): float(p or 0.0) for a, s, p in query.all()}

    def history(self, assignment: str, student: str) -> list[dict[str, Any]]:
        with self.gb.engine.connect() as conn:
            rows = conn.execute(sa.select(RUNS).where(RUNS.c.assignment == assignment,
                                                      RUNS.c.student == student).order_by(RUNS.c.id)).mappings()
            return [dict(r) for r in rows]

    def done(self, assignment: str) -> dict[str, str]:
        """``{student: digest}`` of the submissions whose latest record is final (not to be graded again)."""
        return {r["student"]: r["digest"] for r in self.records(assignment) if r["outcome"] in FINAL}

    def failures(self, assignment: str) -> int:
        """How many infrastructure failures the gradebook holds for ``assignment`` (all attempts)."""
        with self.gb.engine.connect() as conn:
            return conn.execute(sa.select(sa.func.count()).select_from(RUNS).where(
                RUNS.c.assignment == assignment, RUNS.c.outcome == "infrastructure failure")).scalar_one()

    # -- writing -----------------------------------------------------------------------------

    def record(self, result: Result, *, timestamp: dt.datetime | None = None, attempts: int = 1) -> dict[str, Any]:
        """Record one worker result: grades (when there are graded notebooks) and the run, in one transaction.

        Per graded cell, ``cells`` is keyed by grade id for a one-notebook assignment and by
        ``"<notebook>/<grade id>"`` otherwise; a notebook the student did not submit scores 0.
        """
        from nbgrader import utils

        began = time.monotonic()
        cells: dict[str, dict[str, float | None]] = {}
        score: float | None = None
        max_score = 0.0
        graded = {name: (nbformat.reads(text, as_version=4) if text else None)
                  for name, text in result.notebooks.items()}
        multi = len(graded) > 1
        scored = result.outcome != "invalid" and any(nb is not None for nb in graded.values())
        if scored:
            folder = self.course_root / "autograded" / result.student / result.assignment
            for name, nb in graded.items():
                if nb is None:
                    for gid, points in self._points(result.assignment, name).items():
                        cells[f"{name}/{gid}" if multi else gid] = {"score": 0.0, "max_score": points}
                    continue
                for cell in nb.cells:
                    if utils.is_grade(cell):
                        auto, points = utils.determine_grade(cell)
                        gid = cell.metadata.nbgrader.grade_id
                        cells[f"{name}/{gid}" if multi else gid] = {"score": auto, "max_score": points}
                _write_atomic(folder / f"{name}.ipynb", nbformat.writes(nb))
            for relative, data in result.files.items():
                if _safe(relative) and not relative.endswith(".ipynb"):
                    _write_atomic(folder / relative, data)
            score = sum(c["score"] or 0.0 for c in cells.values())
            max_score = sum(c["max_score"] for c in cells.values())
            if timestamp is not None:
                _write_atomic(folder / "timestamp.txt", timestamp.strftime("%Y-%m-%d %H:%M:%S.%f %Z"))
            # nbgrader's exchange secret goes with the graded notebooks (autograde copies it), so that
            # generate_feedback copies it on and release_feedback can name the feedback.
            secret = self.course_root / "submitted" / result.student / result.assignment / "submission_secret.txt"
            if secret.is_file() and not secret.is_symlink():
                _write_atomic(folder / "submission_secret.txt", secret.read_bytes())
        reason = result.reason
        unknown = self._unknown_notebooks(result)
        if unknown:
            note = (f"not a notebook of {result.assignment}, not graded: " + ", ".join(unknown))
            reason = f"{reason}; {note}" if reason else note
        row = {
            "assignment": result.assignment, "student": result.student, "digest": result.digest,
            "outcome": result.outcome, "reason": reason, "score": score, "max_score": max_score,
            "cells": json.dumps(cells), "host": result.host, "device": result.device, "worker": result.worker,
            "sandbox": result.sandbox, "seconds": json.dumps(result.seconds), "attempts": attempts,
            "cpu_only": result.cpu_only, "graded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "mode": result.mode,
        }
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*not in session.*")
            with self._transaction():
                self.gb.update_or_create_student(result.student)
                if scored:
                    self._save_grades(graded, result, timestamp)
                # "gradebook": this write (autograded files, nbgrader's grades), all but its commit
                seconds = {**result.seconds, "gradebook": time.monotonic() - began}
                row["seconds"] = json.dumps(seconds)
                self.gb.db.execute(RUNS.insert().values(**row))
        row["cells"], row["seconds"] = cells, seconds
        return row

    def _unknown_notebooks(self, result: Result) -> list[str]:
        """The notebooks in the student's submitted folder that are none of the assignment's (a renamed
        copy beside the real one: ``p1-final.ipynb``); plain nbgrader only logs them, the record says so."""
        from nbgrader.api import MissingEntry

        folder = self.course_root / "submitted" / result.student / result.assignment
        if not folder.is_dir():
            return []
        try:
            known = {nb.name for nb in self.gb.find_assignment(result.assignment).notebooks}
        except MissingEntry:
            known = set()
        known |= set(result.notebooks)
        if not known:
            return []
        return sorted(p.name for p in folder.glob("*.ipynb") if p.stem not in known)

    def _points(self, assignment: str, notebook: str) -> dict[str, float]:
        """The graded cells of a notebook of the assignment, with their points (from nbgrader's tables)."""
        from nbgrader.api import MissingEntry

        try:
            nb = self.gb.find_notebook(notebook, assignment)
        except MissingEntry:
            return {}
        return {c.name: float(c.max_score) for c in nb.grade_cells}

    def _save_grades(self, graded: dict[str, nbformat.NotebookNode | None], result: Result,
                     timestamp: dt.datetime | None) -> None:
        """What nbgrader's SaveAutoGrades does, inside our transaction; a notebook not submitted scores 0."""
        from nbgrader import utils

        kwargs = {"timestamp": timestamp.isoformat()} if timestamp is not None else {}
        self.gb.update_or_create_submission(result.assignment, result.student, **kwargs)
        for name, nb in graded.items():
            if nb is None:
                submitted = self.gb.find_submission_notebook(name, result.assignment, result.student)
                for grade in submitted.grades:
                    grade.auto_score = 0
                    grade.needs_manual_grade = False
                continue
            for cell in nb.cells:
                gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                if not gid:
                    continue
                if utils.is_grade(cell):
                    grade = self.gb.find_grade(gid, name, result.assignment, result.student)
                    grade.auto_score, _ = utils.determine_grade(cell)
                    grade.needs_manual_grade = grade.manual_score is not None or grade.auto_score is None
                if utils.is_solution(cell) or utils.is_task(cell):
                    comment = self.gb.find_comment(gid, name, result.assignment, result.student)
                    unchanged = cell.metadata.nbgrader.get("checksum") == utils.compute_checksum(cell)
                    comment.auto_comment = "No response." if unchanged and not utils.is_task(cell) else None
        self._late_penalties(result)

    def _late_penalties(self, result: Result) -> None:
        """What nbgrader's ``AssignLatePenalties`` does: each notebook's penalty from the course's plugin
        (``LateSubmissionPlugin.penalty_method``, ``AssignLatePenalties.plugin_class``), reset when not late."""
        self.gb.db.flush()
        submission = self.gb.find_submission(result.assignment, result.student)
        self.gb.db.expire_all()
        for notebook in submission.notebooks:
            notebook.late_submission_penalty = None
            if submission.total_seconds_late > 0:
                penalty = self._penalty_plugin().late_submission_penalty(result.student, notebook.score,
                                                                          submission.total_seconds_late)
                if penalty is not None:
                    notebook.late_submission_penalty = min(max(penalty, 0), notebook.score)

    def _penalty_plugin(self) -> Any:
        if self._penalties is None:
            import sys

            from nbgrader.preprocessors import AssignLatePenalties

            from .assignment import course_config

            if str(self.course_root) not in sys.path:   # a plugin of the course's own (nbgrader runs there)
                sys.path.insert(0, str(self.course_root))
            assigner = AssignLatePenalties(config=course_config(self.course_root))
            assigner.init_plugin()
            self._penalties = assigner.plugin_inst
        return self._penalties


def _safe(relative: str) -> bool:
    from pathlib import PurePosixPath

    path = PurePosixPath(relative)
    return bool(relative) and not path.is_absolute() and ".." not in path.parts and "\0" not in relative
