"""nbgrader's ``submitted/`` folder, as both sources of :mod:`autograder.collect` write it and the grader reads it.

What nbgrader's ``autograde`` reads, one folder per student and assignment::

    <course root>/submitted/<student>/<assignment>/<notebook>.ipynb   one per notebook of the assignment
    <course root>/submitted/<student>/<assignment>/timestamp.txt      e.g. "2026-11-21 12:00:00.000000 UTC"

The notebooks are named as in the assignment's source folder
(:func:`autograder.assignment.notebook_names`: ``p1.ipynb`` and ``p2.ipynb`` for ``ps1``;
the project's own exercises have one, named after the exercise).  ``autograde`` grades the
notebooks it finds under these names and scores a missing one 0.  The timestamp is in the
format ``nbgrader submit`` writes (``Exchange.timestamp_format``, ``%Y-%m-%d %H:%M:%S.%f %Z``,
in UTC) and ``nbgrader collect`` copies; ``autograde`` reads it to record the submission time
(and lateness) in the gradebook.

Here: what a collection reports (:class:`Collected`, :class:`Problem` and its :data:`KINDS`,
:class:`CollectReport`), valid student ids (:func:`check_id`), timestamps
(:func:`format_timestamp`, :func:`parse_timestamp`, :func:`read_timestamp`), the atomic
replacement of a submission (:func:`install`), and what ``submitted/`` holds now
(:func:`submissions`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .assignment import notebook_names

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format (what `nbgrader submit` writes)
MAX_NOTEBOOK_BYTES = 100_000_000  # nbgrader's CourseDirectory.max_file_size (100000 kB)
MAX_ID_LENGTH = 128

_ID_CHARS = re.compile(r"[A-Za-z0-9._-]")


# ---------------------------------------------------------------------------------------------
# What a collection reports
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collected:
    """One submission in ``submitted/``: collected now, or found there by :func:`submissions`.

    ``notebooks`` are the assignment's notebooks the submission holds, in the assignment's
    order (those it lacks are reported ``incomplete``); ``path`` is the first of them, the
    whole submission for a one-notebook assignment.  Left out, ``notebooks`` is ``(path,)``.
    """

    student: str
    assignment: str
    path: Path  # the (first) notebook in submitted/
    timestamp: datetime  # timezone-aware (UTC if unknown)
    origin: str  # "exchange", "export", or the export's file name(s) of the notebook(s), ", "-separated
    notebooks: tuple[Path, ...] = ()  # every notebook of the assignment in the folder, path first

    def __post_init__(self) -> None:
        if not self.notebooks:
            object.__setattr__(self, "notebooks", (self.path,))


@dataclass(frozen=True)
class Problem:
    """A file (or an exchange student) that was not collected, or was collected with a remark."""

    name: str  # file name (or student id for exchange problems and missing notebooks)
    reason: str  # human sentence: why it was not collected / what happened
    kind: str  # one of KINDS


#: The kinds of :class:`Problem`, in the order a report lists them (what needs a look first):
#: ``rejected`` (not collected, and it may be a submission), ``interrupted`` (an exchange submission
#: whose copy never finished: not collected, the student's latest finished one is), ``invalid-json`` and ``incomplete``
#: (collected, but a notebook is not JSON / is missing: autograde reports it / scores it 0),
#: ``kept-existing`` (``submitted/`` holds one that is not older), ``superseded`` (an older file),
#: ``skipped`` (not a submission: junk).
KINDS = ("rejected", "interrupted", "invalid-json", "incomplete", "kept-existing", "superseded", "skipped")


def sort_problems(problems: list[Problem]) -> list[Problem]:
    """By kind (in the order of :data:`KINDS`), then name."""
    return sorted(problems, key=lambda p: (KINDS.index(p.kind), p.name))


@dataclass
class CollectReport:
    """What one collection did: the submissions it wrote and everything else, with reasons."""

    assignment: str
    collected: list[Collected] = field(default_factory=list)  # by student id
    problems: list[Problem] = field(default_factory=list)  # by kind (in the order of KINDS), then name

    def summary(self) -> str:
        """A few lines for the terminal: how many were collected (and whom), then each problem on its own line."""
        students = [c.student for c in self.collected]
        shown = ", ".join(students[:20]) + (f", ... ({len(students) - 20} more)" if len(students) > 20 else "")
        head = f"{self.assignment}: {len(self.collected)} collected" + (f" ({shown})" if students else "")
        head += f"; {len(self.problems)} problem{'s' if len(self.problems) != 1 else ''}" if self.problems else ""
        return "\n".join([head, *(f"  {p.kind}: {p.name}: {p.reason}" for p in self.problems)])


def missing_problem(student: str, notebook: str) -> Problem:
    """``incomplete``: a collected submission without one of the assignment's notebooks."""
    return Problem(student, f"collected; {notebook}.ipynb is missing: autograde scores it 0", "incomplete")


