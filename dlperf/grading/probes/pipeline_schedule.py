"""The rules of the ``pipeline_schedule`` exercise: what the solution cells may use (public: the self-check applies them).

A schedule is plain data built from plain Python: the grader's reading of the cells
(:func:`dlperf.grading.reading.read`, an allow-list) lets through the standard modules below, the
builtins a loop needs and the methods of lists, dicts, sets, deques and strings, and nothing else.
Both ready-made libraries of schedules (the chapter's ``dlperf.parallel.pipeline`` and PyTorch's
``torch.distributed.pipelining``) are also switched off in the process that runs the cells
(``FORBID`` in ``autograder/exercises/pipeline_schedule.py``): the reading tells you early, the
switched-off library is what holds.

The same :data:`RULES` are applied by the grader (``read(solution_parts(gpipe), RULES)``) and by the
self-check cells (``reading_case(RULES, gpipe)``).
"""

from __future__ import annotations

from dlperf.grading.reading import STANDARD_LIBRARY, Rules

__all__ = ["RULES"]

_LIBRARY = ("the chapter's library has both schedules ready-made: write the schedule yourself "
            "(a schedule needs no import at all)")

RULES = Rules(
    what="gpipe and one_f_one_b",
    imports=(STANDARD_LIBRARY["imports"] - {"operator"}) | {"heapq", "__future__"},
    names={"math.*", "itertools.*", "heapq.*", "__future__.annotations",
           "functools.reduce", "functools.partial", "functools.cache", "functools.lru_cache",
           "collections.defaultdict", "collections.deque", "collections.OrderedDict", "collections.Counter",
           "dataclasses.dataclass", "dataclasses.field",
           # type names only: typing.get_type_hints evaluates strings
           *(f"typing.{t}" for t in ("Any", "Callable", "Dict", "Iterable", "Iterator", "List", "Optional",
                                     "Sequence", "Set", "Tuple", "Union"))},
    decorators={"staticmethod", "classmethod", "property", "functools.cache", "functools.lru_cache",
                "dataclasses.dataclass"},
    # On values: the methods of the containers a schedule is built with (and whatever the cells' own classes
    # define); nothing that reaches a frame, a code object or a module.
    attributes={"append", "extend", "insert", "pop", "remove", "index", "count", "copy", "reverse", "sort", "clear",
                "items", "keys", "values", "get", "setdefault", "update", "add", "discard", "union", "difference",
                "intersection", "appendleft", "popleft", "extendleft", "rotate", "most_common", "join", "split",
                "strip", "startswith", "endswith", "upper", "lower", "isdigit", "real", "bit_length"},
    explain={**{name: _LIBRARY for name in (
                 "dlperf", "dlperf.parallel", "dlperf.parallel.pipeline", "dlperf.parallel.schedules",
                 "torch.distributed",
                 "torch.distributed.pipelining", "torch.distributed.pipelining.schedules", "autograder",
                 "autograder.exercises")},
             "torch": "a schedule is plain Python data: lists of (str, int) tuples, no tensors",
             "numpy": "a schedule is plain Python data: lists of (str, int) tuples, no arrays",
             "typing.get_type_hints": "it evaluates strings"},
)
