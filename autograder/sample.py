"""The sample class: honest and adversarial submissions of one exercise, each with the outcome it must get.

``autograder sample`` (``make sample-class``) writes them as an LMS export
(a zip with Canvas file names), collects it, grades it, writes the report,
the feedback and the CSV export, and compares every record with what was
expected.  The test suite grades the same class (``tests/test_autograder.py``).

Honest submissions: the reference solution, the untouched stub and every
wrong-submission fixture of ``tests/submissions/<assignment>/`` (their scores
are known per cell).  Adversarial ones misbehave on purpose (the list below,
each saying why and what it must get); the honest scores must not change when
they are graded in the same run.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import shutil
import textwrap
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell

from . import course

T0 = dt.datetime(2026, 11, 20, 9, 0, tzinfo=dt.timezone.utc)


@dataclass
class Sample:
    """One file of the sample class's LMS export."""

    student: str
    why: str
    data: bytes
    outcomes: tuple[str, ...]            # acceptable outcomes (one, except where the machine decides)
    score: float | None                  # expected total (None: not scored)
    cells: dict[str, float] | None = None   # expected per-cell scores, when known
    filename: str = ""                   # the name in the export (Canvas style by default)
    when: dt.datetime = T0
    superseded: bool = False             # an older file of a student who submitted twice

    def __post_init__(self) -> None:
        if not self.filename:
            self.filename = f"{self.student}_{zlib.crc32(self.student.encode()) % 90000 + 10000}_4242_{ASSIGNMENT_FILE}"


ASSIGNMENT_FILE = "submission.ipynb"


def _nb_bytes(nb: Any) -> bytes:
    return nbformat.writes(nb).encode()


def _with_cell(nb: Any, code: str, position: int | None = None) -> Any:
    """``nb`` with a cell the student added (no nbgrader metadata)."""
    nb = copy.deepcopy(nb)
    cell = new_code_cell(textwrap.dedent(code).strip() + "\n")
    nb.cells.insert(len(nb.cells) if position is None else position, cell)
    return nb


def _edit_cell(nb: Any, grade_id: str, source: str | None) -> Any:
    """``nb`` with the cell ``grade_id`` replaced by ``source`` (None: deleted)."""
    nb = copy.deepcopy(nb)
    for i, cell in enumerate(nb.cells):
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            if source is None:
                del nb.cells[i]
            else:
                cell.source = source
            return nb
    raise KeyError(grade_id)


def honest(assignment: str) -> list[Sample]:
    """The reference solution, the stub and the wrong-submission fixtures, with their known scores."""
    graded = course.graded_cells(assignment)
    total = sum(graded.values())
    samples = [Sample("reference", "the instructor's solution", _nb_bytes(course.reference_submission(assignment)),
                      ("graded",), total, dict(graded)),
               Sample("stub", "the student version, untouched",
                      course.release_notebook(assignment).read_bytes(), ("graded",), 0.0,
                      {k: 0.0 for k in graded})]
    for path in course.snippets(assignment):
        snippet = course.Snippet.parse(path)
        nb = course.build_submission(assignment, snippet.cells)
        samples.append(Sample(snippet.name.replace("_", "-"), snippet.why, _nb_bytes(nb), ("graded",),
                              sum(snippet.expect.values()), dict(snippet.expect)))
    return samples


