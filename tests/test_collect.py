"""Collecting submissions into nbgrader's ``submitted/`` (``autograder.collect``), with real files.

LMS exports are real folders and real zip files holding the book's student notebook
(``exercises/allreduce/allreduce.ipynb``, one variant per student so that every stored file can
be told apart); the exchange is nbgrader's own: the instructor releases with ``nbgrader
release_assignment`` and students hand in with ``nbgrader submit`` (each with their own home and
configuration, as in ``tests/test_student_path.py``), and :func:`collect_exchange` collects
through ``NbGraderAPI``.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import pytest

from autograder import collect, course
from autograder.collect import PATTERNS, Collected, CollectReport, Problem

AID = "allreduce"
BIN = Path(sys.executable).parent
UTC = timezone.utc
DETECTED = "(detected: other notebooks of this export match it)"
NOON = (2026, 11, 21, 12, 0, 0)  # a zip member's date_time
AT_NOON = datetime(2026, 11, 21, 12, tzinfo=UTC)


def notebook(student: str) -> bytes:
    """The book's student notebook with one markdown cell naming ``student`` (a valid notebook, distinct bytes)."""
    nb = json.loads(course.release_notebook(AID).read_text())
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": f"handed in by {student}"})
    return (json.dumps(nb, indent=1) + "\n").encode()


def make_zip(path: Path, members: list[tuple[str, bytes, tuple[int, ...]]]) -> Path:
    """A zip file with exactly these member names (written raw, '..' and '/' included), data and times."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, data, when in members:
            archive.writestr(zipfile.ZipInfo(name, date_time=when), data)
    return path


def make_files(root: Path, files: dict[str, tuple[bytes, datetime]]) -> Path:
    """A folder export: each relative path with its content and modification time."""
    for name, (data, when) in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, (when.timestamp(), when.timestamp()))
    return root


def tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes), hidden ones included."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def stored(root: Path, student: str, data: bytes, stamp: str) -> dict[str, bytes]:
    """What ``submitted/`` must hold for one student: the notebook under the assignment's name and its time."""
    folder = f"submitted/{student}/{AID}"
    return {f"{folder}/{AID}.ipynb": data, f"{folder}/timestamp.txt": stamp.encode()}


def c(root: Path, student: str, when: datetime, origin: str) -> Collected:
    return Collected(student, AID, root / "submitted" / student / AID / f"{AID}.ipynb", when, origin)


# --------------------------------------------------------------------------- patterns and timestamps


@pytest.mark.parametrize(("key", "path", "student"), [
    ("canvas", "bob_4242_1234567_allreduce.ipynb", "bob"),
    ("canvas", "bob_LATE_4242_1234567_allreduce (1).ipynb", "bob"),
    ("canvas", "lovelaceada_17_99_Copy of allreduce.ipynb", "lovelaceada"),
    ("canvas", "bob_allreduce.ipynb", None),  # no user and file ids
    ("canvas", "sub/bob_4242_1234567_allreduce.ipynb", None),  # Canvas exports are flat
    ("moodle", "Ada Lovelace_123456_assignsubmission_file_allreduce.ipynb", "123456"),
    ("moodle", "Grace Hopper_123457_assignsubmission_file_/allreduce (1).ipynb", "123457"),
    ("moodle", "Participant_123458_assignsubmission_file_Copy of allreduce.ipynb", "123458"),
    ("moodle", "Ada Lovelace_assignsubmission_file_allreduce.ipynb", None),
    ("plain", "ada.ipynb", "ada"),
    ("plain", "ada/Copy of allreduce.ipynb", "ada"),
    ("plain", "ada/work/allreduce.ipynb", None),
])
def test_each_built_in_pattern_names_the_student(key, path, student):
    m = re.fullmatch(PATTERNS[key], path)
    assert (m.group("student") if m else None) == student
    assert list(PATTERNS) == ["canvas", "moodle", "plain"]


def test_timestamps_are_read_as_nbgrader_writes_them(tmp_path):
    cases = {
        "2026-11-21 12:00:00.123456 UTC": datetime(2026, 11, 21, 12, 0, 0, 123456, tzinfo=UTC),  # nbgrader submit
        "2026-11-21 12:00:00": AT_NOON,  # nbgrader zip_collect: no zone
        "2026-11-21 12:00:00.000000 CET": datetime(2026, 11, 21, 11, tzinfo=UTC),
        # %Z of a zone without an abbreviation; nbgrader's parse_utc reads "-03" as 3 seconds
        "2026-11-21 12:00:00.000000 -03": datetime(2026, 11, 21, 15, tzinfo=UTC),
        "2026-11-21 12:00:00 +0530": datetime(2026, 11, 21, 6, 30, tzinfo=UTC),
        "2026-11-21T12:00:00+02:00": datetime(2026, 11, 21, 10, tzinfo=UTC),
    }
    got = {}
    for i, (text, _) in enumerate(cases.items()):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "timestamp.txt").write_text(text + "\n")
        got[text] = collect.read_timestamp(folder)
    assert got == cases
    assert collect.read_timestamp(tmp_path / "missing") is None
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "timestamp.txt").write_text("  \n")
    assert collect.read_timestamp(tmp_path / "empty") is None
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "timestamp.txt").write_text("yesterday")
    with pytest.raises(ValueError, match=r"bad/timestamp.txt: not a timestamp: 'yesterday'"):
        collect.read_timestamp(tmp_path / "bad")
    when = datetime(2026, 11, 21, 12, 0, 0, 5, tzinfo=UTC)
    assert collect.format_timestamp(when) == "2026-11-21 12:00:00.000005 UTC"


# --------------------------------------------------------------------------- LMS exports


