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
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

from autograder import collect, course
from autograder.collect import PATTERNS, Collected, CollectReport, Problem

from collect_tools import (AID, AT_NOON, DETECTED, NOON, UTC, c, exchange_course, make_files, make_zip, nbgrader,
                           notebook, stored, student_home, submit_at_once, submit_cut_off, tree)


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


def test_exchange_two_students_one_submitting_twice(tmp_path):
    exchange, instructor, inbound = exchange_course(tmp_path)

    handed: dict[str, list[tuple[bytes, str]]] = {}  # student -> [(notebook, its inbound folder)]
    # dan works in a copy of the notebook and submits that (nbgrader submit only warns)
    for student, version in (("ada", "first"), ("bob", "only"), ("dan", "renamed"), ("ada", "second")):
        home = student_home(tmp_path, exchange, student)
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


def test_exchange_a_submission_cut_off_and_submissions_at_once_lose_nothing(tmp_path):
    """A student's server dies during her resubmission: her cut-off copy is never collected (nbgrader's own
    collect would take it, the newest), her finished one is, and the report says so; a student whose only
    submission was cut off gets nothing collected and is named; three submissions at the same moment, two
    of them the same student's (a double click), are all kept in the exchange and the newest is collected."""
    exchange, instructor, inbound = exchange_course(tmp_path)
    homes = {s: student_home(tmp_path, exchange, s) for s in ("ada", "bob", "eve")}

    def write(student: str, version: str) -> bytes:
        data = notebook(f"{student}, {version}")
        (homes[student] / AID / f"{AID}.ipynb").write_bytes(data)
        return data

    def new_folders(before: set[Path]) -> list[str]:
        return sorted(p.name for p in set(inbound.iterdir()) - before)

    ada_good = write("ada", "finished")
    nbgrader(homes["ada"], "submit", AID)
    (ada_done,) = new_folders(set())
    write("ada", "cut off")
    known = set(inbound.iterdir())
    died = submit_cut_off(homes["ada"])
    assert died.returncode == -9, died.stdout + died.stderr
    (ada_cut,) = new_folders(known)
    assert not (inbound / ada_cut / "timestamp.txt").exists()   # the copy never finished
    known = set(inbound.iterdir())
    write("eve", "only, cut off")
    assert submit_cut_off(homes["eve"]).returncode == -9
    (eve_cut,) = new_folders(known)

    def when(name: str) -> datetime:
        return collect.parse_timestamp(name.rsplit("+", 3)[2])

    def show(name: str) -> str:
        return f"{when(name):%Y-%m-%d %H:%M:%S} UTC"

    def cut_off(student: str, name: str, counts: str) -> Problem:
        return Problem(student, f"a submission that never finished ({show(name)}, {name}: no timestamp.txt, the copy "
                                f"was cut off or is still under way) was not collected; {counts}", "interrupted")

    eve = cut_off("eve", eve_cut, "they have no finished submission")
    report = collect.collect_exchange(instructor, AID, exchange=exchange)
    assert report.collected == [c(instructor, "ada", when(ada_done), "exchange")]
    assert report.problems == [cut_off("ada", ada_cut, f"their latest finished submission ({show(ada_done)}) counts"), eve]
    assert (instructor / "submitted" / "ada" / AID / f"{AID}.ipynb").read_bytes() == ada_good

    bob = write("bob", "at once")
    known = set(inbound.iterdir())
    submit_at_once([homes["bob"], homes["bob"], homes["ada"]])   # ada's third submission: her cut-off one again
    added = new_folders(known)
    assert len(added) == 3 and all((inbound / name / "timestamp.txt").is_file() for name in added)
    ada_latest = next(name for name in added if name.startswith("ada+"))
    bob_older, bob_newer = sorted((n for n in added if n.startswith("bob+")), key=lambda n: n.rsplit("+", 3)[2])

    report = collect.collect_exchange(instructor, AID, exchange=exchange)
    assert report.collected == [c(instructor, "ada", when(ada_latest), "exchange"),
                                c(instructor, "bob", when(bob_newer), "exchange")]
    assert report.problems == [
        cut_off("ada", ada_cut, f"their latest finished submission ({show(ada_latest)}) counts"), eve,
        Problem("ada", f"an older submission ({show(ada_done)}, {ada_done}) was passed over for the latest "
                       f"({show(ada_latest)})", "superseded"),
        Problem("bob", f"an older submission ({show(bob_older)}, {bob_older}) was passed over for the latest "
                       f"({show(bob_newer)})", "superseded"),
    ]
    assert (instructor / "submitted" / "bob" / AID / f"{AID}.ipynb").read_bytes() == bob
    assert not (instructor / "submitted" / "eve").exists()
    # nothing in the exchange was lost: every submission is still there, as it was handed in
    assert (inbound / ada_done / f"{AID}.ipynb").read_bytes() == ada_good
    assert len(list(inbound.iterdir())) == 6


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