def json_problem(data: bytes) -> str | None:
    """Why ``data`` is not JSON (the decoder's message), or ``None``."""
    try:
        json.loads(data)
    except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError
        return str(error)
    return None


# ---------------------------------------------------------------------------------------------
# Student ids and timestamps
# ---------------------------------------------------------------------------------------------


def check_id(student: str, *, assignment: str | None = None) -> str | None:
    """Why ``student`` is not a valid id (a sentence), or ``None`` when it is.

    Valid: 1-128 of the characters ``A-Z a-z 0-9 . _ -``, not starting with ``.`` (a hidden
    folder: ``.``, ``..``, and names nbgrader's ``submitted/*`` glob does not see) nor ``-``
    (it would read as an option on nbgrader's command line), and not the assignment's own id
    (a file named after the assignment says nothing about the student).
    """
    if not student:
        return "the student id is empty"
    bad = sorted({ch for ch in student if not _ID_CHARS.fullmatch(ch)})
    if bad:
        return (f"the student id {student!r} has characters other than A-Z a-z 0-9 . _ -: "
                + " ".join(repr(ch) for ch in bad))
    if student in (".", ".."):
        return f"the student id {student!r} is a path, not a name"
    if student.startswith("."):
        return f"the student id {student!r} starts with '.' (a hidden folder nbgrader would not see)"
    if student.startswith("-"):
        return f"the student id {student!r} starts with '-' (it would read as a command-line option)"
    if len(student) > MAX_ID_LENGTH:
        return f"the student id is {len(student)} characters long (at most {MAX_ID_LENGTH})"
    if assignment is not None and student == assignment:
        return f"the student id would be {student!r}, the assignment's own name, not a student's"
    return None


def check_assignment(assignment: str) -> None:
    """Raise ``ValueError`` when ``assignment`` is not a valid id (the rules of :func:`check_id`)."""
    problem = check_id(assignment)
    if problem:
        raise ValueError(f"not an assignment id: {problem.replace('student id', 'id')}")


def format_timestamp(when: datetime) -> str:
    """``when`` as ``timestamp.txt`` holds it: nbgrader's submit format, in UTC."""
    return utc(when).strftime(TIMESTAMP_FORMAT)


def parse_timestamp(text: str) -> datetime:
    """A timestamp as nbgrader writes or accepts it, as a timezone-aware datetime in UTC.

    Reads ``nbgrader submit``'s ``2026-11-21 12:00:00.000000 UTC`` (any zone name dateutil
    knows), ``nbgrader zip_collect``'s ``2026-11-21 12:00:00`` (no zone: UTC), ISO 8601, and
    what dateutil reads.  A numeric zone (``... -03``, what ``%Z`` gives for zones without an
    abbreviation) is read as hours: nbgrader's own ``parse_utc`` takes ``-03`` for 3 *seconds*.
    Raises ``ValueError`` for text that is not a time.
    """
    from nbgrader.utils import parse_utc

    text = text.strip()
    numeric = re.fullmatch(r"(.+?) ([+-])(\d{2}):?(\d{2})?", text)
    try:
        if numeric:
            local = parse_utc(numeric.group(1))
            offset = timedelta(hours=int(numeric.group(3)), minutes=int(numeric.group(4) or 0))
            return (local - offset if numeric.group(2) == "+" else local + offset).replace(tzinfo=timezone.utc)
        return parse_utc(text).replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError) as error:
        raise ValueError(f"not a timestamp: {text!r} ({error})") from None