def test_canvas_zip_late_and_renamed_notebooks_are_stored_under_the_assignment_name(tmp_path):
    root = tmp_path / "course"
    data = {s: notebook(s) for s in ("bob", "carol", "dave", "erin")}
    export = make_zip(tmp_path / "submissions.zip", [
        ("bob_4242_1234567_allreduce.ipynb", data["bob"], (2026, 11, 20, 9, 30, 0)),
        ("carol_LATE_4243_1234568_allreduce (1).ipynb", data["carol"], (2026, 11, 22, 23, 59, 58)),
        ("dave_4244_1234569_Copy of allreduce.ipynb", data["dave"], (2026, 11, 20, 10, 0, 0)),
        ("__MACOSX/._bob_4242_1234567_allreduce.ipynb", b"\x00\x05\x16\x07", (2026, 11, 20, 9, 30, 0)),
        (".DS_Store", b"\x00\x00\x00\x01Bud1", (2026, 11, 20, 9, 30, 0)),
        (".ipynb_checkpoints/bob_4242_1234567_allreduce-checkpoint.ipynb", data["bob"], (2026, 11, 20, 9, 0, 0)),
        ("eve_4245_1234570_report.pdf", b"%PDF-1.4", (2026, 11, 20, 9, 30, 0)),
    ])
    # erin's member carries Info-ZIP's extended timestamp (Unix time, UTC): it wins over date_time
    with zipfile.ZipFile(export, "a") as archive:
        info = zipfile.ZipInfo("erin_4246_1234571_allreduce.ipynb", date_time=(2026, 11, 21, 9, 15, 42))
        info.extra = struct.pack("<HHBi", 0x5455, 5, 1, int(datetime(2026, 11, 21, 8, 15, 42, tzinfo=UTC).timestamp()))
        archive.writestr(info, data["erin"])

    report = collect.collect_files(root, AID, export)

    assert report.collected == [
        c(root, "bob", datetime(2026, 11, 20, 9, 30, tzinfo=UTC), "bob_4242_1234567_allreduce.ipynb"),
        c(root, "carol", datetime(2026, 11, 22, 23, 59, 58, tzinfo=UTC), "carol_LATE_4243_1234568_allreduce (1).ipynb"),
        c(root, "dave", datetime(2026, 11, 20, 10, tzinfo=UTC), "dave_4244_1234569_Copy of allreduce.ipynb"),
        c(root, "erin", datetime(2026, 11, 21, 8, 15, 42, tzinfo=UTC), "erin_4246_1234571_allreduce.ipynb"),
    ]
    assert report.problems == [
        Problem(".DS_Store", "a hidden file, not a submission", "skipped"),
        Problem(".ipynb_checkpoints/bob_4242_1234567_allreduce-checkpoint.ipynb",
                "a Jupyter checkpoint copy (.ipynb_checkpoints), not a submission", "skipped"),
        Problem("__MACOSX/._bob_4242_1234567_allreduce.ipynb", "macOS archive metadata (__MACOSX), not a submission",
                "skipped"),
        Problem("eve_4245_1234570_report.pdf", "not a notebook (.pdf)", "skipped"),
    ]
    assert tree(root) == {
        **stored(root, "bob", data["bob"], "2026-11-20 09:30:00.000000 UTC"),
        **stored(root, "carol", data["carol"], "2026-11-22 23:59:58.000000 UTC"),
        **stored(root, "dave", data["dave"], "2026-11-20 10:00:00.000000 UTC"),
        **stored(root, "erin", data["erin"], "2026-11-21 08:15:42.000000 UTC"),
    }
    assert report.summary() == (
        "allreduce: 4 collected (bob, carol, dave, erin); 4 problems\n"
        "  skipped: .DS_Store: a hidden file, not a submission\n"
        "  skipped: .ipynb_checkpoints/bob_4242_1234567_allreduce-checkpoint.ipynb: a Jupyter checkpoint copy "
        "(.ipynb_checkpoints), not a submission\n"
        "  skipped: __MACOSX/._bob_4242_1234567_allreduce.ipynb: macOS archive metadata (__MACOSX), not a submission\n"
        "  skipped: eve_4245_1234570_report.pdf: not a notebook (.pdf)")
    assert collect.submissions(root, AID) == [
        Collected(x.student, AID, x.path, x.timestamp, "export") for x in report.collected]


def test_moodle_folder_both_layouts_participant_id_and_modification_times(tmp_path):
    root, when = tmp_path / "course", datetime(2026, 11, 21, 17, 4, 5, tzinfo=UTC)
    data = {s: notebook(s) for s in ("ada", "grace", "anonymous", "alan")}
    export = make_files(tmp_path / "moodle", {
        "Ada Lovelace_123456_assignsubmission_file_allreduce.ipynb": (data["ada"], when),
        "Grace Hopper_123457_assignsubmission_file_/allreduce (1).ipynb": (data["grace"], when.replace(minute=5)),
        "Participant_123458_assignsubmission_file_/Copy of allreduce.ipynb":
            (data["anonymous"], when.replace(minute=6)),
        "Alan Turing_assignsubmission_file_allreduce.ipynb": (data["alan"], when),  # no participant id
    })

    report = collect.collect_files(root, AID, export)

    assert report.collected == [
        c(root, "123456", when, "Ada Lovelace_123456_assignsubmission_file_allreduce.ipynb"),
        c(root, "123457", when.replace(minute=5), "Grace Hopper_123457_assignsubmission_file_/allreduce (1).ipynb"),
        c(root, "123458", when.replace(minute=6), "Participant_123458_assignsubmission_file_/Copy of allreduce.ipynb"),
    ]
    assert report.problems == [Problem(
        "Alan Turing_assignsubmission_file_allreduce.ipynb",
        f"its name does not match the moodle pattern {DETECTED}: {PATTERNS['moodle']}", "rejected")]
    assert tree(root) == {
        **stored(root, "123456", data["ada"], "2026-11-21 17:04:05.000000 UTC"),
        **stored(root, "123457", data["grace"], "2026-11-21 17:05:05.000000 UTC"),
        **stored(root, "123458", data["anonymous"], "2026-11-21 17:06:05.000000 UTC"),
    }


