"""LMS exports: a folder or a ``.zip`` of notebooks, collected into nbgrader's ``submitted/`` (:func:`collect_files`).

The student is named by the file name (:data:`PATTERNS`: Canvas, Moodle, a plain layout; or a
regular expression of your own).  Unlike ``nbgrader zip_collect``, whatever the student called
a notebook it is stored under the name of the assignment's notebook it is, byte for byte --
nbgrader's ``autograde`` skips a notebook whose name is not one of the assignment's:

* an assignment of **one notebook** (the project's exercises: ``allreduce.ipynb``): any name
  (``allreduce (1).ipynb``, ``Copy of allreduce.ipynb``, ``mywork.ipynb``) is that notebook;
* an assignment of **several** (``ps1``: ``p1.ipynb``, ``p2.ipynb``): the file name says which
  (:func:`which_notebook`: the notebook's name as a whole word, download and LMS decorations
  such as `` (1)``, ``-1``, ``Copy of `` set aside where they are in the way); a file that names
  none or several is rejected with the reason.

For each student and notebook the newest file wins (the others are reported); the submission's
time is the newest of its notebooks'; an existing submission is replaced, all of it, only by a
newer one, through a temporary folder and a rename (:func:`autograder.submitted.install`), so a
crash never leaves half a submission; a student's missing notebooks are reported
(``incomplete``: autograde scores them 0); names that do not give a valid student id, files
outside the export (zip-slip) and links are rejected with the reason, junk (``.DS_Store``,
``__MACOSX/``, PDFs) is skipped and reported.  Nothing is ever silently dropped: every file of
the export is either collected or appears in the report's ``problems`` with its reason.
"""

from __future__ import annotations

import os
import re
import stat
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from .assignment import notebook_names
from .submitted import (
    MAX_NOTEBOOK_BYTES,
    Collected,
    CollectReport,
    Problem,
    check_assignment,
    check_id,
    existing_timestamp,
    install,
    json_problem,
    missing_problem,
    parse_timestamp,
    show,
    sort_problems,
    submission_folder,
)

#: Built-in file-name patterns of :func:`collect_files`: name -> regular expression.
#:
#: Each is matched with :func:`re.fullmatch` against the file's path relative to the root of
#: the export (``/`` separators; a zip member's name).  The named group ``student`` is the
#: student id, used as it is (no lower-casing, no replaced characters: an id that is not valid
#: is rejected, see :func:`~autograder.submitted.check_id`); an optional group ``timestamp`` gives
#: the submission time; an optional group ``filename`` the name the student gave the file (for an
#: assignment of several notebooks, it says which notebook the file is, see :func:`which_notebook`;
#: without it, the path's last part does).
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

_ARCHIVES = (".zip", ".gz", ".tgz", ".tar", ".7z", ".rar", ".bz2", ".xz")


# ---------------------------------------------------------------------------------------------
# The files of an export
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
        info = source.stat()
        return [_Entry(source.name, source.read_bytes, datetime.fromtimestamp(info.st_mtime, tz=timezone.utc),
                       info.st_size)], None
    raise ValueError(f"{source} is neither a folder, a zip file nor a notebook")


# ---------------------------------------------------------------------------------------------
# Which student, which notebook
# ---------------------------------------------------------------------------------------------

# What downloads and LMSs add to a file name: Canvas's "-1" for a file handed in again, a browser's
# " (1)", Jupyter's "-Copy1" (File > Duplicate) at the end; Google Drive's "Copy of " at the start.
_TRAILING = re.compile(r"(?: \(\d+\)|-\d+|-Copy\d*)$", re.IGNORECASE)
_LEADING = re.compile(r"^(?:Copy of )+", re.IGNORECASE)


def _undecorated(stem: str) -> list[str]:
    """``stem``, then with its decorations set aside one at a time (``"Copy of p2 (1)-1"``:
    ``"p2 (1)-1"``, ``"p2 (1)"``, ``"p2"``)."""
    stems = [stem]
    current = _LEADING.sub("", stem)
    while current:
        if current != stems[-1]:
            stems.append(current)
        shorter = _TRAILING.sub("", current, count=1)
        if shorter == current:
            break
        current = shorter
    return stems