def read_timestamp(folder: Path) -> datetime | None:
    """The time in ``folder/timestamp.txt`` (``submitted/<student>/<assignment>/``), in UTC.

    ``None`` when there is no such file or it is empty (nbgrader treats both as "no time");
    ``ValueError`` naming the file when it holds something that is not a time (nbgrader's
    ``autograde`` fails on it too).
    """
    path = Path(folder) / "timestamp.txt"
    if not path.is_file():
        return None
    text = path.read_text(errors="replace").strip()
    if not text:
        return None
    try:
        return parse_timestamp(text)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def existing_timestamp(folder: Path) -> datetime | None:
    """:func:`read_timestamp`, with ``None`` for a timestamp that is not a time."""
    try:
        return read_timestamp(folder)
    except ValueError:
        return None


def utc(when: datetime) -> datetime:
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def show(when: datetime | None) -> str:
    """A time for a sentence of a report (to the second, UTC)."""
    return "no time" if when is None else utc(when).strftime("%Y-%m-%d %H:%M:%S UTC")


def modified(paths: list[Path]) -> datetime:
    """The newest modification time of ``paths`` (a submission without ``timestamp.txt``)."""
    return datetime.fromtimestamp(max(p.stat().st_mtime for p in paths), tz=timezone.utc)


# ---------------------------------------------------------------------------------------------
# The folders
# ---------------------------------------------------------------------------------------------


def submission_folder(course_root: Path, student: str, assignment: str) -> Path:
    return Path(course_root) / "submitted" / student / assignment


def notebooks_in(folder: Path, names: list[str]) -> list[Path]:
    """The notebooks of ``names`` that ``folder`` holds (regular files), in the order of ``names``."""
    return [folder / f"{n}.ipynb" for n in names if (folder / f"{n}.ipynb").is_file()]


def submissions(course_root: Path, assignment: str) -> list[Collected]:
    """What ``submitted/`` holds for ``assignment`` now, sorted by student id.

    One entry per ``submitted/<student>/<assignment>/`` that holds at least one of the
    assignment's notebooks (:func:`autograder.assignment.notebook_names`; a folder without any
    has nothing autograde would grade, and is not listed).  The time is ``timestamp.txt``'s,
    else the newest modification time of those notebooks.  nbgrader's layout does not keep the
    original file names of an export: ``origin`` is ``"exchange"`` for a submission that came
    through the exchange (it holds nbgrader's ``submission_secret.txt``), ``"export"`` otherwise.
    """
    root = Path(course_root) / "submitted"
    found: list[Collected] = []
    if not root.is_dir():
        return found
    names = notebook_names(Path(course_root), assignment)
    for student_dir in sorted(root.iterdir()):
        folder = student_dir / assignment
        notebooks = notebooks_in(folder, names)
        if student_dir.name.startswith(".") or not notebooks:
            continue
        when = existing_timestamp(folder)
        if when is None:
            when = modified(notebooks)
        origin = "exchange" if (folder / "submission_secret.txt").is_file() else "export"
        found.append(Collected(student_dir.name, assignment, notebooks[0], when, origin, tuple(notebooks)))
    return found


def install(folder: Path, files: dict[str, bytes], when: datetime) -> None:
    """Make ``folder`` hold exactly ``files`` (name -> bytes: the notebooks) and a ``timestamp.txt`` of ``when``.

    Written to a hidden sibling folder first (files flushed to disk), then renamed into place:
    the old folder is moved aside, the new one renamed in, the old one deleted.  At any moment
    ``folder`` is either the complete old submission, the complete new one, or (between two
    renames) absent with the old one complete beside it -- never half written, never a mix of
    the old submission's notebooks and the new one's.
    """
    parent = folder.parent
    parent.mkdir(parents=True, exist_ok=True)
    fresh = parent / f".{folder.name}.new-{secrets.token_hex(4)}"
    fresh.mkdir()
    try:
        for name, content in [*files.items(), ("timestamp.txt", format_timestamp(when).encode())]:
            with open(fresh / name, "wb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
        if folder.exists():
            old = parent / f".{folder.name}.old-{secrets.token_hex(4)}"
            os.rename(folder, old)
            try:
                os.rename(fresh, folder)
            except BaseException:
                os.rename(old, folder)
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(fresh, folder)
    finally:
        if fresh.exists():
            shutil.rmtree(fresh, ignore_errors=True)