def test_plain_layout_folder_per_student_or_file_per_student(tmp_path):
    root, when = tmp_path / "course", AT_NOON
    data = {s: notebook(s) for s in ("ada", "bob", "carol", "x", "dan")}
    export = make_files(tmp_path / "plain", {
        "ada/Copy of allreduce.ipynb": (data["ada"], when),
        "ada/notes.txt": (b"my notes", when),
        "bob.ipynb": (data["bob"], when),
        "Carol Smith/allreduce.ipynb": (data["carol"], when),
        "allreduce.ipynb": (data["x"], when),
        "dan/work/allreduce.ipynb": (data["dan"], when),
        "dan/.ipynb_checkpoints/allreduce-checkpoint.ipynb": (data["dan"], when),
        ".git/objects/ab/cdef": (b"blob", when),
    })
    (export / "mallory.ipynb").symlink_to(course.release_notebook(AID))  # a link is not read, whatever it points to

    report = collect.collect_files(root, AID, export)

    assert report.collected == [c(root, "ada", when, "ada/Copy of allreduce.ipynb"), c(root, "bob", when, "bob.ipynb")]
    plain = f"the plain pattern {DETECTED}"
    assert report.problems == [
        Problem("Carol Smith/allreduce.ipynb", "the student id 'Carol Smith' has characters other than "
                f"A-Z a-z 0-9 . _ -: ' ' (read by {plain})", "rejected"),
        Problem("allreduce.ipynb", f"the student id would be 'allreduce', the assignment's own name, not a "
                f"student's (read by {plain})", "rejected"),
        Problem("dan/work/allreduce.ipynb", f"its name does not match {plain}: {PATTERNS['plain']}", "rejected"),
        Problem("mallory.ipynb", "a symbolic link (or not a regular file): not read", "rejected"),
        Problem(".git/", "a hidden folder, not searched", "skipped"),
        Problem("ada/notes.txt", "not a notebook (.txt)", "skipped"),
        Problem("dan/.ipynb_checkpoints/", "Jupyter checkpoint copies (.ipynb_checkpoints), not searched", "skipped"),
    ]
    assert tree(root) == {**stored(root, "ada", data["ada"], "2026-11-21 12:00:00.000000 UTC"),
                          **stored(root, "bob", data["bob"], "2026-11-21 12:00:00.000000 UTC")}


def test_a_regex_of_ones_own_with_a_timestamp_group(tmp_path):
    root, mtime = tmp_path / "course", datetime(2030, 1, 1, tzinfo=UTC)
    data = {s: notebook(s) for s in ("ada", "bob", "bitdiddle")}
    export = make_files(tmp_path / "export", {
        "ada@20261121T100000Z.ipynb": (data["ada"], mtime),
        "bob@yesterday.ipynb": (data["bob"], mtime),
        "bob_4242_1234567_allreduce.ipynb": (data["bob"], mtime),
    })
    report = collect.collect_files(root, AID, export, pattern=r"(?P<student>[a-z]+)@(?P<timestamp>[^.]+)\.ipynb")
    assert report.collected == [c(root, "ada", datetime(2026, 11, 21, 10, tzinfo=UTC), "ada@20261121T100000Z.ipynb")]
    assert report.problems == [
        Problem("bob@yesterday.ipynb", "its timestamp 'yesterday' is not a time", "rejected"),
        Problem("bob_4242_1234567_allreduce.ipynb", "its name does not match the given pattern: "
                r"(?P<student>[a-z]+)@(?P<timestamp>[^.]+)\.ipynb", "rejected"),
    ]
    assert tree(root) == stored(root, "ada", data["ada"], "2026-11-21 10:00:00.000000 UTC")

    # nbgrader's own FileNameCollectorPlugin example, with its group name student_id
    nbgrader_style = tmp_path / "nbgrader-style"
    make_files(nbgrader_style, {"bitdiddle_attempt_2016-01-30-15-00-00_problem1.ipynb": (data["bitdiddle"], mtime)})
    example = r"(?P<student_id>\w+)_attempt_(?P<timestamp>[0-9\-]+)_(?P<file_id>\w+)\.ipynb"
    report = collect.collect_files(root, AID, nbgrader_style, pattern=example)
    assert report.collected == [c(root, "bitdiddle", datetime(2016, 1, 30, 15, tzinfo=UTC),
                                  "bitdiddle_attempt_2016-01-30-15-00-00_problem1.ipynb")]
    assert report.problems == []

    # a built-in pattern by name applies to every file, no detection
    report = collect.collect_files(tmp_path / "course2", AID, export, pattern="canvas")
    assert [x.student for x in report.collected] == ["bob"]
    assert [p.name for p in report.problems] == ["ada@20261121T100000Z.ipynb", "bob@yesterday.ipynb"]
    assert report.problems[0].reason == f"its name does not match the canvas pattern: {PATTERNS['canvas']}"

    with pytest.raises(ValueError, match=r"has no named group \(\?P<student>"):
        collect.collect_files(root, AID, export, pattern=r"(?P<who>\w+)\.ipynb")
    with pytest.raises(ValueError, match="is not a regular expression"):
        collect.collect_files(root, AID, export, pattern=r"(?P<student>\w+")


def test_names_that_give_no_valid_student_id_are_rejected_with_their_reason(tmp_path):
    root, when = tmp_path / "course", AT_NOON
    names = ["x__y.ipynb", "x_.._y.ipynb", "x_._y.ipynb", "x_.bob_y.ipynb", "x_-rf_y.ipynb", "x_bob+1_y.ipynb",
             "x_José_y.ipynb", "x_allreduce_y.ipynb", f"x_{'a' * 129}_y.ipynb", "x_ok_y.ipynb"]
    export = make_files(tmp_path / "export", {name: (notebook(name), when) for name in names})
    label = "(read by the given pattern)"

    report = collect.collect_files(root, AID, export, pattern=r"x_(?P<student>[^_]*)_y\.ipynb")

    assert report.collected == [c(root, "ok", when, "x_ok_y.ipynb")]
    assert report.problems == [
        Problem("x_-rf_y.ipynb", "the student id '-rf' starts with '-' (it would read as a command-line option) "
                f"{label}", "rejected"),
        Problem("x_.._y.ipynb", f"the student id '..' is a path, not a name {label}", "rejected"),
        Problem("x_._y.ipynb", f"the student id '.' is a path, not a name {label}", "rejected"),
        Problem("x_.bob_y.ipynb", "the student id '.bob' starts with '.' (a hidden folder nbgrader would not see) "
                f"{label}", "rejected"),
        Problem("x_José_y.ipynb", f"the student id 'José' has characters other than A-Z a-z 0-9 . _ -: 'é' {label}",
                "rejected"),
        Problem("x__y.ipynb", f"the student id is empty {label}", "rejected"),
        Problem(f"x_{'a' * 129}_y.ipynb", f"the student id is 129 characters long (at most 128) {label}", "rejected"),
        Problem("x_allreduce_y.ipynb", f"the student id would be 'allreduce', the assignment's own name, not a "
                f"student's {label}", "rejected"),
        Problem("x_bob+1_y.ipynb", f"the student id 'bob+1' has characters other than A-Z a-z 0-9 . _ -: '+' {label}",
                "rejected"),
    ]
    assert sorted(p.name for p in (root / "submitted").iterdir()) == ["ok"]