def which_notebook(filename: str, names: list[str]) -> tuple[str | None, str | None]:
    """Which of the notebooks ``names`` a file named ``filename`` is: ``(name, None)``, or ``(None, why not)``.

    A notebook's name must stand in the file's stem (its name without ``.ipynb``) as a whole
    word, delimited by the start, the end or a character that is not a letter or a digit (so
    ``p1`` is not in ``p10``), ignoring case.  A name that stands only inside a longer one that
    also stands there is that one (``p1_bonus.ipynb`` is ``p1_bonus``, not ``p1``).  Exactly one
    notebook must remain: the stem is read as it is, then with the decorations of downloads and
    LMSs set aside one at a time (:func:`_undecorated`: ``Copy of 2-1`` is ``2``, not ``1`` and
    ``2``), and the first reading in which exactly one notebook stands decides (``lab-2`` is the
    notebook ``lab-2`` when there is one, not ``lab`` downloaded twice).
    """
    stem = re.sub(r"\.ipynb$", "", PurePosixPath(filename).name, flags=re.IGNORECASE)
    several: list[str] = []
    for text in _undecorated(stem):
        found = {n: s for n in names
                 if (s := [m.span() for m in re.finditer(rf"(?<![^\W_]){re.escape(n)}(?![^\W_])", text, re.I)])}
        inside = {n for n, s in found.items()
                  if all(any(a <= x and y <= b and b - a > y - x for m, t in found.items() if m != n for a, b in t)
                         for x, y in s)}
        chosen = [n for n in found if n not in inside]
        if len(chosen) == 1:
            return chosen[0], None
        several = several or chosen
    if several:
        return None, (f"its file name {filename!r} names several of the assignment's notebooks "
                      f"({', '.join(f'{n}.ipynb' for n in several)}): which one it is cannot be told")
    return None, (f"its file name {filename!r} names none of the assignment's notebooks "
                  f"({', '.join(f'{n}.ipynb' for n in names)})")


@dataclass
class _Candidate:
    entry: _Entry
    student: str
    time: datetime
    notebook: str  # the name of the assignment's notebook it is
    data: bytes | None = None


def _match(entry: _Entry, label: str, compiled: re.Pattern[str], assignment: str, names: list[str]
           ) -> tuple[_Candidate | None, Problem | None]:
    """The student, time and notebook of one file by ``compiled`` (``label`` names the pattern in reasons)."""
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
    if problem is None and student in names:
        which = "one of the assignment's notebooks" if len(names) > 1 else "the assignment's notebook"
        problem = f"the student id would be {student!r}, the name of {which}, not a student's"
    if problem:
        return None, Problem(entry.name, f"{problem} (read by {label})", "rejected")
    when = entry.time
    if groups.get("timestamp"):
        try:
            when = parse_timestamp(groups["timestamp"])
        except ValueError:
            return None, Problem(entry.name, f"its timestamp {groups['timestamp']!r} is not a time", "rejected")
    notebook = names[0]
    if len(names) > 1:
        which, why = which_notebook(groups.get("filename") or PurePosixPath(path).name, names)
        if which is None:
            return None, Problem(entry.name, str(why), "rejected")
        notebook = which
    return _Candidate(entry, student, when, notebook), None


def _read(candidate: _Candidate) -> bytes:
    if candidate.data is None:
        candidate.data = candidate.entry.read()
    return candidate.data


# ---------------------------------------------------------------------------------------------
# Collecting
# ---------------------------------------------------------------------------------------------


