"""Collecting student submissions into nbgrader's ``submitted/``, from nbgrader's exchange or from an LMS export.

Where everything goes, and the names a collection reports with, are :mod:`autograder.submitted`'s
(``submitted/<student>/<assignment>/<notebook>.ipynb`` and ``timestamp.txt``, one folder per
student, every notebook of the assignment under its own name).  Two sources:

* :func:`collect_exchange` (here) -- nbgrader's own exchange (a shared machine, JupyterHub):
  runs ``nbgrader collect`` through ``NbGraderAPI`` with the course's configuration (its own
  ``nbgrader_config.py``, else the project's ``course/nbgrader_config.py`` re-rooted, see
  :func:`autograder.assignment.course_config`) and reports which students it collected with
  which timestamps, whose older submissions it passed over, whose submission it left alone, and
  whose lacks some or all of the assignment's notebooks.
* :func:`~autograder.lms.collect_files` (:mod:`autograder.lms`) -- an LMS export, a folder or a
  ``.zip`` of notebooks, where the student is named by the file name (:data:`PATTERNS`: Canvas,
  Moodle, a plain layout; or a regular expression of your own) and each file is stored under
  the name of the assignment's notebook it is.

This module also re-exports the public names of both (``from autograder.collect import
PATTERNS, Collected, CollectReport, Problem``; ``collect.submissions``, ``collect.read_timestamp``,
...), and is the command line: ``python -m autograder.collect --help``.
"""

from __future__ import annotations

import functools
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from autograder import course

from .assignment import course_config, notebook_names
from .lms import PATTERNS, collect_files, which_notebook
from .submitted import (
    KINDS,
    MAX_ID_LENGTH,
    MAX_NOTEBOOK_BYTES,
    TIMESTAMP_FORMAT,
    Collected,
    CollectReport,
    Problem,
    check_assignment,
    check_id,
    existing_timestamp,
    format_timestamp,
    json_problem,
    missing_problem,
    modified,
    notebooks_in,
    parse_timestamp,
    read_timestamp,
    show,
    sort_problems,
    submission_folder,
    submissions,
)

__all__ = [
    "KINDS", "MAX_ID_LENGTH", "MAX_NOTEBOOK_BYTES", "PATTERNS", "TIMESTAMP_FORMAT", "CollectReport", "Collected",
    "Problem", "check_id", "collect_exchange", "collect_files", "format_timestamp", "main", "parse_timestamp",
    "read_timestamp", "submissions", "which_notebook",
]


# ---------------------------------------------------------------------------------------------
# nbgrader's exchange
# ---------------------------------------------------------------------------------------------


def _exchange_api(course_root: Path, exchange: Path | None) -> Any:
    """``NbGraderAPI`` with the course's configuration, read as grading reads it (``assignment.course_config``)."""
    course.alembic_on_path()
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = course_config(Path(course_root))
    if exchange is not None:
        config.Exchange.root = str(exchange)
    config.ExchangeFactory.collect = _finished_only_collect()
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def finished(folder: Path) -> bool:
    """Whether an inbound submission folder was written to its end.

    ``nbgrader submit`` copies the student's files into ``inbound/<student>+<assignment>+<time>+<random>/``
    and only then writes ``timestamp.txt`` there: a folder without it is a submission that never finished
    (the student's server died during the copy, or it is still copying), whose notebooks may be cut short.
    """
    return (folder / "timestamp.txt").is_file()