def test_zip_slip_members_are_rejected_and_nothing_is_written_outside(tmp_path):
    work = tmp_path / "work"
    root = work / "course"
    bob = notebook("bob")
    evil = notebook("mallory")
    export = make_zip(tmp_path / "slip.zip", [
        ("../evil_1_2_allreduce.ipynb", evil, NOON),
        ("../../course/submitted/bob/allreduce/allreduce.ipynb", evil, NOON),
        ("/tmp/abs_1_2_allreduce.ipynb", evil, NOON),
        ("ok/../../escape_1_2_allreduce.ipynb", evil, NOON),
        ("..\\win_1_2_allreduce.ipynb", evil, NOON),
        ("C:/drive_1_2_allreduce.ipynb", evil, NOON),
        ("bob_4242_1234567_allreduce.ipynb", bob, NOON),
    ])
    before = tree(tmp_path)

    report = collect.collect_files(root, AID, export)

    absolute = "its path is absolute: it would be written outside the export (zip-slip); nothing was written"
    dotdot = "its path has a '..' part: it would be written outside the export (zip-slip); nothing was written"
    assert report.problems == [
        Problem("../../course/submitted/bob/allreduce/allreduce.ipynb", dotdot, "rejected"),
        Problem("../evil_1_2_allreduce.ipynb", dotdot, "rejected"),
        Problem("..\\win_1_2_allreduce.ipynb", dotdot, "rejected"),
        Problem("/tmp/abs_1_2_allreduce.ipynb", absolute, "rejected"),
        Problem("C:/drive_1_2_allreduce.ipynb", absolute, "rejected"),
        Problem("ok/../../escape_1_2_allreduce.ipynb", dotdot, "rejected"),
    ]
    assert report.collected == [c(root, "bob", AT_NOON, "bob_4242_1234567_allreduce.ipynb")]
    after = tree(tmp_path)
    assert {k: v for k, v in after.items() if k not in before} == {
        f"work/course/{k}": v for k, v in stored(root, "bob", bob, "2026-11-21 12:00:00.000000 UTC").items()}
    assert all(after[k] == v for k, v in before.items())
    assert not [p for p in tmp_path.parent.rglob("*_1_2_allreduce.ipynb") if p.read_bytes() == evil]


def test_the_newest_of_a_students_files_wins_and_the_others_are_reported(tmp_path):
    root = tmp_path / "course"
    v1, v2, v3 = notebook("bob, first"), notebook("bob, second"), notebook("bob, third")
    c1, c2 = notebook("carol, one"), notebook("carol, other")
    dave = notebook("dave")
    export = make_zip(tmp_path / "export.zip", [
        ("bob_4242_1_allreduce.ipynb", v1, (2026, 11, 21, 10, 0, 0)),
        ("bob_4242_2_allreduce (1).ipynb", v2, (2026, 11, 21, 11, 0, 0)),
        ("bob_LATE_4242_3_allreduce (2).ipynb", v3, (2026, 11, 21, 9, 0, 0)),
        ("carol_4243_4_allreduce.ipynb", c1, (2026, 11, 21, 11, 0, 0)),
        ("carol_4243_5_notes.ipynb", c2, (2026, 11, 21, 11, 0, 0)),
        ("carol_4243_6_draft.ipynb", c2, (2026, 11, 21, 8, 0, 0)),
        ("dave_4244_7_allreduce.ipynb", dave, (2026, 11, 21, 11, 0, 0)),
        ("dave_4244_8_allreduce (1).ipynb", dave, (2026, 11, 21, 11, 0, 0)),
    ])

    report = collect.collect_files(root, AID, export)

    at11 = datetime(2026, 11, 21, 11, tzinfo=UTC)
    assert report.collected == [c(root, "bob", at11, "bob_4242_2_allreduce (1).ipynb"),
                                c(root, "dave", at11, "dave_4244_7_allreduce.ipynb")]
    tie = ("carol has 2 different files with the same newest time (2026-11-21 11:00:00 UTC): "
           "carol_4243_4_allreduce.ipynb, carol_4243_5_notes.ipynb; which one to grade cannot be told, "
           "none was collected")
    assert report.problems == [
        Problem("carol_4243_4_allreduce.ipynb", tie, "rejected"),
        Problem("carol_4243_5_notes.ipynb", tie, "rejected"),
        Problem("bob_4242_1_allreduce.ipynb", "an older file of bob (2026-11-21 10:00:00 UTC); "
                "bob_4242_2_allreduce (1).ipynb (2026-11-21 11:00:00 UTC) is newer", "superseded"),
        Problem("bob_LATE_4242_3_allreduce (2).ipynb", "an older file of bob (2026-11-21 09:00:00 UTC); "
                "bob_4242_2_allreduce (1).ipynb (2026-11-21 11:00:00 UTC) is newer", "superseded"),
        Problem("carol_4243_6_draft.ipynb", "an older file of carol (2026-11-21 08:00:00 UTC); the files rejected "
                "above (2026-11-21 11:00:00 UTC) is newer", "superseded"),
        Problem("dave_4244_8_allreduce (1).ipynb", "the same file as dave_4244_7_allreduce.ipynb (same time, same "
                "bytes), collected once for dave", "superseded"),
    ]
    assert tree(root) == {**stored(root, "bob", v2, "2026-11-21 11:00:00.000000 UTC"),
                          **stored(root, "dave", dave, "2026-11-21 11:00:00.000000 UTC")}


def test_an_existing_submission_is_replaced_only_by_a_newer_one(tmp_path):
    root = tmp_path / "course"
    name = "bob_4242_1234567_allreduce.ipynb"
    first, older, newer = notebook("bob at 11"), notebook("bob at 10"), notebook("bob at 12")
    at11 = make_zip(tmp_path / "at11.zip", [(name, first, (2026, 11, 21, 11, 0, 0))])
    assert [x.student for x in collect.collect_files(root, AID, at11).collected] == ["bob"]

    at10 = make_zip(tmp_path / "at10.zip", [(name, older, (2026, 11, 21, 10, 0, 0))])
    report = collect.collect_files(root, AID, at10)
    assert report.collected == []
    assert report.problems == [Problem(name, "kept the submission already in submitted/bob/allreduce/ "
                                       "(2026-11-21 11:00:00 UTC): this file (2026-11-21 10:00:00 UTC) is not newer",
                                       "kept-existing")]
    report = collect.collect_files(root, AID, at11)
    assert report.collected == []
    assert report.problems == [Problem(name, "already collected: submitted/bob/allreduce/ holds this file with the "
                                       "same time (2026-11-21 11:00:00 UTC)", "kept-existing")]
    assert tree(root) == stored(root, "bob", first, "2026-11-21 11:00:00.000000 UTC")

    report = collect.collect_files(root, AID, make_zip(tmp_path / "at12.zip", [(name, newer, NOON)]))
    assert report.collected == [c(root, "bob", AT_NOON, name)]
    assert report.problems == []
    assert tree(root) == stored(root, "bob", newer, "2026-11-21 12:00:00.000000 UTC")  # no temporary folder left


