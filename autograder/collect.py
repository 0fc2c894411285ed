"""Collecting student submissions into nbgrader's layout, from nbgrader's exchange or from an LMS export.

What nbgrader's ``autograde`` reads, and what everything here writes::

    <course root>/submitted/<student>/<assignment>/<assignment>.ipynb
    <course root>/submitted/<student>/<assignment>/timestamp.txt     e.g. "2026-11-21 12:00:00.000000 UTC"

The timestamp is in the format ``nbgrader submit`` writes (``Exchange.timestamp_format``,
``%Y-%m-%d %H:%M:%S.%f %Z``, in UTC) and ``nbgrader collect`` copies; ``autograde`` reads it to
record the submission time (and lateness) in the gradebook.

Two sources:

* :func:`collect_exchange` -- nbgrader's own exchange (a shared machine, JupyterHub): runs
  ``nbgrader collect`` through ``NbGraderAPI`` with the course's configuration
  (``course/nbgrader_config.py``, re-rooted like :mod:`autograder.course` does) and reports
  which students it collected with which timestamps, whose older submissions it passed over,
  and whose submission it left alone.
* :func:`collect_files` -- an LMS export, a folder or a ``.zip`` of notebooks, where the student
  is named by the file name (:data:`PATTERNS`: Canvas, Moodle, a plain layout; or a regular
  expression of your own).  Unlike ``nbgrader zip_collect``, whatever the student called the
  notebook (``allreduce (1).ipynb``, ``Copy of allreduce.ipynb``) it is stored as
  ``<assignment>.ipynb``, byte for byte -- nbgrader's ``autograde`` skips a notebook whose name
  is not the assignment's; two files of one student are resolved by time (the newest wins,
  the others are reported); an existing submission is replaced only by a newer one, through a
  temporary folder and a rename, so a crash never leaves half a submission; names that do not
  give a valid student id, files outside the export (zip-slip) and links are rejected with the
  reason, junk (``.DS_Store``, ``__MACOSX/``, PDFs) is skipped and reported.

Nothing is ever silently dropped: every file of the export is either collected or appears in
the report's ``problems`` with its reason.  ``python -m autograder.collect --help`` is the
command line.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import stat
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from autograder import course

TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S.%f %Z"  # nbgrader's Exchange.timestamp_format (what `nbgrader submit` writes)
MAX_NOTEBOOK_BYTES = 100_000_000  # nbgrader's CourseDirectory.max_file_size (100000 kB)
MAX_ID_LENGTH = 128

#: Built-in file-name patterns of :func:`collect_files`: name -> regular expression.
#:
#: Each is matched with :func:`re.fullmatch` against the file's path relative to the root of
#: the export (``/`` separators; a zip member's name).  The named group ``student`` is the
#: student id, used as it is (no lower-casing, no replaced characters: an id that is not valid
#: is rejected, see :func:`check_id`); an optional group ``timestamp`` gives the submission time.
#:
#: ``canvas``
#:     Canvas's "Download Submissions": ``<login>_<canvas user id>_<file id>_<file name>``,
#:     and ``<login>_LATE_<canvas user id>_<file id>_<file name>`` for late ones, at the top
#:     of the export.  The student id is the first part (Canvas's name for the student, no
#:     underscores).
#: ``moodle``
#:     Moodle's "Download all submissions": ``<Full Name>_<participant id>_assignsubmission_file_<file name>``,
#:     or the same prefix as a folder (``<Full Name>_<participant id>_assignsubmission_file_/<file name>``,
#:     newer Moodle versions).  The student id is the **participant id** (digits): Moodle
#:     writes names with spaces and any letters (not valid ids, and two students may share a
#:     name), while the participant id is unique and is what Moodle's offline grading
#:     worksheet names each row by ("Participant 123456").  It is Moodle's id for the student
#:     *in this assignment* (with blind marking the name is "Participant" anyway): join grades
#:     across assignments through the worksheet, not through this id.
#: ``plain``
#:     ``<student>.ipynb`` or ``<student>/<any name>.ipynb``, at the top of the export.
#:
#: With ``pattern=None``, :func:`collect_files` uses, for the whole export, the first of these
#: (in this order) that matches at least one of its notebooks; notebooks that it does not match
#: are rejected (one export has one naming scheme: a file that does not follow it is not guessed).
PATTERNS: dict[str, str] = {
    "canvas": r"(?P<student>[^/_]+)_(?:LATE_)?(?P<user_id>\d+)_(?P<file_id>\d+)_(?P<filename>[^/]+)",
    "moodle": r"(?P<fullname>[^/_]+)_(?P<student>\d+)_assignsubmission_file_/?(?P<filename>[^/]+)",
    "plain": r"(?P<student>[^/]+?)(?:/[^/]+)?\.(?i:ipynb)",
}

_ID_CHARS = re.compile(r"[A-Za-z0-9._-]")
_ARCHIVES = (".zip", ".gz", ".tgz", ".tar", ".7z", ".rar", ".bz2", ".xz")


# ---------------------------------------------------------------------------------------------
# What a collection reports
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Collected:
    """One submission in ``submitted/``: collected now, or found there by :func:`submissions`."""

    student: str
    assignment: str
    path: Path  # the notebook in submitted/
    timestamp: datetime  # timezone-aware (UTC if unknown)
    origin: str  # "exchange" or the original file name in the export


@dataclass(frozen=True)
class Problem:
    """A file (or an exchange student) that was not collected, or was collected with a remark."""

    name: str  # file name (or student id for exchange problems)
    reason: str  # human sentence: why it was not collected / what happened
    kind: str  # "rejected" | "skipped" | "superseded" | "kept-existing" | "invalid-json"


#: The kinds of :class:`Problem`, in the order a report lists them (what needs a look first).
KINDS = ("rejected", "invalid-json", "kept-existing", "superseded", "skipped")


def _sorted(problems: list[Problem]) -> list[Problem]:
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


def format_timestamp(when: datetime) -> str:
    """``when`` as ``timestamp.txt`` holds it: nbgrader's submit format, in UTC."""
    return _utc(when).strftime(TIMESTAMP_FORMAT)


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


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


