"""The rules of the ``ssp_server`` exercise: what the solution cell may use (public: the self-check applies them).

A stale-synchronous server is bookkeeping and one tensor update: the grader's reading of the solution
cell (:func:`dlperf.grading.reading.read`, an allow-list) lets through a class with ``__init__`` and
its methods, a few standard modules (``math``, ``collections``, ...), ``torch``'s tensor creation and
arithmetic, and the methods of tensors, lists, dicts and deques; nothing else.  The chapter's
ready-made rule and server (``dlperf.staleness``: ``ssp_ready``, its server loop) and the
key-value store (``dlperf.kvstore``) are refused: that is what you write.  So is
``torch.distributed``: the grader's workers call your server directly, there is no process group.

The same :data:`RULES` are applied by the grader (``read(solution_parts(SSPServer), RULES)``, in every
hidden cell) and by the self-check (``reading_case(RULES, SSPServer)``).
"""

from __future__ import annotations

from dlperf.grading.reading import DEFAULT_BUILTINS, STANDARD_LIBRARY, Rules

__all__ = ["RULES"]

_TORCH = {
    "torch.Tensor", "torch.no_grad", "torch.is_tensor", "torch.zeros", "torch.zeros_like", "torch.empty_like",
    "torch.full_like", "torch.tensor", "torch.stack", "torch.sum", "torch.add", "torch.sub", "torch.mul",
    "torch.float64", "torch.double",
}
_ATTRIBUTES = {
    # tensors
    "shape", "dtype", "numel", "clone", "detach", "copy_", "zero_", "add", "add_", "sub", "sub_", "mul", "mul_",
    "div", "div_", "neg", "sum", "double", "to", "item", "tolist",
    # lists, dicts, sets, deques
    "append", "appendleft", "extend", "insert", "pop", "popleft", "remove", "index", "count", "clear", "sort",
    "items", "keys", "values", "get", "setdefault", "update", "add", "discard", "copy",
}

_LIBRARY = ("the chapter's dlperf.staleness has the rule and a whole server ready-made: write them yourself (the "
            "class, a few lists and one tensor update are all the cell needs)")

RULES = Rules(
    what="SSPServer",
    imports={"torch", *STANDARD_LIBRARY["imports"]},
    names={*_TORCH, *STANDARD_LIBRARY["names"]},
    builtins=DEFAULT_BUILTINS,
    attributes=_ATTRIBUTES,
    decorators={"torch.no_grad", *STANDARD_LIBRARY["decorators"]},
    classes=True,
    explain={**{name: _LIBRARY for name in ("dlperf", "dlperf.staleness", "dlperf.kvstore", "autograder",
                                            "autograder.exercises")},
             "torch.distributed": "the grader's workers call your server's push directly: no process group, "
                                  "no messages to send"},
)