def test_a_failed_replacement_leaves_the_existing_submission_whole(tmp_path, monkeypatch):
    root = tmp_path / "course"
    name = "bob_4242_1234567_allreduce.ipynb"
    first = notebook("bob at 11")
    collect.collect_files(root, AID, make_zip(tmp_path / "at11.zip", [(name, first, (2026, 11, 21, 11, 0, 0))]))
    real_rename = os.rename

    def crash_on_the_new_folder(src, dst):
        if Path(src).name.startswith(f".{AID}.new-"):
            raise OSError("disk on fire")
        real_rename(src, dst)

    monkeypatch.setattr(collect.os, "rename", crash_on_the_new_folder)
    with pytest.raises(OSError, match="disk on fire"):
        collect.collect_files(root, AID, make_zip(tmp_path / "at12.zip", [(name, notebook("x"), NOON)]))
    assert tree(root) == stored(root, "bob", first, "2026-11-21 11:00:00.000000 UTC")


def test_a_notebook_that_is_not_json_is_collected_and_noted(tmp_path):
    root = tmp_path / "course"
    broken = course.release_notebook(AID).read_bytes()[:200]
    export = make_zip(tmp_path / "export.zip", [("bob_4242_1234567_allreduce (1).ipynb", broken, NOON)])
    try:
        json.loads(broken)
    except ValueError as error:
        message = str(error)

    report = collect.collect_files(root, AID, export)

    assert report.collected == [c(root, "bob", AT_NOON, "bob_4242_1234567_allreduce (1).ipynb")]
    assert report.problems == [Problem("bob_4242_1234567_allreduce (1).ipynb", f"collected for bob, but it is not "
                                       f"valid JSON ({message}): autograde will report it", "invalid-json")]
    assert tree(root) == stored(root, "bob", broken, "2026-11-21 12:00:00.000000 UTC")


def test_command_line(tmp_path, capsys):
    root = tmp_path / "course"
    export = make_zip(tmp_path / "export.zip", [("bob_4242_1234567_allreduce.ipynb", notebook("bob"), NOON),
                                                ("allreduce.ipynb", notebook("?"), NOON)])
    assert collect.main(["--root", str(root), "files", AID, str(export)]) == 1  # one rejected
    assert capsys.readouterr().out == (
        f"allreduce: 1 collected (bob); 1 problem\n  rejected: allreduce.ipynb: its name does not match the canvas "
        f"pattern {DETECTED}: {PATTERNS['canvas']}\n")
    assert collect.main(["--root", str(root), "list", AID]) == 0
    assert capsys.readouterr().out == f"{'bob':<24} 2026-11-21 12:00:00 UTC  export\n"


