"""``autograder``: collect, grade, feedback, export, status, report -- the instructor's command.

Run ``autograder --help`` (or ``python -m autograder --help``).  Every command
works on nbgrader's course root (``course/`` by default, ``--course`` to change)
and its gradebook (``--db-url``, default the course's ``gradebook.db``), so
nbgrader's own tools (formgrader, ``nbgrader export``) see the same grades.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path
from typing import Any

from . import course
from .options import add_grading_options, apply_course_config, resolve
from .options import cluster_choice as _choice
from .options import db_url as _db_url
from .options import settings as _settings


def cmd_collect(args: argparse.Namespace) -> int:
    from .collect import collect_exchange, collect_files

    root = Path(args.course).resolve()
    if args.source:
        report = collect_files(root, args.assignment, Path(args.source), pattern=args.pattern)
    else:
        report = collect_exchange(root, args.assignment, exchange=Path(args.exchange) if args.exchange else None)
    print(report.summary())
    return 0


def _grade_targets(args: argparse.Namespace, root: Path) -> tuple[list[str], list[str]]:
    """The assignments and the students ``autograder grade`` names: ``A [B ...] [STUDENT ...]`` (the
    leading names that are assignments of the course, the first one always), or ``--all [STUDENT ...]``
    (every assignment of the course with a collected submission)."""
    from .assignment import assignment_ids
    from .engine import find_submissions

    names = list(args.names)
    known = set(assignment_ids(root))
    if args.all:
        return [a for a in sorted(known) if find_submissions(root, a)], names
    if not names:
        raise ValueError("name the assignment(s) to grade, or --all")
    assignments = [names.pop(0)]
    while names and names[0] in known:
        assignments.append(names.pop(0))
    return assignments, names


def cmd_grade(args: argparse.Namespace) -> int:
    from . import report
    from .engine import grade_term
    from .sandbox import SandboxUnavailable, check_available

    if not args.no_sandbox:
        try:
            check_available()
        except SandboxUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    from .assignment import AssignmentError

    root = Path(args.course).resolve()
    refused = apply_course_config(args)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    assignments, students = _grade_targets(args, root)
    if not assignments:
        print("nothing to grade: no assignment of the course has a collected submission")
        return 0
    try:
        run = grade_term(assignments, course_root=root, db_url=_db_url(args), students=students, force=args.force,
                         settings=_settings(args), choice=_choice(args), retries=args.retries, mode=args.mode)
    except AssignmentError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not any(r.records for r in run.runs.values()):
        return 0
    from .gradebook import Writer

    wall = run.wall_seconds if run.workers else None
    with Writer(_db_url(args), root) as writer:
        recorded = {a: writer.records(a) for a in assignments}
    if len(assignments) == 1:
        (assignment, records), = recorded.items()
        print()
        print(report.summary_text(records, wall_seconds=wall, workers=run.workers or None))
        html = Path(args.report) if args.report else root / "reports" / f"{assignment}.html"
        html.parent.mkdir(parents=True, exist_ok=True)
        report.write_html(records, html, title=f"Grading report: {assignment}", wall_seconds=wall,
                          workers=run.workers or None)
        print(f"\nreport: {html}")
        return 0
    # Several assignments: one report each (its records), then the term's (all of them, the run's wall time).
    reports = root / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    print()
    for assignment, records in recorded.items():
        if records:
            report.write_html(records, reports / f"{assignment}.html", title=f"Grading report: {assignment}")
            print(f"report: {reports / f'{assignment}.html'}")
    everything = [r for records in recorded.values() for r in records]
    graded = sum(len(r.records) for r in run.runs.values())
    print(f"\nterm: {len(assignments)} assignments, {graded} submission(s) graded in this run"
          + (f", {run.check_runs} check run(s) started for them" if run.workers else ""))
    print(report.summary_text(everything, wall_seconds=wall, workers=run.workers or None))
    html = Path(args.report) if args.report else reports / "term.html"
    html.parent.mkdir(parents=True, exist_ok=True)
    report.write_html(everything, html, title=f"Grading report: {', '.join(assignments)}", wall_seconds=wall,
                      workers=run.workers or None)
    print(f"\nterm report: {html}")
    return 0


def cmd_feedback(args: argparse.Namespace) -> int:
    from .feedback import generate_feedback

    failures: dict[str, str] = {}
    paths = generate_feedback(args.assignment, Path(args.course).resolve(), _db_url(args), args.students,
                              failures=failures)
    for path in paths:
        print(path)
    for student, reason in failures.items():
        print(f"no feedback for {student}: {reason}", file=sys.stderr)
    return 1 if failures else 0


def cmd_export(args: argparse.Namespace) -> int:
    rows = export_rows(Path(args.course).resolve(), _db_url(args))
    out = open(args.to, "w", newline="") if args.to != "-" else sys.stdout  # noqa: SIM115
    try:
        writer = csv.DictWriter(out, fieldnames=EXPORT_COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    finally:
        if out is not sys.stdout:
            out.close()
            print(f"{len(rows)} rows written to {args.to}")
    return 0


EXPORT_COLUMNS = ["assignment", "student_id", "timestamp", "score", "max_score", "raw_score", "penalty", "outcome",
                  "reason", "mode", "device", "cpu_only", "graded_at"]


def export_rows(course_root: Path, db_url: str) -> list[dict[str, Any]]:
    """One row per (assignment, student): nbgrader's score (manual grades included) and our record.

    ``score`` is the score ``nbgrader export`` writes: the raw score (``raw_score``: automatic and manual
    grades) less the late penalty (``penalty``: what the course's ``LateSubmissionPlugin`` or
    ``AssignLatePenalties.plugin_class`` gave each notebook, clamped to [0, the notebook's score] when
    it was assigned), never below 0."""
    from nbgrader.api import Gradebook, MissingEntry

    from .gradebook import Writer

    with Writer(db_url, course_root) as writer:
        records = {(r["assignment"], r["student"]): r for r in writer.records()}
    rows = []
    with Gradebook(db_url) as gb:
        for assignment in gb.assignments:
            for student in gb.students:
                record = records.get((assignment.name, student.id))
                try:
                    sub = gb.find_submission(assignment.name, student.id)
                    raw, timestamp = sub.score, sub.timestamp
                    penalty = float(sub.late_submission_penalty or 0.0)
                except MissingEntry:
                    raw, timestamp, penalty = None, None, None
                if record is None and raw is None:
                    continue
                score = None if raw is None else max(0.0, raw - (penalty or 0.0))   # as nbgrader export
                rows.append({"assignment": assignment.name, "student_id": student.id,
                             "timestamp": timestamp.isoformat() if timestamp else "",
                             "score": "" if score is None else f"{score:g}", "max_score": f"{assignment.max_score:g}",
                             "raw_score": "" if raw is None else f"{raw:g}",
                             "penalty": "" if penalty is None else f"{penalty:g}",
                             "outcome": record["outcome"] if record else "graded by nbgrader",
                             "reason": record["reason"] if record else "",
                             "mode": (record.get("mode") or "") if record else "", "device": record["device"] if record else "",
                             "cpu_only": record["cpu_only"] if record else "",
                             "graded_at": record["graded_at"] if record else ""})
    return rows


def _course_assignments(root: Path) -> list[str]:
    """The assignments of the course at ``root``: an instructor's course's (its source folder), else the project's."""
    from .assignment import assignment_ids
    from .nbconfig import own_config

    return assignment_ids(root) if own_config(root) is not None else course.assignments()


def cmd_status(args: argparse.Namespace) -> int:
    from .engine import files_digest, find_submissions
    from .gradebook import Writer

    root = Path(args.course).resolve()
    names = [args.assignment] if args.assignment else _course_assignments(root)
    with Writer(_db_url(args), root) as writer:
        for name in names:
            subs = find_submissions(root, name)
            records = {r["student"]: r for r in writer.records(name)}
            counts: dict[str, int] = {}
            left = []
            for sub in subs:
                record = records.get(sub.student)
                if record is None or record["digest"] != files_digest(sub.files()) \
                        or record["outcome"] == "infrastructure failure":
                    left.append(sub.student)
                else:
                    counts[record["outcome"]] = counts.get(record["outcome"], 0) + 1
            detail = ", ".join(f"{n} {o}" for o, n in sorted(counts.items()))
            print(f"{name}: {len(subs)} collected, {len(subs) - len(left)} recorded"
                  f"{' (' + detail + ')' if detail else ''}, {len(left)} left to grade"
                  f"{': ' + ', '.join(left[:20]) + (' ...' if len(left) > 20 else '') if left else ''}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from . import report
    from .gradebook import Writer

    root = Path(args.course).resolve()
    with Writer(_db_url(args), root) as writer:
        records = writer.records(args.assignment)
    print(report.summary_text(records))
    html = Path(args.html) if args.html else root / "reports" / f"{args.assignment or 'all'}.html"
    html.parent.mkdir(parents=True, exist_ok=True)
    report.write_html(records, html, title=f"Grading report: {args.assignment or 'all assignments'}")
    print(f"\nreport: {html}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from .doctor import run_doctor

    return run_doctor(args)


def cmd_sample(args: argparse.Namespace) -> int:
    from .sample import grade_sample

    return grade_sample(args, main)     # it grades, returns feedback and exports through this command


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="autograder", description="Collect, grade (in parallel, sandboxed), "
                                "return feedback, export grades: the instructor's command of the course.",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--course", default=str(course.COURSE), help="nbgrader course root (default: course/)")
    p.add_argument("--db-url", help="the gradebook (default: sqlite:///<course>/gradebook.db)")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("collect", help="collect submissions from nbgrader's exchange, or from an LMS folder/zip")
    c.add_argument("assignment")
    c.add_argument("--from", dest="source", metavar="PATH", help="a folder or .zip of notebooks (LMS export)")
    c.add_argument("--pattern", help="canvas, moodle, plain, or a regex with a (?P<student>...) group")
    c.add_argument("--exchange", metavar="DIR", help="nbgrader's exchange root (default: the course configuration's)")
    c.set_defaults(func=cmd_collect)

    g = sub.add_parser("grade", help="grade the collected submissions (what is left, or --force for all) of one "
                       "assignment or several in one run", usage="%(prog)s [options] (ASSIGNMENT [ASSIGNMENT ...] | "
                       "--all) [STUDENT ...]")
    g.add_argument("names", nargs="*", metavar="ASSIGNMENT/STUDENT",
                   help="the assignment(s), then only these students: the leading names that are assignments of "
                        "the course are graded in one run (one start-up, one pool of warm sandboxes), the rest "
                        "are students")
    g.add_argument("--all", action="store_true",
                   help="every assignment of the course with a collected submission, in one run")
    g.add_argument("--force", action="store_true", help="grade again what is already recorded")
    g.add_argument("--mode", choices=["trusted", "nbgrader"],
                   help="how the hidden tests run: 'trusted' (the project's trusted checks, for assignments written "
                        "for them) or 'nbgrader' (nbgrader's semantics: in the student's kernel); default: what "
                        "autograder.toml's [assignments.<id>] mode or the notebooks' metadata say, else nbgrader")
    g.add_argument("--report", metavar="FILE", help="HTML report (default: <course>/reports/<assignment>.html; "
                   "with several assignments, the term's report, default <course>/reports/term.html, beside one "
                   "report per assignment)")
    add_grading_options(g)
    g.set_defaults(func=cmd_grade)

    f = sub.add_parser("feedback", help="feedback HTML for students, without hidden tests")
    f.add_argument("assignment")
    f.add_argument("students", nargs="*")
    f.set_defaults(func=cmd_feedback)

    e = sub.add_parser("export", help="grades as CSV (nbgrader's exported score: manual grades included, late "
                       "penalties applied; raw_score and penalty; outcomes)")
    e.add_argument("--to", default="grades.csv", help="file, or - for stdout (default grades.csv)")
    e.set_defaults(func=cmd_export)

    s = sub.add_parser("status", help="collected, recorded and left to grade, per assignment")
    s.add_argument("assignment", nargs="?")
    s.set_defaults(func=cmd_status)

    r = sub.add_parser("report", help="summary and HTML report of the recorded grades")
    r.add_argument("assignment", nargs="?")
    r.add_argument("--html", metavar="FILE")
    r.set_defaults(func=cmd_report)

    d = sub.add_parser("doctor", help="can this node grade? sandbox, limits, Python stack, GPUs, workers, gradebook, "
                       "a timed grade of each reference solution; exit status 1 when it cannot")
    d.add_argument("--gpu", action="store_true", help="a GPU runner: a missing GPU (or CUDA in the sandbox) fails")
    d.add_argument("--exercises", metavar="IDS", help="grade only these references (comma-separated; '' for none)")
    d.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    limits = d.add_argument_group("the limits to check and grade the references with (default: autograder.toml's)")
    limits.add_argument("--cell-timeout", type=float, help="seconds per cell of the student's notebook (120)")
    limits.add_argument("--timeout", type=float, help="seconds per submission, its notebooks and hidden checks, from when its sandboxes are ready (600)")
    limits.add_argument("--memory", type=float, help="GiB of memory for each sandbox (6)")
    limits.add_argument("--processes", type=int, help="processes allowed in each sandbox (512)")
    limits.add_argument("--no-sandbox", action="store_true", help="check grading WITHOUT bubblewrap")
    d.set_defaults(func=cmd_doctor)

    m = sub.add_parser("sample", help="build the sample class (honest and adversarial submissions) and grade it")
    m.add_argument("--assignment", default="gradscaler", help="the exercise (default gradscaler: the misbehaving "
                   "submissions are its); several, comma-separated, or 'all': graded in one run")
    m.add_argument("--out", default=str(course.REPO / "_build" / "sample-class"), help="its course root")
    add_grading_options(m)
    # Short limits: the sample's infinite loop and memory hog need not take the default 120 s and 6 GiB.
    m.set_defaults(func=cmd_sample, cell_timeout=20.0, timeout=120.0, memory=2.0)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(resolve(args))
    except (RuntimeError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
