"""The checker's side of the ``compile_clean`` exercise: inputs, the static reading and the verdicts.

The student rewrites the given (legacy) ``forward`` and ``masked_loss`` so that
``torch.compile`` captures them in one graph and does not recompile for every
batch size.  The expected values are the legacy code's, run here in eager
mode (the legacy code is the specification: the rewrite must compute the same
thing).  The student's functions run in a host: called directly for the eager
results (on tensors in this process's memory, so that an input changed in
place is seen here), and through the public probe
:mod:`dlperf.grading.probes.compile_clean` for everything Dynamo does.

**What the student's process could fake, and the cross-checks.**  The graph
and compilation counts are taken in the student's process, where its code
could patch ``torch._dynamo`` (its counters, ``mark_dynamic``, ``torch.compile``
itself) or the probe.  Three things stand against that:

1. :func:`static_problems` reads the solution cells' source here (it is never
   run here): only ``torch``, ``torch.nn``, ``torch.nn.functional`` and ``math``
   may be imported; no private name (``torch._dynamo``, ``__import__``, ...),
   no ``torch.compile``/``jit``/``fx``, nothing of ``torch.compiler`` but
   ``is_compiling()`` (a compiled-only path is caught by the eager results), no ``.item()``,
   ``.tolist()``, ``.numpy()``, no ``print``, ``getattr``, ``exec`` and their
   kind.  A cell that breaks a rule scores 0 in the cells that count graphs.
2. Two independent counts must agree: the graphs the probe's own backend
   received and Dynamo's ``unique_graphs`` counter (and no graph break in
   Dynamo's counter).  A graph must also hold the work: at least the
   operations of the legacy code's tensor work, and no call of a user
   function (``allow_in_graph`` hides a break that way).
3. The values: every compiled call must return the legacy code's result, so
   running the function eagerly behind a fake report does not pass.

A submission could still forge consistent reports by reaching Dynamo through
a path the static reading does not know; that needs deliberate obfuscation
that the reading of the source makes visible to a human grader.
"""

from __future__ import annotations

import ast
import contextlib
import io
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from autograder.trusted import CheckFailed, Student, expect_same, seed
from dlperf.grading.probes import compile_clean as probe

__all__ = [
    "ALLOWED_IMPORTS",
    "MIN_OPERATIONS",
    "check_compiled",
    "check_eager",
    "check_static",
    "expected",
    "legacy",
    "make_case",
    "static_problems",
]

ALLOWED_IMPORTS = ("torch", "torch.nn", "torch.nn.functional", "math")
FORBIDDEN_NAMES = {"print", "getattr", "setattr", "delattr", "hasattr", "eval", "exec", "compile", "globals", "locals",
                   "vars", "open", "input", "breakpoint", "importlib", "sys", "builtins", "os", "dir", "type",
                   "object", "super", "memoryview"}
FORBIDDEN_ATTRIBUTES = {"item", "tolist", "numpy", "compile", "compiler", "jit", "fx", "export", "modules", "sys",
                        "builtins", "os", "importlib", "library", "utils", "ops", "overrides", "func_globals",
                        "f_globals", "f_back", "gi_frame", "cr_frame", "data_ptr", "untyped_storage", "storage"}
# The tensor work of the legacy code: matmul, add, relu, norm, clamp_min, div, mul, matmul, add in forward;
# sub, square, mean and the sums in masked_loss. A graph with fewer operations did not capture the function.
MIN_OPERATIONS = {"forward": 8, "masked_loss": 4, "step": 12}
TOL = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-10, 1e-12)}


# ---------------------------------------------------------------------------------------------
# Inputs and expected values
# ---------------------------------------------------------------------------------------------