# Code of the adversarial cells.  Each is a cell the student added at the end of the notebook unless
# said otherwise; the solution cells are the instructor's, so the hidden tests alone decide the scores.
INFINITE_LOOP = "while True:\n    pass"
FORK_BOMB = """
import os
while True:
    os.fork()
"""
MEMORY_HOG = """
hog = []
while True:
    hog.append(b"x" * 2**28)   # 256 MiB more, every page written, until something stops it
"""
HUGE_OUTPUT = """
for _ in range(64):
    print("spam " * 200_000)   # 1 MB per line, 64 MB in all
"""
SEGFAULT = "import ctypes\nctypes.string_at(0)"
READ_HIDDEN = """
import glob, os
found = []
for pattern in ["{repo}/solutions/*/*.ipynb", "{repo}/course/gradebook.db", "{course}/gradebook.db",
                "{course}/submitted/*/*/*.ipynb", "/root/*", "/tmp/*", "{repo}/.git/config"]:
    for path in glob.glob(pattern):
        try:
            with open(path, "rb") as f:
                data = f.read(200)
            found.append(path)
        except OSError:
            pass
print("READABLE:", found if found else "nothing")
"""
WRITE_GRADEBOOK = """
import sqlite3
for path in ["{course}/gradebook.db", "{repo}/course/gradebook.db"]:
    try:
        db = sqlite3.connect(path)
        db.execute("UPDATE grade SET auto_score = 1000")
        db.commit()
        print("WROTE", path)
    except Exception as exc:
        print("could not write", path, type(exc).__name__)
"""
NETWORK = """
import socket
for host, port in [("127.0.0.1", 22), ("127.0.0.1", 8786), ("10.0.0.1", 80), ("pypi.org", 443)]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("CONNECTED", host, port)
    except OSError as exc:
        print("no connection to", host, port, type(exc).__name__)
"""
TAMPER_KERNEL = """
# Everything a student could replace in the kernel before the hidden test cells run:
import time, torch
import dlperf.grading as grading
grading.isolated = lambda *args, **kwargs: None          # every hidden check "passes"
torch.equal = lambda *args, **kwargs: True
torch.allclose = lambda *args, **kwargs: True
time.perf_counter = lambda: 0.0
get_ipython().set_custom_exc((BaseException,), lambda *args, **kwargs: None)   # swallow every error
"""
ALWAYS_EQUAL = '''
class Anything(float):
    """Compares equal to everything."""
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = float.__hash__
'''


