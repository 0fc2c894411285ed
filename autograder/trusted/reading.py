"""The checker's reading of solution cells' source: parsed here, never run here.

Exercises whose counts are taken in the student's process (synchronisations, optimizer state, a
schedule's shortcuts) cross-check them by reading the cells' source on the trusted side.  Each
exercise decides what to refuse; this module holds what every reading shares: the cells parsed,
and findings written as sentences that name the cell and the line, each once.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence

__all__ = ["HIDING_NAMES", "Cell", "parse_cells", "refuse_hiding"]

HIDING_NAMES = frozenset({"getattr", "setattr", "delattr", "globals", "locals", "vars", "exec", "eval", "compile",
                          "__import__", "breakpoint"})


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


def refuse_hiding(cell: Cell, allowed_imports: set[str], needs: str, *, refused: dict[str, str] | None = None,
                  allowed_private: frozenset[str] = frozenset()) -> None:
    """Findings, into ``cell``, for what a solution would need only to hide what it does from a reading.

    Imports whose first component is not in ``allowed_imports`` or that name a private module or
    name (``needs`` says what the exercise does need); special attributes (``__x__``, but
    ``__init__``); private attributes of anything but ``self`` (``self._name`` is the student's
    own); :data:`HIDING_NAMES` (``getattr``, ``exec``, ...); and ``refused``: names, attributes or
    module prefixes that the exercise asks the student to write instead of using, each with the
    reason.  ``allowed_private``: private modules and names a solution may use (e.g. torch's
    ``_flatten_dense_tensors``).
    """
    refused = refused or {}
    for node in ast.walk(cell.tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                parts = module.split(".")
                hit = next((why for name, why in refused.items() if module == name or module.startswith(name + ".")),
                           None)
                if hit:
                    cell.add(node, hit)
                elif parts[0] not in allowed_imports or (
                        module not in allowed_private and any(p.startswith("_") for p in parts[1:])):
                    cell.add(node, f"imports {module} (the exercise needs only {needs})")
            if isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.name in refused:
                        cell.add(node, refused[a.name])
                    elif a.name.startswith("_") and a.name not in allowed_private:
                        cell.add(node, f"imports the private name {a.name}")
        elif isinstance(node, ast.Attribute):
            on_self = isinstance(node.value, ast.Name) and node.value.id == "self"
            if node.attr in refused:
                cell.add(node, refused[node.attr])
            elif node.attr == "__init__":      # super().__init__()
                continue
            elif node.attr.startswith("__"):
                cell.add(node, f"uses the special attribute {node.attr} (not needed here)")
            elif node.attr.startswith("_") and not on_self and node.attr not in allowed_private:
                cell.add(node, f"uses the private attribute {node.attr} (not needed here)")
        elif isinstance(node, ast.Name) and node.id in HIDING_NAMES:
            cell.add(node, f"uses {node.id}() (not needed here; it can hide what the code calls)")
        elif isinstance(node, ast.Name) and node.id in refused:
            cell.add(node, refused[node.id])
