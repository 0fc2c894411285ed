"""The checker's reading of solution cells' source: parsed here, never run here.

Exercises whose counts are taken in the student's process (synchronisations, optimizer state, a
schedule's shortcuts) cross-check them by reading the cells' source on the trusted side.  Each
exercise decides what to refuse; this module holds what every reading shares: the cells parsed,
and findings written as sentences that name the cell and the line, each once.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

__all__ = ["Cell", "parse_cells"]


class Cell:
    """One solution cell, parsed; :meth:`add` writes a finding about one of its nodes into the shared list."""

    def __init__(self, where: str, source: str, found: list[str]):
        self.where = where
        self.tree = ast.parse(source)
        self.lines = source.splitlines()
        self.found = found

    def add(self, node: ast.AST, what: str) -> None:
        line = getattr(node, "lineno", 0)
        text = self.lines[line - 1].strip() if 0 < line <= len(self.lines) else ""
        sentence = f"{self.where}, line {line} (`{text[:80]}`): {what}"
        if sentence not in self.found:
            self.found.append(sentence)


def parse_cells(parts: Sequence[tuple[str, str]]) -> tuple[list[Cell], list[str]]:
    """``parts`` (``[(file name, source)]``, :func:`autograder.trusted.solution_parts`) parsed, and the list
    their findings go to.  A cell that does not parse is the only finding: ``([], [sentence])``."""
    found: list[str] = []
    cells: list[Cell] = []
    for number, (_, source) in enumerate(parts, 1):
        where = f"cell {number}" if len(parts) > 1 else "your cell"
        try:
            cells.append(Cell(where, source, found))
        except SyntaxError as exc:
            return [], [f"{where} does not parse: {exc}"]
    return cells, found
