"""Collecting an assignment of several notebooks, or of one notebook named otherwise than its assignment
(``autograder.collect``): from an LMS export and from nbgrader's exchange, into an instructor's own course.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from autograder import collect
from autograder.collect import Collected, Problem
from collect_tools import AT_NOON, DETECTED, NOON, UTC, make_files, make_zip, nbgrader, tree


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
