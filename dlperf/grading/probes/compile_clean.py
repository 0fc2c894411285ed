"""Probes of the ``compile_clean`` exercise: compile the student's functions and report what Dynamo did.

Each probe takes ``mod`` (a namespace with ``forward`` and ``masked_loss``: the
student's solution in its process, or any other implementation), the name of
the function to run and plain data (the arguments of each call), and returns
what it observed as plain data.  Nothing here knows the expected values or
the verdict: the hidden check compares the outputs with the given (legacy)
code it runs itself, and the counts with the specification.

What is counted, and where the numbers come from:

* **graphs** -- :func:`compiled` compiles with its own backend, :func:`record`,
  which keeps a description of every FX graph Dynamo hands it (the number of
  nodes, whether its inputs have symbolic sizes, and every called target that
  is *not* a PyTorch operator: a user function put in the graph whole with
  ``allow_in_graph`` shows up there) and runs the graph as it is, which is
  what ``backend="eager"`` does.  One call of the backend is one compilation.
* **Dynamo's own counters** (``torch._dynamo.utils.counters``): ``unique_graphs``
  and the graph breaks, read after the same run.  They are kept independently
  of the backend, so the check can require the two to agree.
* **graph breaks** -- under ``fullgraph=True`` a break is an exception (the
  probe returns its type and first line); :func:`explain` runs
  ``torch._dynamo.explain`` (no ``fullgraph``) and returns the number of graphs
  and breaks and each break's reason and line, for the feedback.

Graph breaks and guards are decided by TorchDynamo while it traces, before any
backend runs, so a recording backend sees exactly the graphs that inductor
would compile, without compiling any code (no C++ compiler, milliseconds per
graph).  Everything here runs in the student's process, where the student's
code could patch ``torch._dynamo``; the trusted side therefore also reads the
solution's source (:mod:`autograder.exercises.compile_clean`), and the
backend's count and Dynamo's counters must agree.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - imported with the probe (a warm kernel or check run pays it before a submission)

__all__ = ["FUNCTIONS", "compiled", "eager", "explain", "function", "record", "step"]

FUNCTIONS = ("forward", "masked_loss", "step")
# Modules whose functions may appear as targets of a graph node: PyTorch's operators and
# Python's own operators (``x.shape[0] * 2`` on symbolic sizes).
_OPERATOR_MODULES = ("torch", "_operator", "operator", "math", "builtins", "_tensor", "torch._C")


def step(mod: Any) -> Callable[..., torch.Tensor]:
    """The training step's forward and loss: ``masked_loss(forward(x, w1, b1, w2, b2, max_norm), target, lengths)``."""
    def loss_of_step(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor,
                     max_norm: float, target: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return mod.masked_loss(mod.forward(x, w1, b1, w2, b2, max_norm), target, lengths)
    return loss_of_step


def function(mod: Any, name: str) -> Callable[..., Any]:
    """``mod.forward``, ``mod.masked_loss`` or :func:`step` of ``mod``."""
    if name not in FUNCTIONS:
        raise ValueError(f"unknown function {name!r}: one of {FUNCTIONS}")
    if name == "step":
        return step(mod)
    return getattr(mod, name)


def eager(mod: Any, name: str, args: Sequence[Any]) -> Any:
    """One call of the function ``name``, not compiled."""
    return function(mod, name)(*args)


def _target_name(target: Any) -> str:
    module = getattr(target, "__module__", None) or ""
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or repr(target)
    return f"{module}.{qualname}" if module else str(qualname)


def _is_operator(target: Any) -> bool:
    if isinstance(target, str):          # call_method: a Tensor method by name
        return True
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return True
    module = getattr(target, "__module__", None) or ""
    return module.split(".")[0] in _OPERATOR_MODULES or module in _OPERATOR_MODULES


def record(graphs: list[dict[str, Any]]) -> Callable[..., Any]:
    """A backend that appends a description of each graph to ``graphs`` and runs the graph unchanged."""
    def recording_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        nodes = list(gm.graph.nodes)
        graphs.append({
            "nodes": len(nodes),
            "operations": sum(n.op in ("call_function", "call_method", "call_module") for n in nodes),
            "symbolic": any(isinstance(a, torch.SymInt) for a in example_inputs)
            or any(isinstance(s, torch.SymInt) for a in example_inputs if isinstance(a, torch.Tensor) for s in a.shape),
            "foreign": sorted({_target_name(n.target) for n in nodes
                               if n.op in ("call_function", "call_module") and not _is_operator(n.target)}),
        })
        return gm.forward
    return recording_backend


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


@contextlib.contextmanager
def _quiet() -> Any:
    """Dynamo logs what it refuses at ERROR and WARNING level; the probe reports it instead."""
    loggers = [logging.getLogger(n) for n in ("torch._dynamo", "torch._guards", "torch.fx.experimental.symbolic_shapes",
                                              "torch._subclasses")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _reset() -> None:
    reset = getattr(torch.compiler, "reset", None) or torch._dynamo.reset
    reset()
    torch._dynamo.utils.counters.clear()


def _counters() -> dict[str, int]:
    counters = torch._dynamo.utils.counters
    return {"unique_graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values()))}


def compiled(mod: Any, name: str, calls: Sequence[Sequence[Any]], *, dynamic: bool | None = None,
             mark_dynamic: Sequence[Sequence[int]] | None = None) -> dict[str, Any]:
    """Compile ``name`` once (``fullgraph=True``, the recording backend) and call it with each ``calls[i]``.

    ``dynamic``: ``torch.compile``'s shape policy.  ``mark_dynamic``: for each
    argument position, the dimensions marked dynamic (``torch._dynamo.mark_dynamic``)
    before each call, as a training loop with varying batch sizes would.
    Returns ``outputs`` (one per call that ran), ``error`` (what the first call
    that failed raised, or None), ``failed_call`` (its index), ``graphs`` (what
    :func:`record` saw, one per compilation) and ``counters`` (Dynamo's own).
    The compile caches are emptied before and after.
    """
    graphs: list[dict[str, Any]] = []
    outputs: list[Any] = []
    error, failed = None, None
    _reset()
    try:
        fn = torch.compile(function(mod, name), backend=record(graphs), fullgraph=True, dynamic=dynamic)
        with _quiet():
            for i, args in enumerate(calls):
                args = list(args)
                for position, dims in enumerate(mark_dynamic or ()):
                    for dim in dims:
                        torch._dynamo.mark_dynamic(args[position], dim)
                try:
                    outputs.append(fn(*args))
                except Exception as exc:  # noqa: BLE001 - what Dynamo refused, reported as data
                    error, failed = _first_line(exc), i
                    break
        counts = _counters()
    finally:
        _reset()
    return {"outputs": outputs, "error": error, "failed_call": failed, "graphs": graphs, "counters": counts}


def explain(mod: Any, name: str, args: Sequence[Any]) -> dict[str, Any]:
    """``torch._dynamo.explain`` of one call of ``name``: graphs, breaks, and each break's reason and line."""
    _reset()
    try:
        with _quiet():
            report = torch._dynamo.explain(function(mod, name))(*args)
        reasons = []
        for brk in report.break_reasons:
            stack = getattr(brk, "user_stack", None) or []
            line = (stack[-1].line or "").strip() if stack else ""
            reasons.append({"reason": (brk.reason or "").strip().splitlines()[0][:300] if brk.reason else "",
                            "line": line[:200]})
        return {"graphs": int(report.graph_count), "breaks": int(report.graph_break_count), "reasons": reasons}
    finally:
        _reset()
