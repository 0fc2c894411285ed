"""The checker's side of the ``compile_clean`` exercise: inputs, expected values and the verdicts.

The student rewrites the given (legacy) ``forward`` and ``masked_loss`` so that ``torch.compile`` captures
them in one graph and does not recompile for every batch size.  The expected values are the legacy code's,
run here in eager mode (the legacy code is the specification: the rewrite must compute the same thing).

**What runs where.**  The cells are never run as they are: :func:`dlperf.grading.probes.compile_clean.definitions`
keeps only their imports, function definitions and literal constants (every other line blank), and that is
what a host loads (:func:`student`).

* Part 1 (eager values) calls the functions directly in a host, on tensors in this process's memory
  (:meth:`Student.share`: an input changed in place is seen here, not reported), and once on the ``meta``
  device (a tensor created without ``device=`` shows there).
* Parts 2-4 first read the cells here (:func:`check_reading`: the loading's findings and the allow-list
  :data:`~dlperf.grading.probes.compile_clean.RULES`; a refused cell is never loaded for these parts), then
  load the definitions into a fresh host where no statement of the cells runs: the first code of the
  student's that executes there is traced by Dynamo under ``fullgraph=True``, started by the probe, and
  never runs as Python (a graph break or the recompilation limit is an error, not a fallback).  The host
  sends back each captured graph as plain data (targets as strings, input sizes with their symbols, which
  nodes read tensor data) and the outputs; everything is decided here: the graph rules
  (:func:`~dlperf.grading.probes.compile_clean.graph_problems`: one graph per compilation, Dynamo's counters
  agreeing with the graphs received, no host read, no opaque user function, symbolic sizes where marked, every
  call admitted by a graph compiled by then -- the count checked against the sizes of the calls this side
  made), the work (:func:`work_problems`: the graph's matrix products and reductions against this process's
  own compile of the given code) and every result against the given code's value computed here.

**What remains.**  The host runs the probe and Dynamo: a student's function is only traced there, so its code
cannot reach the counters unless Dynamo executes it natively, which ``fullgraph=True`` and the configuration
rule out for the constructs the reading allows.  The eager part runs the functions natively (its values and
the shared memory are what count).
"""

from __future__ import annotations

import contextlib
import io
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from autograder.trusted import CheckFailed, Student, expect_same, seed, solution_parts
from dlperf.grading.probes import compile_clean as probe

__all__ = [
    "STEP_MARKS",
    "check_compiled",
    "check_device",
    "check_eager",
    "check_reading",
    "check_shapes",
    "expected",
    "given_families",
    "legacy",
    "make_case",
    "parts",
    "student",
]

TOL = {torch.float32: (1e-5, 1e-6), torch.float64: (1e-10, 1e-12)}
# The dimensions marked dynamic in part 4, per argument position: batch and time of x and target, batch of lengths.
MARKS = {"step": [[0, 1], [], [], [], [], [], [0, 1], [0]], "forward": [[0, 1]], "masked_loss": [[0, 1], [0, 1], [0]]}
STEP_MARKS = MARKS["step"]


# ---------------------------------------------------------------------------------------------
# Inputs and expected values
# ---------------------------------------------------------------------------------------------


def make_case(case: Any, B: int, T: int, D: int = 6, H: int = 16, K: int = 3, *, dtype: torch.dtype = torch.float32,
              max_norm: float = 3.0, padding: float | None = None, dead: bool = False) -> dict[str, Any]:
    """The arguments of one call of each function, random from the submission's seed for ``case``.

    ``x``: (B, T, D), ``target``: (B, T, K), ``lengths``: (B,) int64 in [1, T]
    with T itself among them when B > 1. ``padding``: a value written into
    ``pred`` and ``target`` at every time step past a sequence's length
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
    return types.SimpleNamespace(forward=quiet(forward), masked_loss=quiet(masked_loss),
                                 originals=types.SimpleNamespace(forward=forward, masked_loss=masked_loss))


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


# ---------------------------------------------------------------------------------------------
# The cells: read here, loaded there
# ---------------------------------------------------------------------------------------------


def parts(*objects: Any) -> list[tuple[str, str]]:
    """The cells that define ``objects`` (their whole source, as submitted)."""
    return solution_parts(*objects)


def student(*objects: Any, cells: Sequence[tuple[str, str]] | None = None, **options: Any) -> Student:
    """A host with the cells' definitions only (:func:`probe.definitions`): no other statement of theirs runs."""
    return Student(parts=probe.definitions(cells if cells is not None else parts(*objects)), **options)


def check_reading(cells: Sequence[tuple[str, str]]) -> None:
    """Fail unless the cells keep the rules (read here, never run here; the self-check reads them the same way)."""
    found = probe.refusals(cells)
    if found:
        shown = "\n  - ".join(found[:6]) + (f"\n  ... and {len(found) - 6} more" if len(found) > 6 else "")
        raise CheckFailed("the grader compiles only cells that keep the rules of the specification (it runs "
                          f"nothing else of them), and refuses in yours:\n  - {shown}")


# ---------------------------------------------------------------------------------------------
# Part 1: eager
# ---------------------------------------------------------------------------------------------


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