def collect_files(course_root: Path, assignment: str, source: Path, *, pattern: str | None = None) -> CollectReport:
    """Collect an LMS export (a folder, a ``.zip``, or one notebook) into ``course_root/submitted/``.

    Each notebook's student is read from its path in the export by ``pattern`` (a key of
    :data:`PATTERNS` or a regular expression with a named group ``student``, optionally
    ``timestamp`` and ``filename``, matched against the whole relative path); ``None`` detects
    one of :data:`PATTERNS` for the export.  The assignment's notebooks are
    :func:`autograder.assignment.notebook_names`'s; for several, :func:`which_notebook` tells
    which one a file is.  Every file ends up in the report:

    * collected: stored as ``submitted/<student>/<assignment>/<notebook>.ipynb``, byte for
      byte whatever it was called, with ``timestamp.txt``: the newest time of the student's
      notebooks, each the ``timestamp`` group's time, else the zip member's time, else the
      file's modification time;
    * ``skipped``: not a submission (not a notebook, ``.DS_Store``, ``__MACOSX/``, checkpoints);
    * ``rejected``: a name that gives no valid student id
      (:func:`~autograder.submitted.check_id`, or the name of one of the assignment's
      notebooks), or that does not tell which of several notebooks it is; a path outside
      the export (zip-slip: absolute or with ``..``; nothing is ever written outside
      ``submitted/<student>/<assignment>/``), a link, an unreadable member, or several newest
      files of one student's notebook with the same time and different contents (which one to
      grade cannot be told);
    * ``superseded``: an older file of a student's notebook that has a newer one in this export;
    * ``kept-existing``: ``submitted/`` already holds a submission of the student that is not
      older (an existing one is replaced, all its notebooks, only by a strictly newer one, see
      :func:`~autograder.submitted.install`);
    * ``invalid-json``: collected, but not JSON (autograde will report it; collection goes by names);
    * ``incomplete`` (named by the student id): collected without one of the assignment's
      notebooks, which autograde scores 0.
    """
    check_assignment(assignment)
    course_root, source = Path(course_root), Path(source)
    chosen = _pattern(pattern)
    names = notebook_names(course_root, assignment)
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
        found: dict[str, dict[str, list[_Candidate]]] = {}  # student -> notebook -> files
        for entry in notebooks:
            if chosen is None:
                report.problems.append(Problem(entry.name, "its name matches none of the built-in patterns ("
                                               + ", ".join(PATTERNS) + "): pass a pattern", "rejected"))
                continue
            candidate, problem = _match(entry, chosen[0], chosen[1], assignment, names)
            if problem:
                report.problems.append(problem)
            else:
                assert candidate is not None
                found.setdefault(candidate.student, {}).setdefault(candidate.notebook, []).append(candidate)

        for student, files in sorted(found.items()):
            winners: dict[str, _Candidate] = {}  # in the order of names
            for name in names:
                if name not in files:
                    continue
                winner = _newest(student if len(names) == 1 else f"{student}'s {name}.ipynb", files[name], report)
                if winner is None:
                    continue
                try:
                    _read(winner)
                except (OSError, ValueError, RuntimeError, zipfile.BadZipFile) as error:
                    report.problems.append(Problem(winner.entry.name, f"it could not be read: {error}", "rejected"))
                    continue
                winners[name] = winner
            if winners:
                _store(course_root, assignment, names, student, winners, report)
    finally:
        if closing is not None:
            closing.close()
    report.problems = sort_problems(report.problems)
    return report


def _store(course_root: Path, assignment: str, names: list[str], student: str, winners: dict[str, _Candidate],
           report: CollectReport) -> None:
    """Install one student's chosen files as their submission, unless ``submitted/`` holds one that is not older."""
    folder = submission_folder(course_root, student, assignment)
    when = max(c.time for c in winners.values())
    existing = existing_timestamp(folder) if folder.is_dir() else None
    if existing is not None and when <= existing:
        same = when == existing and all((folder / f"{n}.ipynb").is_file() and (folder / f"{n}.ipynb").read_bytes()
                                        == _read(c) for n, c in winners.items())
        for c in winners.values():
            if same:
                reason = (f"already collected: submitted/{student}/{assignment}/ holds this file with the same "
                          f"time ({show(existing)})")
            else:
                ours = (f"this file ({show(c.time)})" if len(winners) == 1 else
                        f"the newest of {student}'s files in this export ({show(when)})")
                reason = (f"kept the submission already in submitted/{student}/{assignment}/ ({show(existing)}): "
                          f"{ours} is not newer")
            report.problems.append(Problem(c.entry.name, reason, "kept-existing"))
        return
    install(folder, {f"{n}.ipynb": _read(c) for n, c in winners.items()}, when)
    for c in winners.values():
        invalid = json_problem(_read(c))
        if invalid:
            report.problems.append(Problem(c.entry.name, f"collected for {student}, but it is not valid JSON "
                                                         f"({invalid}): autograde will report it", "invalid-json"))
    report.problems.extend(missing_problem(student, n) for n in names if n not in winners)
    paths = tuple(folder / f"{n}.ipynb" for n in winners)
    report.collected.append(Collected(student, assignment, paths[0], when,
                                      ", ".join(c.entry.name for c in winners.values()), paths))


def _newest(label: str, candidates: list[_Candidate], report: CollectReport) -> _Candidate | None:
    """The newest of the files of one student (``label``: ``bob``, or ``bob's p1.ipynb``); the others
    reported (superseded, or rejected when the newest tie)."""
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
                                                             f"same bytes), collected once for {label}",
                                               "superseded"))
        else:
            for c in newest:
                report.problems.append(Problem(c.entry.name, f"{label} has {len(newest)} different files with the "
                                                             f"same newest time ({show(latest)}): {names}; which one "
                                                             f"to grade cannot be told, none was collected",
                                               "rejected"))
            winner = None
    for c in older:
        newer = newest[0].entry.name if winner is not None else "the files rejected above"
        report.problems.append(Problem(c.entry.name, f"an older file of {label} ({show(c.time)}); {newer} "
                                                     f"({show(latest)}) is newer", "superseded"))
    return winner
