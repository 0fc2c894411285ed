"""Runs made once per solution: the hidden cells of a relayed exercise each grade one aspect of the same runs."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from autograder.trusted import CheckFailed, Ranks

__all__ = ["RunsOnce", "relayed"]


def relayed(solution: Sequence[Any], source: Sequence[tuple[str, str]], n: int, timeout: float = 30.0) -> Ranks:
    """``n`` ranks of the student's code joined by the relay, with collectives (computed and counted there):
    the solution cells' placeholders where the caller has them (a hidden cell, a self-check), else their
    ``source`` itself."""
    given = {} if solution else {"parts": source}
    return Ranks(*(solution or ()), n=n, timeout=timeout, collectives=True, **given)


class RunsOnce:
    """The groups of runs of the last solution graded: made when a solution or its runs change, else kept.

    A group that failed is kept as its :class:`CheckFailed`, raised again for every cell that grades it."""

    def __init__(self) -> None:
        self._key: Any = None
        self._groups: list[Any] = []

    def each(self, source: Sequence[tuple[str, str]], runs: Sequence[Any], make: Callable[[Any], list[Any]]
             ) -> Iterator[Any]:
        """Every run of every group of ``runs`` (``make(group)`` makes a group's runs), for ``source``'s solution."""
        key = (tuple(tuple(p) for p in source), repr(runs))
        if key != self._key:
            groups: list[Any] = []
            for group in runs:
                try:
                    groups.append(make(group))
                except CheckFailed as exc:
                    groups.append(exc)
            self._key, self._groups = key, groups
        for group in self._groups:
            if isinstance(group, CheckFailed):
                raise CheckFailed(str(group))
            yield from group