def check_device(student: Student, reference: Any, name: str, args: Sequence[Any]) -> None:
    """``name`` on inputs on the ``meta`` device returns a tensor there, of the given code's shape and dtype."""
    want = expected(reference, name, args)
    problem = probe.device_problem(student.probe("compile_clean:on_meta", name, list(args)), want.shape, want.dtype)
    if problem:
        raise CheckFailed(f"{describe(name, args)} {problem}")


# ---------------------------------------------------------------------------------------------
# Parts 2-4: compiled runs, decided here on what the host sends back
# ---------------------------------------------------------------------------------------------

_given_families: dict[str, dict[str, int]] = {}


def given_families(reference: Any, name: str) -> dict[str, int]:
    """The families of work in this process's own compile of the given code (graph breaks allowed)."""
    if name not in _given_families:
        originals = getattr(reference, "originals", reference)
        args = make_case(("given", name), 4, 5)[name]
        graphs: list[dict[str, Any]] = []
        fn = probe.function(originals, name)
        probe._reset()
        try:
            # item captured as a node: a break inside the given loop would make Dynamo skip the whole frame
            with probe._quiet(), torch._dynamo.config.patch(capture_scalar_outputs=True):
                torch.compile(fn, backend=probe.record(graphs))(*args)
        finally:
            probe._reset()
        total = probe.families([])
        for g in graphs:
            for family, count in probe.families(g["nodes"]).items():
                total[family] = total.get(family, 0) + count
        _given_families[name] = total
    return _given_families[name]


def _explained(student: Student, name: str, args: Sequence[Any]) -> str:
    """Where Dynamo breaks the graph (torch._dynamo.explain in the host, after the verdict: a hint only)."""
    try:
        report = student.probe("compile_clean:explain", name, list(args))
    except CheckFailed:
        return ""
    reasons = report.get("reasons", []) if isinstance(report, dict) else []
    lines = [f"{r.get('reason', '')} (at: {r.get('line', '')})" for r in reasons[:3] if isinstance(r, dict)]
    return (" torch._dynamo.explain: " + "; ".join(lines)) if lines else ""


def check_compiled(student: Student, reference: Any, name: str, calls: Sequence[Sequence[Any]], where: str, *,
                   max_graphs: int, dynamic: bool | None = None, mark_dynamic: Sequence[Sequence[int]] | None = None,
                   host_reads: bool = True) -> dict[str, Any]:
    """Compile ``name`` in the host, call it on ``calls``; fail unless the graphs and results keep the rules."""
    report = student.probe("compile_clean:compiled", name, [list(c) for c in calls], dynamic=dynamic,
                           mark_dynamic=[list(d) for d in mark_dynamic] if mark_dynamic else None,
                           stop_after=max_graphs)
    problems = probe.graph_problems(report, probe.shapes_of(calls), max_graphs=max_graphs, marked=mark_dynamic,
                                    host_reads=host_reads)
    if isinstance(report, dict) and report.get("error") is not None:
        failed = report.get("failed_call")
        index = failed if isinstance(failed, int) and 0 <= failed < len(calls) else 0
        hint = (" (a dimension marked dynamic was specialised to a constant: your code used its size as a Python "
                "number)") if "Constraint" in str(report["error"]) else _explained(student, name, calls[index])
        raise CheckFailed(f"{where}: at call {index + 1} ({describe(name, calls[index])}) {problems[0]}.{hint}")
    if problems:
        raise CheckFailed(f"{where}: " + "; ".join(problems))
    outputs = report["outputs"]
    if not isinstance(outputs, list) or len(outputs) != len(calls):
        raise CheckFailed(f"{where}: {len(outputs) if isinstance(outputs, list) else 'no'} results for {len(calls)} "
                          "calls")
    for i, (args, got) in enumerate(zip(calls, outputs)):
        same_values(got, expected(reference, name, args), f"{where}, compiled, call {i + 1}: {describe(name, args)}")
    need = given_families(reference, name) if name != "step" else {
        k: given_families(reference, "forward").get(k, 0) + given_families(reference, "masked_loss").get(k, 0)
        for k in probe.families([])}
    for g in report["graphs"]:
        lacking = probe.work_problems(g, need)
        if lacking:
            raise CheckFailed(f"{where}: " + "; ".join(lacking))
    return report


def check_shapes(cells: Sequence[tuple[str, str]], reference: Any, shapes: Sequence[tuple[int, int]], key: str,
                 where: str, *, max_graphs: int, marked: bool) -> None:
    """The step over ``shapes`` (default policy, or batch and time marked dynamic): at most ``max_graphs``.

    The step needs both functions to compile with ``fullgraph=True`` (the exercise states it: a part that
    counts compilations cannot count those of a function that does not compile; judging the other function
    alone would give a break in a function that also recompiles more points than the recompilation alone).
    Host reads are part 2's rule, not counted here.
    """
    check_reading(cells)
    calls = [make_case((key, i), B, T)["step"] for i, (B, T) in enumerate(shapes)]
    with student(cells=cells) as host:
        check_compiled(host, reference, "step", calls, where, max_graphs=max_graphs,
                       mark_dynamic=MARKS["step"] if marked else None, host_reads=False)