def adversarial(assignment: str, course_root: Path, shared_pid_namespace: bool = False) -> list[Sample]:
    """Misbehaving submissions, each with the outcome and score it must get."""
    if assignment != "gradscaler":
        raise ValueError("the adversarial part of the sample class is written for gradscaler")
    ref = course.reference_submission(assignment)
    graded = course.graded_cells(assignment)
    total = sum(graded.values())
    full = dict(graded)
    fmt = {"repo": str(course.REPO), "course": str(course_root)}
    never = course.Snippet.parse(course.SUBMISSIONS / assignment / "never_skips.py")
    never_nb = course.build_submission(assignment, never.cells)
    unscale = course.solution_cells(assignment)["gradscaler-unscale"]
    unscale = course.strip_solution_markers(unscale)
    samples = [
        Sample("loop", "an infinite loop in a cell of its own: the cell limit stops it; the hidden tests, which "
               "run apart, still score the solution", _nb_bytes(_with_cell(ref, INFINITE_LOOP)),
               ("timed out",), total, full),
        Sample("forkbomb", "a fork bomb: the kernel's sandbox stops it and nothing is left running; which limit "
               "ends it depends on the race (the memory limit kills the kernel: crashed; the process limit makes "
               "fork fail in a kernel whose forked copies hold its sockets: the cell limit ends it, timed out; "
               "fork fails cleanly: graded); the checks, in their own sandbox, are not disturbed",
               _nb_bytes(_with_cell(ref, FORK_BOMB)), ("crashed", "timed out", "graded"), total, full),
        Sample("memhog", "allocates memory until stopped: the sandbox's memory limit kills the kernel (cgroup) or refuses the "
               "allocation (rlimit)", _nb_bytes(_with_cell(ref, MEMORY_HOG)), ("crashed", "graded"), total, full),
        Sample("bigoutput", "prints 64 MB: the kept output is capped", _nb_bytes(_with_cell(ref, HUGE_OUTPUT)),
               ("graded",), total, full),
        Sample("segfault", "the kernel segfaults: crashed, and the solution is still scored",
               _nb_bytes(_with_cell(ref, SEGFAULT)), ("crashed",), total, full),
        Sample("exit", "os._exit(0) at the top of a solution cell: the kernel dies and every check that loads "
               "the cell dies with it", _nb_bytes(_edit_cell(ref, "gradscaler-unscale", "import os\nos._exit(0)\n"
                                                           + unscale)),
               ("crashed",), 0.0, {k: 0.0 for k in graded}),
        Sample("tamper", "edited a locked self-check cell and a hidden test cell: both restored, reported",
               _nb_bytes(_edit_cell(_edit_cell(ref, "gradscaler-step-check", "print('all good')\n"),
                                    "gradscaler-e2e-test", "pass\n")), ("tampered",), total, full),
        Sample("deleted", "deleted a self-check and a test cell: put back, reported",
               _nb_bytes(_edit_cell(_edit_cell(ref, "gradscaler-errors-check", None), "gradscaler-state-test", None)),
               ("tampered",), total, full),
        Sample("snoop", "tries to read the hidden tests, the gradebook and submissions from disk",
               _nb_bytes(_with_cell(ref, READ_HIDDEN.format(**fmt))), ("graded",), total, full),
        Sample("writer", "tries to write the gradebook", _nb_bytes(_with_cell(ref, WRITE_GRADEBOOK.format(**fmt))),
               ("graded",), total, full),
        Sample("netcat", "opens network connections", _nb_bytes(_with_cell(ref, NETWORK)), ("graded",), total, full),
        Sample("patcher", "a wrong solution (never skips a step) plus a cell that replaces dlperf.grading's "
               "functions, torch.equal, torch.allclose and the clock in the kernel and swallows every error: the "
               "hidden checks never run there, so still the wrong solution's score", _nb_bytes(_with_cell(never_nb, TAMPER_KERNEL, position=_first_solution(never_nb))),
               ("graded",), sum(never.expect.values()), dict(never.expect)),
        Sample("anything", "unscale_grads_ returns an object that compares equal to anything: the unscale test "
               "checks the type, not only ==, so it loses those 2 points (the class's other tests do not use "
               "the returned value's equality)",
               _nb_bytes(_edit_cell(ref, "gradscaler-unscale", unscale.replace(
                   "    return found_inf", "    return Anything(found_inf)") + ALWAYS_EQUAL)),
               ("graded",), total - graded["gradscaler-unscale-test"],
               {**full, "gradscaler-unscale-test": 0.0}),
        Sample("corrupt", "a notebook cut in the middle (corrupt JSON)",
               _nb_bytes(ref)[: len(_nb_bytes(ref)) // 2], ("invalid",), None),
        Sample("wrongnb", "submitted the allreduce notebook for gradscaler",
               _nb_bytes(course.reference_submission("allreduce")), ("invalid",), None),
        Sample("twice", "submitted twice: the older, correct file is superseded by the newer one (the stub)",
               _nb_bytes(ref), ("graded",), None, superseded=True, when=T0,
               filename=f"twice_11111_1_{ASSIGNMENT_FILE}"),
        Sample("twice", "submitted twice: the newer file (the stub) is graded",
               course.release_notebook(assignment).read_bytes(), ("graded",), 0.0, {k: 0.0 for k in graded},
               when=T0 + dt.timedelta(hours=1), filename=f"twice_11111_2_{ASSIGNMENT_FILE}"),
    ]
    return samples + red_team(assignment, shared_pid_namespace)


def red_team(assignment: str, shared_pid_namespace: bool = False) -> list[Sample]:
    """The attacks of :mod:`autograder.redteam`, each on top of its base solution, expecting that solution's scores.

    ``shared_pid_namespace``: the hosts share the check run's PID namespace (GPU workers: CUDA cannot start in
    a namespace of their own there, book/threat-model.md); an attack that says what it does there
    (``Attack.shared_pid``: ``kill-all`` kills its own check run, crashed, 0) is expected to do that.
    """
    from .redteam import ATTACKS

    graded = course.graded_cells(assignment)
    stub = nbformat.read(course.release_notebook(assignment), as_version=4)
    bases: dict[str, tuple[Any, dict[str, float]]] = {
        "stub": (stub, {k: 0.0 for k in graded}),
        "reference": (course.reference_submission(assignment), dict(graded))}
    first = next(gid for gid, source in course.solution_cells(assignment).items())
    samples = []
    for attack in ATTACKS:
        if attack.base not in bases:
            snippet = course.Snippet.parse(course.SUBMISSIONS / assignment / f"{attack.base}.py")
            bases[attack.base] = (course.build_submission(assignment, snippet.cells), dict(snippet.expect))
        nb, expect = bases[attack.base]
        cell = next(c for c in nb.cells if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == first)
        attacked = _edit_cell(nb, first, textwrap.dedent(attack.code).strip() + "\n\n" + cell.source)
        if shared_pid_namespace and attack.shared_pid:
            why, outcome = attack.shared_pid
            samples.append(Sample(attack.name, f"red team: {attack.name} {why}", _nb_bytes(attacked), (outcome,),
                                  0.0, {k: 0.0 for k in expect}))
            continue
        samples.append(Sample(attack.name, f"red team: {attack.why}", _nb_bytes(attacked), ("graded",),
                              sum(expect.values()), dict(expect)))
    return samples


def _first_solution(nb: Any) -> int:
    for i, cell in enumerate(nb.cells):
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution"):
            return i
    return len(nb.cells)


def sample_class(assignment: str, course_root: Path, *, adversarial_part: bool = True,
                 shared_pid_namespace: bool = False) -> list[Sample]:
    samples = honest(assignment)
    if adversarial_part:
        samples += adversarial(assignment, course_root, shared_pid_namespace)
    return samples


def place(samples: Sequence[Sample], course_root: Path, assignment: str, timestamp: str | None = None) -> None:
    """Put the samples straight into nbgrader's ``submitted/<student>/<assignment>/`` (no collection step)."""
    for s in samples:
        folder = Path(course_root) / "submitted" / s.student / assignment
        folder.mkdir(parents=True)
        (folder / f"{assignment}.ipynb").write_bytes(s.data)
        if timestamp is not None:
            (folder / "timestamp.txt").write_text(timestamp)


def write_export(samples: Sequence[Sample], path: Path) -> Path:
    """The samples as an LMS export: a zip of Canvas-named files with their submission times."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for sample in samples:
            info = zipfile.ZipInfo(sample.filename, date_time=sample.when.timetuple()[:6])
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, sample.data)
    return path


def expected(samples: Sequence[Sample]) -> dict[str, Sample]:
    """The sample each student's record must match (the newest of a student who submitted twice)."""
    return {s.student: s for s in samples if not s.superseded}


def compare(samples: Sequence[Sample], records: Sequence[dict[str, Any]]) -> list[str]:
    """Each difference between the records and what the samples expect, as a sentence."""
    problems = []
    got = {r["student"]: r for r in records}
    for student, sample in expected(samples).items():
        record = got.get(student)
        if record is None:
            problems.append(f"{student}: no record")
            continue
        if record["outcome"] not in sample.outcomes:
            problems.append(f"{student}: outcome {record['outcome']!r} ({record['reason']}), expected "
                            f"{' or '.join(sample.outcomes)}")
        if sample.score is not None and record["score"] != sample.score:
            problems.append(f"{student}: score {record['score']}, expected {sample.score:g} "
                            f"(cells {json.dumps(record['cells'])})")
        if sample.cells is not None:
            cells = {k: v["score"] for k, v in record["cells"].items()}
            if cells != sample.cells:
                problems.append(f"{student}: cell scores {cells}, expected {sample.cells}")
        if sample.outcomes == ("invalid",) and record["score"] is not None:
            problems.append(f"{student}: an invalid submission was scored")
    return problems


def explain(root: Path, assignment: str, problems: Sequence[str], records: Sequence[dict[str, Any]]) -> list[str]:
    """For each student named in ``problems`` (:func:`compare`): the record's outcome and timings, and what
    each of its cells that lost points printed in the autograded notebook under ``root`` (a verdict that
    changes with the machine's load shows here as a timeout or a crash, not only as a score)."""
    lines = []
    for record in records:
        if not any(p.startswith(record["student"] + ":") for p in problems):
            continue
        lines.append(f"--- {record['student']}: {record['outcome']} ({record['reason']}), seconds "
                     f"{json.dumps(record['seconds'])}")
        path = root / "autograded" / record["student"] / assignment / f"{assignment}.ipynb"
        if not path.is_file():
            continue
        for cell in nbformat.read(path, as_version=4).cells:
            grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
            score = record["cells"].get(grade_id)
            if score is not None and score["score"] != score["max_score"]:
                text = "".join(o.get("text", "") + "\n".join(o.get("traceback", [])) for o in cell.get("outputs", []))
                lines.append(f"{grade_id}: {text[-1500:]}")
    return lines


def grade_sample(args: argparse.Namespace, autograder: Callable[[list[str]], int]) -> int:
    """``autograder sample``: build, collect, grade, report, compare.

    ``autograder``: the instructor's command (:func:`autograder.cli.main`), through which the sample class
    is graded, its feedback returned and its grades exported, as an instructor would.

    ``--assignment`` names one assignment, several (comma-separated) or ``all`` (every exercise of the
    course): several are collected one by one and graded in one run (``autograder grade A B C``).
    """
    from .collect import collect_files

    root = Path(args.out).resolve()
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    names = course.assignments() if args.assignment == "all" else \
        [a.strip() for a in args.assignment.split(",") if a.strip()]
    classes: dict[str, list[Sample]] = {}
    from .trusted.zygote import gpu_visible

    # GPU workers' hosts share the check run's PID namespace (CUDA starts in no other here)
    shared = not (args.cpu or args.cpu_workers) and gpu_visible()
    for assignment in names:
        # The misbehaving submissions are written for gradscaler; another assignment's sample class is its
        # honest fixtures (reference, stub, wrong submissions), each with its stated scores.
        adversarial_part = assignment == "gradscaler"
        samples = classes[assignment] = sample_class(assignment, root, adversarial_part=adversarial_part,
                                                     shared_pid_namespace=shared)
        if not adversarial_part:
            print(f"sample class of {assignment}: its fixtures only (the misbehaving submissions are gradscaler's)")
        export = write_export(samples, root / (f"lms-export-{assignment}.zip" if len(names) > 1 else "lms-export.zip"))
        print(f"sample class of {assignment}: {len(samples)} files from {len(expected(samples))} students "
              f"in {export}")
        print(collect_files(root, assignment, export).summary())
    base = ["--course", str(root)]
    grading = [f"--cell-timeout={args.cell_timeout:g}", f"--timeout={args.timeout:g}", f"--memory={args.memory:g}",
               f"--processes={args.processes}"]
    grading += ["--cpu"] * args.cpu + ["--no-sandbox"] * args.no_sandbox + ["--cpu-workers"] * args.cpu_workers
    grading += [f"--workers={args.workers}"] if args.workers else []
    status = autograder(base + ["grade", *names, *grading])
    if status:
        return status
    for assignment in names:
        autograder(base + ["feedback", assignment])
    autograder(base + ["export", "--to", str(root / "grades.csv")])
    from .gradebook import Writer

    problems = []
    with Writer(f"sqlite:///{root / 'gradebook.db'}", root) as writer:
        for assignment, samples in classes.items():
            records = writer.records(assignment)
            found = compare(samples, records)
            problems += [f"{assignment}: {p}" if len(names) > 1 else p for p in found]
            problems += explain(root, assignment, found, records)
    if problems:
        print("\nNOT as expected:\n  " + "\n  ".join(problems))
        return 1
    students = sum(len(expected(samples)) for samples in classes.values())
    print(f"\nevery record is as expected ({students} students"
          + (f" in {len(names)} assignments)" if len(names) > 1 else ")"))
    return 0