# --------------------------------------------------------------------------- nbgrader's exchange


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""))
    for var, sub in (("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                     ("JUPYTER_RUNTIME_DIR", "runtime"), ("IPYTHONDIR", "ipython")):
        env[var] = str(home / sub)
    env.pop("JUPYTER_PATH", None)
    return env


def nbgrader(cwd: Path, *args: str) -> str:
    out = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, env=_env(cwd), capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, f"`nbgrader {' '.join(args)}` exited {out.returncode}:\n{out.stdout}{out.stderr}"
    return out.stdout + out.stderr


def test_exchange_two_students_one_submitting_twice(tmp_path):
    exchange, instructor = tmp_path / "exchange", tmp_path / "instructor"
    exchange.mkdir()
    exchange.chmod(0o777)
    instructor.mkdir()
    (instructor / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
load_subconfig("nbgrader_config.py", path={str(course.COURSE)!r})  # noqa: F821
c.CourseDirectory.root = {str(instructor)!r}
c.CourseDirectory.source_directory = {str(course.SOLUTIONS)!r}
c.CourseDirectory.release_directory = {str(course.EXERCISES)!r}
c.CourseDirectory.db_url = {f"sqlite:///{instructor / 'gradebook.db'}"!r}
c.Exchange.root = {str(exchange)!r}
''')
    nbgrader(instructor, "release_assignment", AID)
    inbound = exchange / "dlperf" / "inbound"

    handed: dict[str, list[tuple[bytes, str]]] = {}  # student -> [(notebook, its inbound folder)]
    # dan works in a copy of the notebook and submits that (nbgrader submit only warns)
    for student, version in (("ada", "first"), ("bob", "only"), ("dan", "renamed"), ("ada", "second")):
        home = tmp_path / student
        (home / AID).mkdir(parents=True, exist_ok=True)
        (home / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "dlperf"
c.CourseDirectory.student_id = {student!r}
c.Exchange.root = {str(exchange)!r}
c.Exchange.cache = {str(home / ".nbgrader_cache")!r}
''')
        data = notebook(f"{student}, {version}")
        (home / AID / (f"{AID}-Copy1.ipynb" if student == "dan" else f"{AID}.ipynb")).write_bytes(data)
        known = set(inbound.iterdir())
        nbgrader(home, "submit", AID)
        (new,) = set(inbound.iterdir()) - known
        handed.setdefault(student, []).append((data, new.name))

    def stamp(folder: str) -> tuple[str, datetime]:
        text = (inbound / folder / "timestamp.txt").read_text()
        return text, datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=UTC)

    (_, ada_old_dir), (ada_new, ada_new_dir) = handed["ada"]
    ((bob, bob_dir),) = handed["bob"]
    ada_text, ada_time = stamp(ada_new_dir)
    bob_text, bob_time = stamp(bob_dir)
    ada_old_time = stamp(ada_old_dir)[1]
    assert ada_old_time < bob_time < ada_time

    report = collect.collect_exchange(instructor, AID, exchange=exchange)

    assert report.collected == [c(instructor, "ada", ada_time, "exchange"), c(instructor, "bob", bob_time, "exchange")]
    dan = Problem("dan", f"submitted/dan/{AID}/ holds no {AID}.ipynb, only {AID}-Copy1.ipynb, submission_secret.txt, "
                         f"timestamp.txt: autograde would grade nothing (rename the student's notebook there to "
                         f"{AID}.ipynb)", "rejected")
    assert report.problems == [dan, Problem("ada", f"an older submission ({ada_old_time:%Y-%m-%d %H:%M:%S} UTC, "
                                                   f"{ada_old_dir}) was passed over for the latest "
                                                   f"({ada_time:%Y-%m-%d %H:%M:%S} UTC)", "superseded")]
    submitted = {k: v for k, v in tree(instructor).items() if k.startswith("submitted/")}
    assert set(submitted) == {f"submitted/{s}/{AID}/{f}" for s in ("ada", "bob")
                              for f in (f"{AID}.ipynb", "timestamp.txt", "submission_secret.txt")} | {
        f"submitted/dan/{AID}/{f}" for f in (f"{AID}-Copy1.ipynb", "timestamp.txt", "submission_secret.txt")}
    assert submitted[f"submitted/ada/{AID}/{AID}.ipynb"] == ada_new
    assert submitted[f"submitted/ada/{AID}/timestamp.txt"] == ada_text.encode()
    assert submitted[f"submitted/bob/{AID}/{AID}.ipynb"] == bob
    assert submitted[f"submitted/bob/{AID}/timestamp.txt"] == bob_text.encode()

    # collecting again changes nothing, and says so
    again = collect.collect_exchange(instructor, AID, exchange=exchange)
    assert again.collected == []
    assert again.problems == [
        dan,
        Problem("ada", f"already collected: submitted/ada/{AID}/ holds the latest submission "
                       f"({ada_time:%Y-%m-%d %H:%M:%S} UTC)", "kept-existing"),
        Problem("bob", f"already collected: submitted/bob/{AID}/ holds the latest submission "
                       f"({bob_time:%Y-%m-%d %H:%M:%S} UTC)", "kept-existing"),
        report.problems[1],
    ]

    # carol hands in through the LMS; submitted/ now holds both kinds (and dan's, with nothing to grade, is not listed)
    carol = make_zip(tmp_path / "lms.zip", [("carol_4243_1_allreduce (1).ipynb", notebook("carol"), NOON)])
    assert [x.student for x in collect.collect_files(instructor, AID, carol).collected] == ["carol"]
    assert collect.submissions(instructor, AID) == [
        c(instructor, "ada", ada_time, "exchange"), c(instructor, "bob", bob_time, "exchange"),
        c(instructor, "carol", AT_NOON, "export")]


def test_exchange_failures_raise_with_nbgraders_log(tmp_path):
    exchange = tmp_path / "exchange"  # an exchange where the course was never released
    exchange.mkdir(mode=0o777)
    expected = f"(?s)nbgrader collect allreduce failed.*Course not found: {re.escape(str(exchange))}/dlperf/inbound"
    with pytest.raises(RuntimeError, match=expected):
        collect.collect_exchange(tmp_path / "course", AID, exchange=exchange)
    assert not (tmp_path / "course" / "submitted").exists()


def test_report_summary_without_problems():
    report = CollectReport(AID, [], [])
    assert report.summary() == "allreduce: 0 collected"


# --------------------------------------------------------------------------- several notebooks, any names
# An instructor's course of its own (its nbgrader_config.py, source/ and release/ folders), as the
# class autograder grades it: ps1 has two notebooks, p1 and p2; hw1 has one, named intro (not hw1).

PS1 = "ps1"


def tiny(text: str) -> bytes:
    """A small valid notebook saying ``text`` (distinct bytes for each text)."""
    return nbformat.writes(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])).encode()