@functools.cache
def _finished_only_collect() -> type:
    """nbgrader's ``ExchangeCollect`` that never collects an unfinished submission (:func:`finished`).

    nbgrader's own takes each student's newest inbound folder, finished or not: a server that dies
    during a resubmission would replace the student's good submission with a cut-off copy.  This one
    ranks the finished folders before the unfinished ones (newest first within each), so that the
    student's latest finished submission is the one taken, and copies nothing for a student whose every
    submission is unfinished.  Everything else (the deadline, ``--update``, the owner check) is nbgrader's.
    """
    from nbgrader.exchange.default.collect import ExchangeCollect

    class FinishedOnlyCollect(ExchangeCollect):
        def _done(self, record: dict) -> bool:
            return finished(Path(self.inbound_path) / record["filename"])

        def _sort_by_timestamp(self, records: list[dict]) -> list[dict]:
            return sorted(records, key=lambda item: (self._done(item), item["timestamp"]), reverse=True)

        def copy_files(self) -> None:
            self.src_records = [record for record in self.src_records if self._done(record)]
            super().copy_files()

    return FinishedOnlyCollect


def _inbound(api: Any, assignment: str) -> dict[str, list[tuple[datetime, str, bool]]]:
    """Student -> ``(time, folder name, finished)`` of each submission of ``assignment`` in the exchange's
    inbound, newest first.

    Read as nbgrader's ``ExchangeCollect`` reads it: ``<student>+<assignment>+<timestamp>[+<random>]``;
    ``finished`` is :func:`finished`'s.
    """
    from nbgrader.exchange.default.exchange import Exchange

    root = Path(Exchange(config=api.config).root)
    inbound = root / api.coursedir.course_id / "inbound"
    found: dict[str, list[tuple[datetime, str]]] = {}
    for path in inbound.glob(f"*+{assignment}+*") if inbound.is_dir() else []:
        parts = path.name.rsplit("+", 3)
        if len(parts) < 3:
            continue
        try:
            when = parse_timestamp(parts[2])
        except ValueError:
            continue  # nbgrader's collect fails on it, and says so
        found.setdefault(parts[0], []).append((when, path.name, finished(path)))
    return {student: sorted(items, reverse=True) for student, items in sorted(found.items())}


def collect_exchange(course_root: Path, assignment: str, *, exchange: Path | None = None) -> CollectReport:
    """Collect ``assignment`` from nbgrader's exchange into ``course_root/submitted/`` with ``nbgrader collect``.

    nbgrader does the copying (``NbGraderAPI.collect`` with ``update=True``: each student's
    latest finished submission, replacing a collected one only when it is newer); this reports what it did:
    ``collected`` the students whose submission is new or newer and holds at least one of the
    assignment's notebooks (:func:`autograder.assignment.notebook_names`), with the time of their
    ``timestamp.txt``; problems ``interrupted`` for each submission that never finished (:func:`finished`:
    never collected, the student's latest finished one is), ``superseded`` for each older submission,
    ``kept-existing`` for a student whose collected submission is not older than the exchange's,
    ``invalid-json`` for each collected notebook that is not JSON, ``incomplete`` for each of
    the assignment's notebooks a collected submission lacks (autograde scores it 0), and
    ``rejected`` for a submission that holds none of them (nothing for autograde to grade).

    ``exchange`` is the exchange's root folder (``Exchange.root``); by default the course
    configuration's (nbgrader's default ``/srv/nbgrader/exchange``).  Raises ``RuntimeError``
    with nbgrader's log when ``nbgrader collect`` fails (no exchange, no permission).
    """
    check_assignment(assignment)
    course_root = Path(course_root)
    names = notebook_names(course_root, assignment)
    api = _exchange_api(course_root, exchange)
    inbound = _inbound(api, assignment)
    before = {s: existing_timestamp(submission_folder(course_root, s, assignment)) for s in inbound}
    existed = {s for s in inbound if submission_folder(course_root, s, assignment).is_dir()}
    result = api.collect(assignment, update=True)
    if not result or not result.get("success"):
        log = (result or {}).get("log") or ""
        raise RuntimeError(f"nbgrader collect {assignment} failed:\n{(result or {}).get('error') or ''}\n{log}")

    report = CollectReport(assignment, [], [])
    for student, items in inbound.items():
        done = [(when, name) for when, name, complete in items if complete]
        for when, name, complete in items:
            if not complete:
                counts = (f"their latest finished submission ({show(done[0][0])}) counts" if done
                          else "they have no finished submission")
                report.problems.append(Problem(student, f"a submission that never finished ({show(when)}, {name}: "
                                                        f"no timestamp.txt, the copy was cut off or is still under "
                                                        f"way) was not collected; {counts}", "interrupted"))
        if not done:
            continue
        latest = done[0][0]
        for when, name in done[1:]:
            report.problems.append(Problem(student, f"an older submission ({show(when)}, {name}) was passed over "
                                                    f"for the latest ({show(latest)})", "superseded"))
        folder = submission_folder(course_root, student, assignment)
        now = existing_timestamp(folder)
        notebooks = notebooks_in(folder, names)
        if not notebooks:
            report.problems.append(Problem(student, _nothing_to_grade(folder, student, assignment, names), "rejected"))
            continue
        if student in existed and now == before[student]:
            if now == latest:
                reason = (f"already collected: submitted/{student}/{assignment}/ holds the latest submission "
                          f"({show(now)})")
            else:
                reason = (f"kept the submission already in submitted/{student}/{assignment}/ ({show(now)}): "
                          f"the exchange's latest ({show(latest)}) is not newer")
            report.problems.append(Problem(student, reason, "kept-existing"))
            continue
        for notebook in notebooks:
            invalid = json_problem(notebook.read_bytes())
            if invalid:
                report.problems.append(Problem(student, f"collected, but {notebook.name} is not valid JSON "
                                                        f"({invalid}): autograde will report it", "invalid-json"))
        report.problems.extend(missing_problem(student, n) for n in names if folder / f"{n}.ipynb" not in notebooks)
        when = now if now is not None else modified(notebooks)
        report.collected.append(Collected(student, assignment, notebooks[0], when, "exchange", tuple(notebooks)))
    report.problems = sort_problems(report.problems)
    return report