def _show(when: datetime | None) -> str:
    return "no time" if when is None else _utc(when).strftime("%Y-%m-%d %H:%M:%S UTC")


def _submission_folder(course_root: Path, student: str, assignment: str) -> Path:
    return Path(course_root) / "submitted" / student / assignment


def _existing_timestamp(folder: Path) -> datetime | None:
    try:
        return read_timestamp(folder)
    except ValueError:
        return None


def submissions(course_root: Path, assignment: str) -> list[Collected]:
    """What ``submitted/`` holds for ``assignment`` now, sorted by student id.

    One entry per ``submitted/<student>/<assignment>/<assignment>.ipynb`` (a folder without that
    notebook has nothing autograde would grade, and is not listed).  The time is
    ``timestamp.txt``'s, else the notebook's modification time.  nbgrader's layout does not keep
    the original file name of an export: ``origin`` is ``"exchange"`` for a submission that came
    through the exchange (it holds nbgrader's ``submission_secret.txt``), ``"export"`` otherwise.
    """
    root = Path(course_root) / "submitted"
    found: list[Collected] = []
    if not root.is_dir():
        return found
    for student_dir in sorted(root.iterdir()):
        folder = student_dir / assignment
        notebook = folder / f"{assignment}.ipynb"
        if student_dir.name.startswith(".") or not notebook.is_file():
            continue
        when = _existing_timestamp(folder)
        if when is None:
            when = datetime.fromtimestamp(notebook.stat().st_mtime, tz=timezone.utc)
        origin = "exchange" if (folder / "submission_secret.txt").is_file() else "export"
        found.append(Collected(student_dir.name, assignment, notebook, when, origin))
    return found