def make_course(root: Path, exchange: Path | None = None) -> Path:
    """A course root with its own configuration and two assignments: ps1 (p1, p2) and hw1 (intro)."""
    root.mkdir(parents=True)
    exchange_line = f"c.Exchange.root = {str(exchange)!r}\n" if exchange else ""
    (root / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "course101"
c.CourseDirectory.root = {str(root)!r}
c.CourseDirectory.db_url = {f"sqlite:///{root / 'gradebook.db'}"!r}
{exchange_line}''')
    for folder in ("source", "release"):
        for assignment, names in ((PS1, ("p1", "p2")), ("hw1", ("intro",))):
            (root / folder / assignment).mkdir(parents=True)
            for name in names:
                (root / folder / assignment / f"{name}.ipynb").write_bytes(tiny(f"{assignment}/{name}, to do"))
    return root


def ps1(root: Path, student: str, when: datetime, origin: str, *names: str) -> Collected:
    folder = root / "submitted" / student / PS1
    paths = tuple(folder / f"{name}.ipynb" for name in names)
    return Collected(student, PS1, paths[0], when, origin, paths)


@pytest.mark.parametrize(("filename", "names", "expected"), [
    ("p1.ipynb", ["p1", "p2"], "p1"),
    ("P1.IPYNB", ["p1", "p2"], "p1"),
    ("p2 (1).ipynb", ["p1", "p2"], "p2"),
    ("Copy of p2-1.ipynb", ["p1", "p2"], "p2"),
    ("p1-Copy1.ipynb", ["p1", "p2"], "p1"),
    ("ps1_p2_final.ipynb", ["p1", "p2"], "p2"),
    ("p10.ipynb", ["p1", "p2"], "its file name 'p10.ipynb' names none of the assignment's notebooks "
                                "(p1.ipynb, p2.ipynb)"),
    ("p1 and p2.ipynb", ["p1", "p2"], "its file name 'p1 and p2.ipynb' names several of the assignment's "
                                      "notebooks (p1.ipynb, p2.ipynb): which one it is cannot be told"),
    ("p1_bonus.ipynb", ["p1", "p1_bonus", "p2"], "p1_bonus"),  # the longest name, when one holds another
    ("p1 (1).ipynb", ["p1", "p1_bonus", "p2"], "p1"),
    ("2-1.ipynb", ["1", "2"], "2"),  # Canvas's "-1": the file 2.ipynb handed in again
    ("lab-2.ipynb", ["lab", "lab-2"], "lab-2"),  # a notebook's own name is not read as a decoration
    ("lab (1).ipynb", ["lab", "lab-2"], "lab"),
])
def test_a_file_name_says_which_notebook_it_is(filename, names, expected):
    notebook, why = collect.which_notebook(filename, names)
    assert (notebook if why is None else why) == expected


def test_lms_zip_of_a_two_notebook_assignment(tmp_path):
    root = make_course(tmp_path / "course")
    files = {k: tiny(k) for k in ("bob p1 old", "bob p1", "bob p2", "carol both", "carol p10", "carol p2",
                                  "dave p1", "erin p1", "erin p2 a", "erin p2 b")}
    export = make_zip(tmp_path / "canvas.zip", [
        ("bob_4242_1234560_Copy of p1.ipynb", files["bob p1 old"], (2026, 11, 20, 9, 0, 0)),
        ("bob_4242_1234567_p1.ipynb", files["bob p1"], (2026, 11, 21, 10, 0, 0)),
        ("bob_4242_1234568_p2 (1).ipynb", files["bob p2"], (2026, 11, 21, 11, 0, 0)),
        ("carol_4243_1234570_p1 and p2.ipynb", files["carol both"], NOON),
        ("carol_4243_1234571_p10.ipynb", files["carol p10"], NOON),
        ("carol_4243_1234572_ps1-p2-1.ipynb", files["carol p2"], NOON),
        ("dave_4244_1234580_P1.ipynb", files["dave p1"], NOON),
        ("erin_4245_1234590_p1.ipynb", files["erin p1"], (2026, 11, 21, 8, 0, 0)),
        ("erin_4245_1234591_p2.ipynb", files["erin p2 a"], (2026, 11, 21, 9, 0, 0)),
        ("erin_4245_1234592_p2 (1).ipynb", files["erin p2 b"], (2026, 11, 21, 9, 0, 0)),
    ])

    report = collect.collect_files(root, PS1, export)

    at11, at8 = datetime(2026, 11, 21, 11, tzinfo=UTC), datetime(2026, 11, 21, 8, tzinfo=UTC)
    assert report.collected == [
        ps1(root, "bob", at11, "bob_4242_1234567_p1.ipynb, bob_4242_1234568_p2 (1).ipynb", "p1", "p2"),
        ps1(root, "carol", AT_NOON, "carol_4243_1234572_ps1-p2-1.ipynb", "p2"),
        ps1(root, "dave", AT_NOON, "dave_4244_1234580_P1.ipynb", "p1"),
        ps1(root, "erin", at8, "erin_4245_1234590_p1.ipynb", "p1"),
    ]
    tie = ("erin's p2.ipynb has 2 different files with the same newest time (2026-11-21 09:00:00 UTC): "
           "erin_4245_1234591_p2.ipynb, erin_4245_1234592_p2 (1).ipynb; which one to grade cannot be told, "
           "none was collected")
    assert report.problems == [
        Problem("carol_4243_1234570_p1 and p2.ipynb", "its file name 'p1 and p2.ipynb' names several of the "
                "assignment's notebooks (p1.ipynb, p2.ipynb): which one it is cannot be told", "rejected"),
        Problem("carol_4243_1234571_p10.ipynb", "its file name 'p10.ipynb' names none of the assignment's "
                "notebooks (p1.ipynb, p2.ipynb)", "rejected"),
        Problem("erin_4245_1234591_p2.ipynb", tie, "rejected"),
        Problem("erin_4245_1234592_p2 (1).ipynb", tie, "rejected"),
        Problem("carol", "collected; p1.ipynb is missing: autograde scores it 0", "incomplete"),
        Problem("dave", "collected; p2.ipynb is missing: autograde scores it 0", "incomplete"),
        Problem("erin", "collected; p2.ipynb is missing: autograde scores it 0", "incomplete"),
        Problem("bob_4242_1234560_Copy of p1.ipynb", "an older file of bob's p1.ipynb (2026-11-20 09:00:00 UTC); "
                "bob_4242_1234567_p1.ipynb (2026-11-21 10:00:00 UTC) is newer", "superseded"),
    ]
    assert tree(root / "submitted") == {
        "bob/ps1/p1.ipynb": files["bob p1"], "bob/ps1/p2.ipynb": files["bob p2"],
        "bob/ps1/timestamp.txt": b"2026-11-21 11:00:00.000000 UTC",
        "carol/ps1/p2.ipynb": files["carol p2"], "carol/ps1/timestamp.txt": b"2026-11-21 12:00:00.000000 UTC",
        "dave/ps1/p1.ipynb": files["dave p1"], "dave/ps1/timestamp.txt": b"2026-11-21 12:00:00.000000 UTC",
        "erin/ps1/p1.ipynb": files["erin p1"], "erin/ps1/timestamp.txt": b"2026-11-21 08:00:00.000000 UTC",
    }
    assert collect.submissions(root, PS1) == [
        ps1(root, "bob", at11, "export", "p1", "p2"), ps1(root, "carol", AT_NOON, "export", "p2"),
        ps1(root, "dave", AT_NOON, "export", "p1"), ps1(root, "erin", at8, "export", "p1")]

    # A newer export replaces a submission whole: bob's p1 of 10:00 does not stay beside his new p2.
    # An older one leaves it alone, whichever of its notebooks it holds.
    newer_p2, old_p1, old_p2 = tiny("bob p2, at 13"), tiny("dave p1, at 9"), tiny("dave p2, at 9")
    again = make_zip(tmp_path / "again.zip", [
        ("bob_4242_1234600_p2.ipynb", newer_p2, (2026, 11, 21, 13, 0, 0)),
        ("dave_4244_1234601_p1.ipynb", old_p1, (2026, 11, 21, 9, 0, 0)),
        ("dave_4244_1234602_p2.ipynb", old_p2, (2026, 11, 21, 9, 0, 0)),
    ])
    report = collect.collect_files(root, PS1, again)
    at13 = datetime(2026, 11, 21, 13, tzinfo=UTC)
    assert report.collected == [ps1(root, "bob", at13, "bob_4242_1234600_p2.ipynb", "p2")]
    kept = ("kept the submission already in submitted/dave/ps1/ (2026-11-21 12:00:00 UTC): the newest of dave's "
            "files in this export (2026-11-21 09:00:00 UTC) is not newer")
    assert report.problems == [
        Problem("bob", "collected; p1.ipynb is missing: autograde scores it 0", "incomplete"),
        Problem("dave_4244_1234601_p1.ipynb", kept, "kept-existing"),
        Problem("dave_4244_1234602_p2.ipynb", kept, "kept-existing"),
    ]
    assert {k: v for k, v in tree(root / "submitted").items() if k.startswith(("bob/", "dave/"))} == {
        "bob/ps1/p2.ipynb": newer_p2, "bob/ps1/timestamp.txt": b"2026-11-21 13:00:00.000000 UTC",
        "dave/ps1/p1.ipynb": files["dave p1"], "dave/ps1/timestamp.txt": b"2026-11-21 12:00:00.000000 UTC",
    }


def test_one_notebook_named_otherwise_than_its_assignment(tmp_path):
    root = make_course(tmp_path / "course")
    ada, bob, cy = tiny("ada"), tiny("bob"), tiny("cy")
    report = collect.collect_files(root, "hw1", make_zip(tmp_path / "canvas.zip", [
        ("ada_17_99_Copy of intro (1).ipynb", ada, NOON),
        ("bob_18_100_my homework.ipynb", bob, NOON),  # one notebook: whatever its name, it is that one
    ]))
    folder = root / "submitted"
    assert report.collected == [
        Collected("ada", "hw1", folder / "ada/hw1/intro.ipynb", AT_NOON, "ada_17_99_Copy of intro (1).ipynb"),
        Collected("bob", "hw1", folder / "bob/hw1/intro.ipynb", AT_NOON, "bob_18_100_my homework.ipynb"),
    ]
    assert report.problems == []

    plain = make_files(tmp_path / "plain", {"cy/hw1.ipynb": (cy, AT_NOON), "intro.ipynb": (cy, AT_NOON),
                                            "hw1.ipynb": (cy, AT_NOON)})
    report = collect.collect_files(root, "hw1", plain)
    label = f"(read by the plain pattern {DETECTED})"
    assert report.collected == [Collected("cy", "hw1", folder / "cy/hw1/intro.ipynb", AT_NOON, "cy/hw1.ipynb")]
    assert report.problems == [
        Problem("hw1.ipynb", f"the student id would be 'hw1', the assignment's own name, not a student's {label}",
                "rejected"),
        Problem("intro.ipynb", f"the student id would be 'intro', the name of the assignment's notebook, not a "
                f"student's {label}", "rejected"),
    ]
    assert tree(folder) == {
        "ada/hw1/intro.ipynb": ada, "ada/hw1/timestamp.txt": b"2026-11-21 12:00:00.000000 UTC",
        "bob/hw1/intro.ipynb": bob, "bob/hw1/timestamp.txt": b"2026-11-21 12:00:00.000000 UTC",
        "cy/hw1/intro.ipynb": cy, "cy/hw1/timestamp.txt": b"2026-11-21 12:00:00.000000 UTC",
    }
    assert [(c.student, c.path.name) for c in collect.submissions(root, "hw1")] == [
        ("ada", "intro.ipynb"), ("bob", "intro.ipynb"), ("cy", "intro.ipynb")]


def test_exchange_of_a_two_notebook_assignment(tmp_path, capsys):
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)
    root = make_course(tmp_path / "instructor", exchange)
    nbgrader(root, "release_assignment", PS1)
    inbound = exchange / "course101" / "inbound"

    broken = b'{"cells": ['
    handed = {  # what each student hands in with `nbgrader submit`: ada all, bob p1 only, carol another name
        "ada": {"p1.ipynb": tiny("ada p1"), "p2.ipynb": tiny("ada p2")},
        "bob": {"p1.ipynb": tiny("bob p1")},
        "carol": {"notes.ipynb": tiny("carol's notes")},
        "dan": {"p1.ipynb": tiny("dan p1"), "p2.ipynb": broken},
    }
    stamps = {}
    for student, notebooks in handed.items():
        home = tmp_path / student
        (home / PS1).mkdir(parents=True)
        (home / "nbgrader_config.py").write_text(f'''c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "course101"
c.CourseDirectory.student_id = {student!r}
c.Exchange.root = {str(exchange)!r}
c.Exchange.cache = {str(home / ".nbgrader_cache")!r}
''')
        for name, data in notebooks.items():
            (home / PS1 / name).write_bytes(data)
        nbgrader(home, "submit", PS1)
        (folder,) = inbound.glob(f"{student}+{PS1}+*")
        text = (folder / "timestamp.txt").read_text()
        stamps[student] = datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f UTC").replace(tzinfo=UTC)
    try:
        json.loads(broken)
    except ValueError as error:
        message = str(error)

    report = collect.collect_exchange(root, PS1)  # the exchange of the course's own configuration

    assert report.collected == [ps1(root, "ada", stamps["ada"], "exchange", "p1", "p2"),
                                ps1(root, "bob", stamps["bob"], "exchange", "p1"),
                                ps1(root, "dan", stamps["dan"], "exchange", "p1", "p2")]
    assert report.problems == [
        Problem("carol", "submitted/carol/ps1/ holds none of p1.ipynb, p2.ipynb, only notes.ipynb, "
                "submission_secret.txt, timestamp.txt: autograde would grade nothing (rename the student's "
                "notebooks there to these names)", "rejected"),
        Problem("dan", f"collected, but p2.ipynb is not valid JSON ({message}): autograde will report it",
                "invalid-json"),
        Problem("bob", "collected; p2.ipynb is missing: autograde scores it 0", "incomplete"),
    ]
    submitted = tree(root / "submitted")
    assert {k: v for k, v in submitted.items() if k.endswith(".ipynb")} == {
        "ada/ps1/p1.ipynb": handed["ada"]["p1.ipynb"], "ada/ps1/p2.ipynb": handed["ada"]["p2.ipynb"],
        "bob/ps1/p1.ipynb": handed["bob"]["p1.ipynb"], "carol/ps1/notes.ipynb": handed["carol"]["notes.ipynb"],
        "dan/ps1/p1.ipynb": handed["dan"]["p1.ipynb"], "dan/ps1/p2.ipynb": broken,
    }
    assert collect.submissions(root, PS1) == report.collected

    assert collect.main(["--root", str(root), "list", PS1]) == 0
    assert capsys.readouterr().out == "".join(
        f"{s:<24} {stamps[s]:%Y-%m-%d %H:%M:%S} UTC  exchange\n" for s in ("ada", "bob", "dan"))