def make_case(case: Any, B: int, T: int, D: int = 6, H: int = 16, K: int = 3, *, dtype: torch.dtype = torch.float32,
              max_norm: float = 3.0, padding: float | None = None, dead: bool = False) -> dict[str, Any]:
    """The arguments of one call of each function, random from the submission's seed for ``case``.

    ``x``: (B, T, D), ``target``: (B, T, K), ``lengths``: (B,) int64 in [1, T]
    with T itself among them when B > 1. ``padding``: a value written into
    ``x``, ``pred`` and ``target`` at every time step past a sequence's length
    (inf, NaN: the loss must ignore those steps). ``dead``: the first layer's
    bias so negative that every hidden activation is 0 (zero norms).
    """
    g = torch.Generator().manual_seed(seed("compile_clean", case))
    x = torch.randn(B, T, D, generator=g, dtype=torch.float64)
    w1 = torch.randn(D, H, generator=g, dtype=torch.float64) / D ** 0.5
    b1 = torch.randn(H, generator=g, dtype=torch.float64) * 0.5 - (100.0 if dead else 0.0)
    w2 = torch.randn(H, K, generator=g, dtype=torch.float64) / H ** 0.5
    b2 = torch.randn(K, generator=g, dtype=torch.float64)
    target = torch.randn(B, T, K, generator=g, dtype=torch.float64)
    pred = torch.randn(B, T, K, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    if B > 1:
        lengths[int(torch.randint(0, B, (), generator=g))] = T
    if padding is not None:
        past = torch.arange(T)[None, :] >= lengths[:, None]
        for t in (target, pred):   # not x: the given forward's `if norm.max() > max_norm` sees every step
            t[past] = padding
    cast = {k: v.to(dtype) for k, v in {"x": x, "w1": w1, "b1": b1, "w2": w2, "b2": b2, "target": target,
                                         "pred": pred}.items()}
    args = {"forward": [cast["x"], cast["w1"], cast["b1"], cast["w2"], cast["b2"], max_norm],
            "masked_loss": [cast["pred"], cast["target"], lengths],
            "step": [cast["x"], cast["w1"], cast["b1"], cast["w2"], cast["b2"], max_norm, cast["target"], lengths]}
    return args


def legacy(forward: Callable[..., Any], masked_loss: Callable[..., Any]) -> types.SimpleNamespace:
    """The given code as the probe's module (its logging goes nowhere)."""
    def quiet(fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            with contextlib.redirect_stdout(io.StringIO()):
                return fn(*args)
        return run
    return types.SimpleNamespace(forward=quiet(forward), masked_loss=quiet(masked_loss))


def expected(reference: Any, name: str, args: Sequence[Any]) -> torch.Tensor:
    """What the given code returns, eagerly, for ``args``."""
    return probe.eager(reference, name, args)


def same_values(got: Any, want: torch.Tensor, where: str) -> None:
    rtol, atol = TOL.get(want.dtype, (1e-5, 1e-6))
    expect_same(got, want, where, rtol=rtol, atol=atol)


def describe(name: str, args: Sequence[Any]) -> str:
    shapes = ", ".join(f"{tuple(a.shape)}" if isinstance(a, torch.Tensor) else repr(a) for a in args)
    dtype = next(str(a.dtype).removeprefix("torch.") for a in args if isinstance(a, torch.Tensor))
    return f"{name}({shapes}) in {dtype}"


def check_eager(student: Student, reference: Any, name: str, args: Sequence[Any], where: str) -> None:
    """``name(*args)`` called directly (no compiler) equals the legacy code's value; no input changed.

    The tensors are in this process's memory (:meth:`Student.share`): an input
    written in place is seen here, not reported.
    """
    shared = [student.share(a) if isinstance(a, torch.Tensor) else a for a in args]
    got = student.probe("compile_clean:eager", name, shared)
    same_values(got, expected(reference, name, args), f"{where}: {describe(name, args)}")
    for i, (before, after) in enumerate(zip(args, shared)):
        if isinstance(before, torch.Tensor) and not torch.equal(before.nan_to_num(), after.read().nan_to_num()):
            raise CheckFailed(f"{where}: {describe(name, args)} changed its argument {i + 1} in place")


# ---------------------------------------------------------------------------------------------
# The static reading of the solution cells
# ---------------------------------------------------------------------------------------------


def static_problems(sources: Sequence[str]) -> list[str]:
    """What the solution cells do that the specification rules out (each as ``line N: ...``)."""
    problems: list[str] = []
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            problems.append(f"line {exc.lineno}: the cell does not parse ({exc.msg})")
            continue
        # torch.compiler.is_compiling() is allowed (it hides nothing: the eager results are graded too)
        allowed = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "is_compiling"
                   and isinstance(n.value, ast.Attribute) and n.value.attr == "compiler"}
        for node in ast.walk(tree):
            line = getattr(node, "lineno", "?")
            if id(node) in allowed:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name not in ALLOWED_IMPORTS:
                        problems.append(f"line {line}: imports {alias.name} (allowed: {', '.join(ALLOWED_IMPORTS)})")
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    if module not in ALLOWED_IMPORTS or (full not in ALLOWED_IMPORTS and
                                                         (alias.name in FORBIDDEN_ATTRIBUTES or
                                                          alias.name.startswith("_") or alias.name == "*")):
                        problems.append(f"line {line}: imports {full} (allowed: {', '.join(ALLOWED_IMPORTS)})")
            elif isinstance(node, ast.Attribute):
                if node.attr.startswith("_"):
                    problems.append(f"line {line}: uses the private attribute .{node.attr}")
                elif node.attr in FORBIDDEN_ATTRIBUTES:
                    problems.append(f"line {line}: uses .{node.attr}")
            elif isinstance(node, ast.Name):
                if node.id.startswith("__") or node.id in FORBIDDEN_NAMES:
                    problems.append(f"line {line}: uses {node.id}")
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                problems.append(f"line {line}: uses {type(node).__name__.lower()} state")
    return list(dict.fromkeys(problems))


def check_static(student: Student) -> None:
    """Fail unless the solution cells keep the specification's rules (read here, never run here)."""
    problems = static_problems([source for _, source in student.parts])
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise CheckFailed("your solution cells break the rules of the specification (the graph counts are taken in "
                          f"your process, so the grader reads your code first): {shown}")


# ---------------------------------------------------------------------------------------------
# Compiled runs
# ---------------------------------------------------------------------------------------------


def _breaks(student: Student, name: str, args: Sequence[Any]) -> str:
    """Where Dynamo breaks the graph of ``name`` on ``args``, from torch._dynamo.explain in the student's process."""
    try:
        report = student.probe("compile_clean:explain", name, list(args))
    except CheckFailed:
        return ""
    reasons = report.get("reasons", []) if isinstance(report, dict) else []
    lines = [f"{r.get('reason', '')} (at: {r.get('line', '')})" for r in reasons[:3] if isinstance(r, dict)]
    return (" torch._dynamo.explain: " + "; ".join(lines)) if lines else ""


def check_compiled(student: Student, reference: Any, name: str, calls: Sequence[Sequence[Any]], where: str, *,
                   max_graphs: int, dynamic: bool | None = None,
                   mark_dynamic: Sequence[Sequence[int]] | None = None, symbolic: bool = False) -> dict[str, Any]:
    """Compile ``name`` in the student's process, call it on ``calls``; fail unless it behaved.

    Every call ran (no graph break under ``fullgraph=True``, no refused
    dynamic dimension), returned the legacy code's value, the backend got at
    most ``max_graphs`` graphs and Dynamo's counters say the same, each graph
    holds the function's work and no user function, and (``symbolic``) the
    graphs have symbolic sizes.
    """
    report = student.probe("compile_clean:compiled", name, [list(c) for c in calls], dynamic=dynamic,
                           mark_dynamic=[list(d) for d in mark_dynamic] if mark_dynamic else None)
    if not isinstance(report, dict) or not {"outputs", "error", "graphs", "counters"} <= set(report):
        raise CheckFailed(f"{where}: the probe's report is incomplete (your code interfered with it)")
    graphs, counters, error = report["graphs"], report["counters"], report["error"]
    if not isinstance(graphs, list) or not isinstance(counters, dict) or not all(isinstance(g, dict) for g in graphs):
        raise CheckFailed(f"{where}: the probe's report is malformed (your code interfered with it)")
    if error is not None:
        failed = report.get("failed_call")
        shape_note = ""
        if isinstance(failed, int) and 0 <= failed < len(calls):
            shape_note = f" at call {failed + 1} ({describe(name, calls[failed])})"
        hint = _breaks(student, name, calls[failed if isinstance(failed, int) and 0 <= failed < len(calls) else 0]) \
            if "Constraint" not in str(error) else (" (a dimension marked dynamic was specialised to a constant: "
                                                    "your code used its size as a Python number)")
        raise CheckFailed(f"{where}: torch.compile(fullgraph=True) failed{shape_note}: {error}.{hint}")
    outputs = report["outputs"]
    if not isinstance(outputs, list) or len(outputs) != len(calls):
        raise CheckFailed(f"{where}: the probe returned {len(outputs) if isinstance(outputs, list) else 'no'} "
                          f"results for {len(calls)} calls (your code interfered with it)")
    for i, (args, got) in enumerate(zip(calls, outputs)):
        same_values(got, expected(reference, name, args), f"{where}, compiled, call {i + 1}: {describe(name, args)}")
    n = len(graphs)
    if counters.get("unique_graphs") != n or counters.get("graph_breaks") != 0:
        raise CheckFailed(f"{where}: the compiler's backend received {n} graph(s) but Dynamo's counters say "
                          f"{counters.get('unique_graphs')} graph(s) and {counters.get('graph_breaks')} break(s): "
                          "the two counts must agree (does your code change torch._dynamo?)")
    if n == 0:
        raise CheckFailed(f"{where}: nothing was compiled (the function ran without a graph)")
    if n > max_graphs:
        raise CheckFailed(f"{where}: {n} compilations for {len(calls)} calls, at most {max_graphs} allowed: each new "
                          "shape was traced again (a Python number taken from a size, a loop over a dimension)")
    for g in graphs:
        foreign = g.get("foreign")
        if foreign:
            raise CheckFailed(f"{where}: the graph calls your own function(s) {foreign} as single nodes "
                              "(allow_in_graph hides what it does from the compiler)")
        ops = g.get("operations")
        if not isinstance(ops, int) or ops < MIN_OPERATIONS[name]:
            raise CheckFailed(f"{where}: a graph holds {ops} operations, fewer than the function's tensor work "
                              f"(at least {MIN_OPERATIONS[name]})")
        if symbolic and g.get("symbolic") is not True:
            raise CheckFailed(f"{where}: a graph was compiled for fixed sizes although the sizes were marked dynamic")
    return report