def _json_problem(data: bytes) -> str | None:
    try:
        json.loads(data)
    except ValueError as error:  # json.JSONDecodeError and UnicodeDecodeError
        return str(error)
    return None


def _check_assignment(assignment: str) -> None:
    problem = check_id(assignment)
    if problem:
        raise ValueError(f"not an assignment id: {problem.replace('student id', 'id')}")


# ---------------------------------------------------------------------------------------------
# nbgrader's exchange
# ---------------------------------------------------------------------------------------------


def _exchange_api(course_root: Path, exchange: Path | None) -> Any:
    """``NbGraderAPI`` with the course's configuration rooted at ``course_root`` (as in :mod:`autograder.course`)."""
    course.alembic_on_path()
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    config = course._config(Path(course_root))
    if exchange is not None:
        config.Exchange.root = str(exchange)
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def _inbound(api: Any, assignment: str) -> dict[str, list[tuple[datetime, str]]]:
    """Student -> ``(time, folder name)`` of each submission of ``assignment`` in the exchange's inbound, newest first.

    Read as nbgrader's ``ExchangeCollect`` reads it: ``<student>+<assignment>+<timestamp>[+<random>]``.
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
        found.setdefault(parts[0], []).append((when, path.name))
    return {student: sorted(items, reverse=True) for student, items in sorted(found.items())}


def collect_exchange(course_root: Path, assignment: str, *, exchange: Path | None = None) -> CollectReport:
    """Collect ``assignment`` from nbgrader's exchange into ``course_root/submitted/`` with ``nbgrader collect``.

    nbgrader does the copying (``NbGraderAPI.collect`` with ``update=True``: each student's
    latest submission, replacing a collected one only when it is newer); this reports what it did:
    ``collected`` the students whose submission is new or newer, with the time of their
    ``timestamp.txt``; problems ``superseded`` for each older submission in the exchange,
    ``kept-existing`` for a student whose collected submission is not older than the exchange's,
    ``invalid-json`` for a collected notebook that is not JSON, and ``rejected`` for a collected
    submission without ``<assignment>.ipynb`` (nothing for autograde to grade).

    ``exchange`` is the exchange's root folder (``Exchange.root``); by default the course
    configuration's (nbgrader's default ``/srv/nbgrader/exchange``).  Raises ``RuntimeError``
    with nbgrader's log when ``nbgrader collect`` fails (no exchange, no permission).
    """
    _check_assignment(assignment)
    course_root = Path(course_root)
    api = _exchange_api(course_root, exchange)
    inbound = _inbound(api, assignment)
    before = {s: _existing_timestamp(_submission_folder(course_root, s, assignment)) for s in inbound}
    existed = {s for s in inbound if _submission_folder(course_root, s, assignment).is_dir()}
    result = api.collect(assignment, update=True)
    if not result or not result.get("success"):
        log = (result or {}).get("log") or ""
        raise RuntimeError(f"nbgrader collect {assignment} failed:\n{(result or {}).get('error') or ''}\n{log}")

    report = CollectReport(assignment, [], [])
    for student, items in inbound.items():
        latest = items[0][0]
        for when, name in items[1:]:
            report.problems.append(Problem(student, f"an older submission ({_show(when)}, {name}) was passed over "
                                                    f"for the latest ({_show(latest)})", "superseded"))
        folder = _submission_folder(course_root, student, assignment)
        now = _existing_timestamp(folder)
        notebook = folder / f"{assignment}.ipynb"
        if not notebook.is_file():
            held = sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
            report.problems.append(Problem(student, f"submitted/{student}/{assignment}/ holds no {assignment}.ipynb, "
                                                    f"only {', '.join(held) or 'nothing'}: autograde would grade "
                                                    f"nothing (rename the student's notebook there to "
                                                    f"{assignment}.ipynb)", "rejected"))
            continue
        if student in existed and now == before[student]:
            if now == latest:
                reason = (f"already collected: submitted/{student}/{assignment}/ holds the latest submission "
                          f"({_show(now)})")
            else:
                reason = (f"kept the submission already in submitted/{student}/{assignment}/ ({_show(now)}): "
                          f"the exchange's latest ({_show(latest)}) is not newer")
            report.problems.append(Problem(student, reason, "kept-existing"))
            continue
        invalid = _json_problem(notebook.read_bytes())
        if invalid:
            report.problems.append(Problem(student, f"collected, but {assignment}.ipynb is not valid JSON ({invalid}): "
                                                    "autograde will report it", "invalid-json"))
        when = now if now is not None else datetime.fromtimestamp(notebook.stat().st_mtime, tz=timezone.utc)
        report.collected.append(Collected(student, assignment, notebook, when, "exchange"))
    report.problems = _sorted(report.problems)
    return report


# ---------------------------------------------------------------------------------------------
# LMS exports: a folder or a zip of notebooks
# ---------------------------------------------------------------------------------------------


@dataclass
class _Entry:
    """One file of an export."""

    name: str  # path relative to the export's root, as the export spells it (a zip member's name)
    read: Callable[[], bytes]
    time: datetime  # the container's time: the zip member's, or the file's modification time
    size: int
    link: bool = False  # a symbolic link (or, in a folder, anything but a regular file)


def _zip_time(info: zipfile.ZipInfo) -> datetime:
    """A zip member's time: the extended-timestamp field (Unix time, UTC) when present, else its
    date_time (which carries no zone; taken as UTC)."""
    extra = info.extra
    while len(extra) >= 4:
        tag, size = struct.unpack("<HH", extra[:4])
        data = extra[4:4 + size]
        if tag == 0x5455 and len(data) >= 5 and data[0] & 1:
            return datetime.fromtimestamp(struct.unpack("<i", data[1:5])[0], tz=timezone.utc)
        extra = extra[4 + size:]
    return datetime(*info.date_time, tzinfo=timezone.utc)


def _zip_entries(archive: zipfile.ZipFile) -> list[_Entry]:
    entries = []
    for info in archive.infolist():
        if info.is_dir():
            continue
        link = (info.external_attr >> 16) & 0o170000 == 0o120000
        entries.append(_Entry(info.filename, lambda info=info: _read_member(archive, info), _zip_time(info),
                              info.file_size, link))
    return entries


def _read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    with archive.open(info) as fh:
        data = fh.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise ValueError(f"it is larger than {MAX_NOTEBOOK_BYTES} bytes")
    return data


def _folder_entries(root: Path) -> list[_Entry]:
    """The files of a folder export.  Links are listed (to be rejected), not followed; hidden
    folders, ``__MACOSX`` and checkpoints are listed once as ``<folder>/`` (skipped), not searched."""
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        searched = []
        for name in sorted(dirnames + filenames):
            path = here / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            when = datetime.fromtimestamp(info.st_mtime, tz=timezone.utc)
            if name in dirnames and not path.is_symlink():
                if name.startswith(".") or name == "__MACOSX":
                    entries.append(_Entry(rel + "/", bytes, when, 0))
                else:
                    searched.append(name)
                continue
            entries.append(_Entry(rel, path.read_bytes, when, info.st_size, not stat.S_ISREG(info.st_mode)))
        dirnames[:] = searched
    return entries


def _outside(name: str) -> str | None:
    """Why a member name points outside the export (zip-slip), or ``None``."""
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name):
        return "its path is absolute: it would be written outside the export (zip-slip); nothing was written"
    if ".." in re.split(r"[/\\]", name):
        return "its path has a '..' part: it would be written outside the export (zip-slip); nothing was written"
    return None


def _junk(name: str) -> str | None:
    """Why a file of the export is not a submission (skipped), or ``None``."""
    parts = PurePosixPath(name.replace("\\", "/")).parts
    if name.endswith("/"):  # a folder that was not searched
        if parts[-1] == "__MACOSX":
            return "macOS archive metadata (__MACOSX), not searched"
        if parts[-1] == ".ipynb_checkpoints":
            return "Jupyter checkpoint copies (.ipynb_checkpoints), not searched"
        return "a hidden folder, not searched"
    if "__MACOSX" in parts:
        return "macOS archive metadata (__MACOSX), not a submission"
    if ".ipynb_checkpoints" in parts:
        return "a Jupyter checkpoint copy (.ipynb_checkpoints), not a submission"
    if parts and parts[-1].startswith("."):
        return "a hidden file, not a submission"
    if any(p.startswith(".") for p in parts[:-1]):
        return "in a hidden folder, not a submission"
    suffix = PurePosixPath(parts[-1]).suffix.lower() if parts else ""
    if suffix in _ARCHIVES:
        return f"an archive inside the export ({suffix}): collect it as a source of its own"
    if suffix != ".ipynb":
        return f"not a notebook ({suffix or 'no extension'})"
    return None


def _pattern(pattern: str | None) -> tuple[str, re.Pattern[str]] | None:
    """``(name, compiled)`` for a PATTERNS key or a regex (``None``: auto-detect)."""
    if pattern is None:
        return None
    text = PATTERNS.get(pattern, pattern)
    try:
        compiled = re.compile(text)
    except re.error as error:
        raise ValueError(f"pattern {pattern!r} is not a regular expression: {error}") from None
    if "student" not in compiled.groupindex and "student_id" not in compiled.groupindex:
        raise ValueError(f"pattern {pattern!r} has no named group (?P<student>...)")
    return (f"the {pattern} pattern" if pattern in PATTERNS else "the given pattern", compiled)


@dataclass
class _Candidate:
    entry: _Entry
    student: str
    time: datetime
    data: bytes | None = None


def _match(entry: _Entry, label: str, compiled: re.Pattern[str], assignment: str
           ) -> tuple[_Candidate | None, Problem | None]:
    """The student and time of one notebook by ``compiled`` (``label`` names the pattern in reasons)."""
    path = entry.name.replace("\\", "/")
    m = compiled.fullmatch(path)
    if not m:
        return None, Problem(entry.name, f"its name does not match {label}: {compiled.pattern}", "rejected")
    groups = m.groupdict()
    raw = groups.get("student")
    if raw is None:
        raw = groups.get("student_id")
    student = (raw or "").strip()
    problem = check_id(student, assignment=assignment)
    if problem:
        return None, Problem(entry.name, f"{problem} (read by {label})", "rejected")
    when = entry.time
    if groups.get("timestamp"):
        try:
            when = parse_timestamp(groups["timestamp"])
        except ValueError:
            return None, Problem(entry.name, f"its timestamp {groups['timestamp']!r} is not a time", "rejected")
    return _Candidate(entry, student, when), None


def _entries(source: Path) -> tuple[list[_Entry], Any]:
    """The files of an export (a folder, a zip file or one notebook), and what to close afterwards."""
    if source.is_dir():
        return _folder_entries(source), None
    if not source.is_file():
        raise FileNotFoundError(f"no export at {source}")
    if zipfile.is_zipfile(source):
        archive = zipfile.ZipFile(source)
        return _zip_entries(archive), archive
    if source.suffix.lower() == ".ipynb":
        stat = source.stat()
        return [_Entry(source.name, source.read_bytes, datetime.fromtimestamp(stat.st_mtime, tz=timezone.utc),
                       stat.st_size)], None
    raise ValueError(f"{source} is neither a folder, a zip file nor a notebook")


def _read(candidate: _Candidate) -> bytes:
    if candidate.data is None:
        candidate.data = candidate.entry.read()
    return candidate.data


def _install(folder: Path, assignment: str, data: bytes, when: datetime) -> None:
    """Make ``folder`` hold exactly ``<assignment>.ipynb`` = ``data`` and its ``timestamp.txt``.

    Written to a hidden sibling folder first (files flushed to disk), then renamed into place:
    the old folder is moved aside, the new one renamed in, the old one deleted.  At any moment
    ``folder`` is either the complete old submission, the complete new one, or (between two
    renames) absent with the old one complete beside it -- never half written.
    """
    parent = folder.parent
    parent.mkdir(parents=True, exist_ok=True)
    fresh = parent / f".{assignment}.new-{secrets.token_hex(4)}"
    fresh.mkdir()
    try:
        for name, content in ((f"{assignment}.ipynb", data), ("timestamp.txt", format_timestamp(when).encode())):
            with open(fresh / name, "wb") as fh:
                fh.write(content)
                fh.flush()
                os.fsync(fh.fileno())
        if folder.exists():
            old = parent / f".{assignment}.old-{secrets.token_hex(4)}"
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


def collect_files(course_root: Path, assignment: str, source: Path, *, pattern: str | None = None) -> CollectReport:
    """Collect an LMS export (a folder, a ``.zip``, or one notebook) into ``course_root/submitted/``.

    Each notebook's student is read from its path in the export by ``pattern`` (a key of
    :data:`PATTERNS` or a regular expression with a named group ``student``, optionally
    ``timestamp``, matched against the whole relative path); ``None`` detects one of
    :data:`PATTERNS` for the export.  Every file ends up in the report:

    * collected: stored as ``submitted/<student>/<assignment>/<assignment>.ipynb``, byte for
      byte whatever it was called, with ``timestamp.txt``: the ``timestamp`` group's time, else
      the zip member's time, else the file's modification time;
    * ``skipped``: not a submission (not a notebook, ``.DS_Store``, ``__MACOSX/``, checkpoints);
    * ``rejected``: a name that gives no valid student id (:func:`check_id`), a path outside the
      export (zip-slip: absolute or with ``..``; nothing is ever written outside
      ``submitted/<student>/<assignment>/``), a link, an unreadable member, or several newest
      files of one student with the same time and different contents (which one to grade
      cannot be told);
    * ``superseded``: an older file of a student who has a newer one in this export;
    * ``kept-existing``: ``submitted/`` already holds a submission of the student that is not
      older (an existing one is replaced only by a strictly newer one, see :func:`_install`);
    * ``invalid-json``: collected, but not JSON (autograde will report it; collection goes by names).
    """
    _check_assignment(assignment)
    course_root, source = Path(course_root), Path(source)
    chosen = _pattern(pattern)
    report = CollectReport(assignment, [], [])
    entries, closing = _entries(source)
    try:
        notebooks: list[_Entry] = []
        for entry in sorted(entries, key=lambda e: e.name):
            reason = _outside(entry.name)
            if reason:
                report.problems.append(Problem(entry.name, reason, "rejected"))
                continue
            reason = _junk(entry.name)
            if reason:
                report.problems.append(Problem(entry.name, reason, "skipped"))
                continue
            if entry.link:
                report.problems.append(Problem(entry.name, "a symbolic link (or not a regular file): not read",
                                               "rejected"))
                continue
            if entry.size > MAX_NOTEBOOK_BYTES:
                report.problems.append(Problem(entry.name, f"it is larger than {MAX_NOTEBOOK_BYTES} bytes", "rejected"))
                continue
            notebooks.append(entry)

        if chosen is None:
            for key, text in PATTERNS.items():
                compiled = re.compile(text)
                if any(compiled.fullmatch(e.name.replace("\\", "/")) for e in notebooks):
                    chosen = (f"the {key} pattern (detected: other notebooks of this export match it)", compiled)
                    break
        by_student: dict[str, list[_Candidate]] = {}
        for entry in notebooks:
            if chosen is None:
                report.problems.append(Problem(entry.name, "its name matches none of the built-in patterns ("
                                               + ", ".join(PATTERNS) + "): pass a pattern", "rejected"))
                continue
            candidate, problem = _match(entry, chosen[0], chosen[1], assignment)
            if problem:
                report.problems.append(problem)
            else:
                assert candidate is not None
                by_student.setdefault(candidate.student, []).append(candidate)

        for student, candidates in sorted(by_student.items()):
            winner = _newest(student, candidates, report)
            if winner is None:
                continue
            try:
                data = _read(winner)
            except (OSError, ValueError, RuntimeError, zipfile.BadZipFile) as error:
                report.problems.append(Problem(winner.entry.name, f"it could not be read: {error}", "rejected"))
                continue
            folder = _submission_folder(course_root, student, assignment)
            notebook = folder / f"{assignment}.ipynb"
            existing = _existing_timestamp(folder) if folder.is_dir() else None
            if existing is not None and winner.time <= existing:
                if winner.time == existing and notebook.is_file() and notebook.read_bytes() == data:
                    reason = (f"already collected: submitted/{student}/{assignment}/ holds this file with the same "
                              f"time ({_show(existing)})")
                else:
                    reason = (f"kept the submission already in submitted/{student}/{assignment}/ ({_show(existing)}): "
                              f"this file ({_show(winner.time)}) is not newer")
                report.problems.append(Problem(winner.entry.name, reason, "kept-existing"))
                continue
            _install(folder, assignment, data, winner.time)
            invalid = _json_problem(data)
            if invalid:
                report.problems.append(Problem(winner.entry.name, f"collected for {student}, but it is not valid JSON "
                                                                  f"({invalid}): autograde will report it",
                                               "invalid-json"))
            report.collected.append(Collected(student, assignment, notebook, winner.time, winner.entry.name))
    finally:
        if closing is not None:
            closing.close()
    report.problems = _sorted(report.problems)
    return report


def _newest(student: str, candidates: list[_Candidate], report: CollectReport) -> _Candidate | None:
    """The newest of one student's files; the others reported (superseded, or rejected when the newest tie)."""
    candidates = sorted(candidates, key=lambda c: (c.time, c.entry.name))
    latest = candidates[-1].time
    newest = [c for c in candidates if c.time == latest]
    older = [c for c in candidates if c.time != latest]
    winner: _Candidate | None = newest[0]
    if len(newest) > 1:
        try:
            same = all(_read(c) == _read(newest[0]) for c in newest[1:])
        except (OSError, ValueError, RuntimeError, zipfile.BadZipFile):
            same = False
        names = ", ".join(c.entry.name for c in newest)
        if same:
            for c in newest[1:]:
                report.problems.append(Problem(c.entry.name, f"the same file as {newest[0].entry.name} (same time, "
                                                             f"same bytes), collected once for {student}",
                                               "superseded"))
        else:
            for c in newest:
                report.problems.append(Problem(c.entry.name, f"{student} has {len(newest)} different files with the "
                                                             f"same newest time ({_show(latest)}): {names}; which one "
                                                             f"to grade cannot be told, none was collected",
                                               "rejected"))
            winner = None
    for c in older:
        newer = newest[0].entry.name if winner is not None else "the files rejected above"
        report.problems.append(Problem(c.entry.name, f"an older file of {student} ({_show(c.time)}); {newer} "
                                                     f"({_show(latest)}) is newer", "superseded"))
    return winner


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
            print(f"{c.student:<24} {_show(c.timestamp)}  {c.origin}")
        return 0
    if args.command == "exchange":
        report = collect_exchange(args.root, args.assignment, exchange=args.exchange)
    else:
        report = collect_files(args.root, args.assignment, args.source, pattern=args.pattern)
    print(report.summary())
    return 1 if any(p.kind == "rejected" for p in report.problems) else 0


if __name__ == "__main__":
    raise SystemExit(main())
