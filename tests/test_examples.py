"""The instructors' page's example assignment, graded in both modes by the class autograder.

``autograder/examples.py`` holds the cells that ``book/writing-exercises.md``
shows.  Each version is released with nbgrader and three submissions are graded:
the right one, one that is subtly wrong (only a hidden test tells: it forgets
n = 0), and one that cheats by returning an object that compares equal to
anything.  The scores here are written out by hand from the specification,
not computed by the code that grades.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
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


def _make_and_grade(mode: str, folder: Path) -> tuple[Path, dict]:
    root = examples.make_course(folder / "course", mode)
    return root, examples.grade(root, "--timeout=300")


@pytest.fixture(scope="module")
def graded(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, bubblewrap: None
           ) -> Iterator[dict[str, Future]]:
    """The selected modes' courses made and graded side by side (each is an nbgrader release and a grading run
    of three submissions on one worker, mostly process starts; nothing here is timed)."""
    modes = [item.callspec.params["mode"] for item in request.session.items
             if getattr(item, "module", None) is request.module and hasattr(item, "callspec")
             and "mode" in item.callspec.params]
    pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="example-course")
    yield {mode: pool.submit(_make_and_grade, mode, tmp_path_factory.mktemp(f"example-{mode}"))
           for mode in dict.fromkeys(modes)}
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("mode", ["nbgrader", "trusted"])
def test_the_pages_example_grades_as_the_page_says(mode: str, graded: dict[str, Future]) -> None:
    root, scores = graded[mode].result(timeout=600)
    release = (root / "release" / "squares" / "squares.ipynb").read_text()
    assert "BEGIN SOLUTION" not in release and "HIDDEN TESTS" not in release and "i * i" not in release
    got = {s: (v["score"], v["max_score"], v["hidden"]) for s, v in scores.items()}
    assert got == EXPECTED[mode]
    assert {v["mode"] for v in scores.values()} == {mode}
