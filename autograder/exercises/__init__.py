"""The checker's side of the project's own exercises: how each one's inputs are made and its results judged.

One module per exercise, imported by that exercise's hidden test cells (which
hold the cases).  Everything here runs in the trusted process (the check run,
or under plain ``nbgrader autograde`` the kernel); the student's code runs in
hosts driven through :mod:`autograder.trusted`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


def self_check_case(check: Callable[..., None], solution: Sequence[Any], runs: Sequence[Any],
                    what: str) -> Callable[[], tuple[Any, Any, bool]]:
    """A :class:`~dlperf.grading.SelfCheck` case that runs an exercise's own ``check`` (the grader's code, the
    same rules) on ``runs``; the message of a failure is printed in full above the table."""
    from autograder.trusted import CheckFailed
    from dlperf.grading.reading import cells_of

    def run() -> tuple[Any, Any, bool]:
        try:
            check(*solution, source=cells_of(*solution), runs=runs, what=what)
        except CheckFailed as exc:
            print(f"{what}: {exc}\n")
            return str(exc).splitlines()[0][:60], "passes", False
        return "passes", "passes", True
    return run