def _nothing_to_grade(folder: Path, student: str, assignment: str, names: list[str]) -> str:
    """Why a collected folder that holds none of the notebooks ``names`` is rejected: what it holds instead."""
    held = ", ".join(sorted(os.listdir(folder))) if folder.is_dir() else ""
    expected = ", ".join(f"{n}.ipynb" for n in names)
    if len(names) == 1:
        return (f"submitted/{student}/{assignment}/ holds no {expected}, only {held or 'nothing'}: autograde would "
                f"grade nothing (rename the student's notebook there to {expected})")
    return (f"submitted/{student}/{assignment}/ holds none of {expected}, only {held or 'nothing'}: autograde "
            f"would grade nothing (rename the student's notebooks there to these names)")


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m autograder.collect exchange|files|list ...``; exits 1 when something was rejected."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m autograder.collect", description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=course.COURSE, help="nbgrader course root (default: course/)")
    sub = parser.add_subparsers(dest="command", required=True)
    e = sub.add_parser("exchange", help="collect from nbgrader's exchange (nbgrader collect)")
    e.add_argument("assignment")
    e.add_argument("--exchange", type=Path, default=None, help="the exchange's root (Exchange.root)")
    f = sub.add_parser("files", help="collect an LMS export: a folder or a .zip of notebooks")
    f.add_argument("assignment")
    f.add_argument("source", type=Path)
    f.add_argument("--pattern", default=None, help=f"{', '.join(PATTERNS)} or a regex with (?P<student>...)")
    ls = sub.add_parser("list", help="what submitted/ holds for an assignment")
    ls.add_argument("assignment")
    args = parser.parse_args(argv)
    if args.command == "list":
        for c in submissions(args.root, args.assignment):
            print(f"{c.student:<24} {show(c.timestamp)}  {c.origin}")
        return 0
    if args.command == "exchange":
        report = collect_exchange(args.root, args.assignment, exchange=args.exchange)
    else:
        report = collect_files(args.root, args.assignment, args.source, pattern=args.pattern)
    print(report.summary())
    return 1 if any(p.kind == "rejected" for p in report.problems) else 0


if __name__ == "__main__":
    raise SystemExit(main())
