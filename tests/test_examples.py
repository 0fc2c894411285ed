"""The instructors' page's example assignment, graded in both modes by the class autograder.

``autograder/examples.py`` holds the cells that ``book/writing-exercises.md``
shows.  Each version is released with nbgrader and three submissions are graded:
the right one, one that is subtly wrong (only a hidden test tells: it forgets
n = 0), and one that cheats by returning an object that compares equal to
anything.  The scores here are written out by hand from the specification,
not computed by the code that grades.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from autograder import examples

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# student -> (notebook score, maximum, hidden tests' score); the visible test is worth 1 point in nbgrader
# mode and is an ungraded self-check in trusted mode
EXPECTED = {
    "nbgrader": {"right": (3, 3, 2), "wrong": (1, 3, 0), "cheat": (3, 3, 2)},
    "trusted": {"right": (2, 2, 2), "wrong": (0, 2, 0), "cheat": (0, 2, 0)},
}


@pytest.mark.parametrize("mode", ["nbgrader", "trusted"])
def test_the_pages_example_grades_as_the_page_says(mode: str, tmp_path: Path, bubblewrap: None) -> None:
    root = examples.make_course(tmp_path / "course", mode)
    release = (root / "release" / "squares" / "squares.ipynb").read_text()
    assert "BEGIN SOLUTION" not in release and "HIDDEN TESTS" not in release and "i * i" not in release
    scores = examples.grade(root, "--timeout=300")
    got = {s: (v["score"], v["max_score"], v["hidden"]) for s, v in scores.items()}
    assert got == EXPECTED[mode]
    assert {v["mode"] for v in scores.values()} == {mode}
