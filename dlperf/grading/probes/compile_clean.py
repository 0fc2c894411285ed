"""The ``compile_clean`` exercise's public side: the rules of the cells, the probe that compiles them, and the
rules a captured graph must keep (the self-check and the grader apply the same code).

**What the grader runs, and where.**  The grader never runs the cells as they are.  It extracts from them
(:func:`definitions`) only the imports, the function definitions and constants written as plain literals, and
loads that into a fresh process of its own: no statement of the cells runs there, so the first line of
your code that ever executes in that process is traced by TorchDynamo, under ``torch.compile(fullgraph=True)``
started by :func:`compiled`.  With ``fullgraph=True`` your functions never run as Python there: Dynamo
traces them into one FX graph, and every call runs that graph.  The backend (:func:`record`) turns each
graph into plain data -- each node's kind and target as a string, the sizes of its inputs (a number, or a
symbol when the size is symbolic), which nodes read a value out of a tensor's data -- and the grader
decides from that data, with the rules below (:func:`graph_problems`), and compares every result with
the given code's, which it computes itself.

**The rules of the cells** (:data:`RULES`, read by :func:`refusals`, an allow-list: what is not named is
refused): imports of ``torch``, ``torch.nn``, ``torch.nn.functional`` and ``math`` only; the tensor
functions and methods the given code needs and their usual alternatives; no ``print``, no ``.numpy()``
(host reads such as ``.item()``, ``int(t)`` or ``torch.nonzero`` are judged in the graph, where every
spelling shows the same way), nothing of ``torch.compile``,
``torch._dynamo``, ``torch.jit``; no decorator, no class; a default value or an annotation of a function
is a constant or a name (it is evaluated when the cell is loaded); a name your functions use is defined
by an import, a function or a constant of the same cells (a statement of another kind is not loaded).

**The rules of a graph** (:func:`graph_problems`): under ``fullgraph=True`` no graph break (it is an
error); as many compilations as the part allows, and Dynamo's own counters agree with the backend;
no node that reads a tensor's data into Python (``item``, ``_local_scalar_dense``, ``tolist``,
``nonzero``, any operation whose result has a size taken from the data: ``int(t)``, ``float(t)`` and
``t.item()`` all compile into such a node); no function of yours called as one opaque node; where
dimensions were marked dynamic, those sizes are symbolic; and every call is served by a graph whose
sizes admit it.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import io
import logging
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._dynamo  # noqa: F401 - imported with the probe (a warm kernel or check run pays it before a submission)

from dlperf.grading.reading import Rules, cells_of, findings_case, read

__all__ = ["FUNCTIONS", "HOST_READS", "RULES", "compiled", "definitions", "device_problem", "eager", "explain", "function",
           "graph_problems", "on_meta", "reading_case", "record", "refusals", "shapes_of", "step", "work_problems"]

FUNCTIONS = ("forward", "masked_loss", "step")

# ---------------------------------------------------------------------------------------------
# The rules of the two cells (public: the self-check reads your cells with exactly these)
# ---------------------------------------------------------------------------------------------

_HOST_READ = "a NumPy array is a host copy of the tensor: keep it a tensor"
_COMPILER = ("the grader compiles your functions itself: experiment with the compiler in cells of your own, "
             "not in these two")

_TORCH = {
    # what the given code uses
    "relu", "matmul", "norm", "clamp_min", "where", "arange", "zeros", "zeros_like",
    # the usual alternatives
    "einsum", "mm", "bmm", "addmm", "baddbmm", "tensordot", "inner", "clamp", "clamp_max", "clip", "minimum",
    "maximum", "min", "max", "amax", "amin", "sum", "mean", "nansum", "nanmean", "square", "sqrt", "rsqrt", "pow",
    "abs", "mul", "multiply", "div", "divide", "true_divide", "add", "sub", "subtract", "neg", "reciprocal",
    "exp", "log", "sign", "lt", "le", "gt", "ge", "eq", "ne", "less", "greater", "logical_and", "logical_or",
    "logical_not", "isfinite", "isnan", "isinf", "nan_to_num", "masked_fill", "count_nonzero", "cumsum",
    "ones", "ones_like", "full", "full_like", "empty", "empty_like", "tensor", "as_tensor", "stack", "cat",
    "unsqueeze", "squeeze", "reshape", "broadcast_to", "flatten", "transpose", "permute", "finfo", "iinfo",
    "sigmoid", "tanh", "dot", "outer", "diagonal", "nonzero", "masked_select", "unique", "argwhere",
    "Tensor", "Size", "dtype", "device", "float32", "float64", "float16", "bfloat16", "float", "double", "half",
    "int64", "int32", "long", "int", "bool", "inf", "nan", "e", "pi",
}
_FUNCTIONAL = {"relu", "linear", "normalize", "mse_loss", "pad", "threshold", "hardtanh", "relu6"}
_METHODS = {
    # sizes and types
    "shape", "size", "dim", "ndim", "numel", "dtype", "device", "is_floating_point", "T", "mT",
    # arithmetic, comparisons, reductions
    "matmul", "mm", "bmm", "norm", "clamp", "clamp_min", "clamp_max", "clip", "relu", "square", "sqrt", "rsqrt",
    "pow", "abs", "neg", "reciprocal", "exp", "log", "sign", "mul", "div", "add", "sub", "sum", "mean", "nansum",
    "nanmean", "amax", "amin", "max", "min", "maximum", "minimum", "lt", "le", "gt", "ge", "eq", "ne",
    "logical_and", "logical_or", "logical_not", "isfinite", "isnan", "isinf", "nan_to_num", "where", "masked_fill",
    "count_nonzero", "cumsum", "sigmoid", "tanh", "dot", "any", "all", "values", "indices",
    # building and reshaping
    "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor", "to", "type_as", "float", "double", "half",
    "long", "int", "bool", "unsqueeze", "squeeze", "view", "view_as", "reshape", "reshape_as", "expand",
    "expand_as", "flatten", "transpose", "permute", "contiguous", "clone", "diagonal",
    # in place, on tensors of the function's own (an input changed in place is caught by the values)
    "masked_fill_", "clamp_", "clamp_min_", "clamp_max_", "mul_", "div_", "add_", "sub_", "zero_", "fill_",
    "relu_", "square_", "sqrt_", "nan_to_num_", "unsqueeze_", "squeeze_",
    # host reads: allowed by the reading (your functions are only traced), judged in the graph (part 2)
    "item", "tolist", "cpu", "nonzero", "masked_select", "unique", "argwhere",
    # what torch.finfo / torch.iinfo give
    "eps", "tiny", "smallest_normal", "resolution", "bits",
}

RULES = Rules(
    what="forward and masked_loss",
    imports={"torch", "torch.nn", "torch.nn.functional", "math"},
    names={"math.*", "torch.compiler.is_compiling", "torch.linalg.norm", "torch.linalg.vector_norm",
           "torch.nn.functional", *(f"torch.{n}" for n in _TORCH),
           *(f"torch.nn.functional.{n}" for n in _FUNCTIONAL)},
    builtins={"len", "range", "int", "float", "bool", "min", "max", "abs", "round", "pow", "isinstance", "tuple",
              "list", "zip", "enumerate", "sum", "slice", "Ellipsis", "ValueError", "TypeError", "RuntimeError",
              "AssertionError", "NotImplementedError"},
    attributes=_METHODS,
    decorators=set(),
    classes=False,
    explain={
        ".numpy": _HOST_READ, ".data_ptr": "not needed here",
        "torch.compile": _COMPILER, "torch.compiler": _COMPILER, "torch._dynamo": _COMPILER, "torch.jit": _COMPILER,
        "torch.fx": _COMPILER, "torch.export": _COMPILER,
    },
)

_INERT = (ast.Constant, ast.Name, ast.Attribute, ast.Load, ast.UnaryOp, ast.BinOp, ast.Tuple, ast.List,
          ast.Subscript, ast.Slice, ast.operator, ast.unaryop, ast.Starred)


def _inert(node: ast.AST | None) -> bool:
    """An expression that calls nothing (constants, names, attribute chains, operators on them)."""
    return node is None or all(isinstance(n, _INERT) for n in ast.walk(node))


def _loaded(node: ast.stmt) -> bool:
    """Whether a top-level statement is loaded by the grader: imports, definitions, literal constants."""
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
        return True     # a decorator or a class is refused by the reading, and refused cells are not compiled
    if isinstance(node, ast.Assign):
        return all(isinstance(t, ast.Name) for t in node.targets) and _inert(node.value)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.value is not None and _inert(node.value) \
            and _inert(node.annotation)
    return False


def _split(source: str) -> tuple[ast.Module | None, list[bool]]:
    """The cell parsed, and for each line whether it belongs to a statement the grader loads."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None, []
    n = len(source.splitlines())
    keep, dropped = [False] * n, [False] * n
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        flags = keep if _loaded(node) else dropped
        for i in range(start - 1, (node.end_lineno or node.lineno)):
            if i < n:
                flags[i] = True
    # a loaded statement that shares a line with one that is not (``import torch; print(1)``) is not loaded
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        lines = range(start - 1, min(n, node.end_lineno or node.lineno))
        if _loaded(node) and any(dropped[i] for i in lines):
            for i in lines:
                keep[i] = False
    return tree, keep


def definitions(parts: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The cells as the grader loads them: only imports, function definitions and literal constants.

    Every other line is blank (line numbers stay those of the cell), so no statement of the cells runs
    when they are loaded: test code, prints, assignments that call something stay in the notebook.
    """
    out = []
    for filename, source in parts:
        tree, keep = _split(source)
        if tree is None:
            out.append((filename, source))      # the reading reports it; loading it fails
            continue
        lines = source.splitlines(True)
        out.append((filename, "".join(line if k else ("\n" if line.endswith("\n") else "")
                                      for line, k in zip(lines, keep))))
    return out


def _names_loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _names_bound(node: ast.AST) -> set[str]:
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out.update((a.asname or a.name).split(".")[0] for a in n.names)
    return out


def _loading_findings(parts: Sequence[tuple[str, str]]) -> list[str]:
    """What the loading itself refuses: a definition whose loading would run code, a name bound only by
    a statement the grader does not load."""
    found: list[str] = []
    kept_nodes, dropped_nodes = [], []
    for number, (_, source) in enumerate(parts, 1):
        where = f"cell {number}" if len(parts) > 1 else "your cell"
        tree, keep = _split(source)
        if tree is None:
            continue
        lines = source.splitlines()
        for node in tree.body:
            loaded = keep[node.lineno - 1] if node.lineno - 1 < len(keep) else False
            (kept_nodes if loaded else dropped_nodes).append((where, lines, node))
            if not (loaded and isinstance(node, ast.FunctionDef)):
                continue
            args = node.args
            evaluated = [*args.defaults, *[d for d in args.kw_defaults if d is not None], node.returns,
                         *[a.annotation for a in [*args.posonlyargs, *args.args, *args.kwonlyargs,
                                                  *([args.vararg] if args.vararg else []),
                                                  *([args.kwarg] if args.kwarg else [])]]]
            for expr in evaluated:
                if not _inert(expr):
                    text = lines[expr.lineno - 1].strip() if 0 < expr.lineno <= len(lines) else ""
                    found.append(f"{where}, line {expr.lineno} (`{text[:70]}`): a default value or annotation of "
                                 f"{node.name} calls something, which would run when the cell is loaded (use a "
                                 "constant, or compute it inside the function)")
    defined = set().union(*[_names_bound(n) for _, _, n in kept_nodes]) if kept_nodes else set()
    used = set().union(*[_names_loaded(n) for _, _, n in kept_nodes]) if kept_nodes else set()
    for where, lines, node in dropped_nodes:
        missing = sorted((_names_bound(node) & used) - defined)
        if missing:
            text = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
            found.append(f"{where}, line {node.lineno} (`{text[:70]}`): defines {', '.join(missing)}, which your "
                         "functions use, with a statement the grader does not run (it loads only imports, function "
                         "definitions and constants written as literals): compute it inside the function")
    return list(dict.fromkeys(found))


def refusals(parts: Sequence[tuple[str, str]]) -> list[str]:
    """Everything the grader refuses in the cells ``parts``: the loading's findings, then the reading's
    (:data:`RULES`, of the cells as the grader loads them).  ``[]`` when nothing is refused."""
    return list(dict.fromkeys(_loading_findings(parts) + read(definitions(parts), RULES)))


def reading_case(*objects: Any) -> Callable[[], tuple[Any, Any, bool]]:
    """A :class:`~dlperf.grading.SelfCheck` case: :func:`refusals` of the cells that define ``objects``."""
    return findings_case(lambda: refusals(cells_of(*objects)))


# ---------------------------------------------------------------------------------------------
# The functions and the probe
# ---------------------------------------------------------------------------------------------


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


def on_meta(mod: Any, name: str, args: Sequence[Any]) -> dict[str, Any]:
    """One call on the ``meta`` device (tensors with sizes but no data): where the result lives.

    A tensor created without ``device=`` lands on the CPU and meets the inputs' device in an operation:
    on a GPU that is an error or a copy every step, here an error.
    """
    meta = [a.to("meta") if isinstance(a, torch.Tensor) else a for a in args]
    try:
        out = function(mod, name)(*meta)
    except Exception as exc:  # noqa: BLE001 - reported as data
        return {"error": _first_line(exc)}
    if not isinstance(out, torch.Tensor):
        return {"error": f"returned {type(out).__name__}, not a tensor"}
    return {"error": None, "device": str(out.device), "shape": list(out.shape), "dtype": str(out.dtype)}


def device_problem(report: Any, shape: Sequence[int], dtype: torch.dtype) -> str | None:
    """What an :func:`on_meta` report shows about devices (None: nothing).  An error that is not about
    devices (a value read on the meta device, which has none) is not judged here: the values are."""
    if not isinstance(report, dict):
        return "no report"
    error = report.get("error")
    if error:
        return (f"with its inputs on another device (meta) it failed: {error}. Create every tensor on the inputs' "
                "device (device=pred.device): on a GPU this is the same error") if "device" in str(error) else None
    got = (report.get("device"), report.get("shape"), report.get("dtype"))
    if got != ("meta", list(shape), str(dtype)):
        return (f"with its inputs on the meta device it returned a tensor on {got[0]} of shape {got[1]} and "
                f"{got[2]}, expected meta, {list(shape)}, {dtype}")
    return None


# Targets a graph may call: PyTorch's own functions and Python's operators (``x.shape[0] * 2`` on sizes).
_OPERATOR_MODULES = ("torch", "_operator", "operator", "math", "builtins", "_tensor")

# Nodes that read a tensor's data into Python (by target), besides any node whose result has a size or a
# value that Dynamo could only take from the data (an unbacked symbol).
HOST_READS = frozenset({
    "Tensor.item", "Tensor.tolist", "Tensor.numpy", "Tensor.cpu", "Tensor.nonzero", "Tensor.argwhere",
    "Tensor.masked_select", "Tensor.unique", "Tensor.__bool__", "Tensor.__int__", "Tensor.__float__",
    "Tensor.__index__", "torch.nonzero", "torch.argwhere", "torch.masked_select", "torch.unique",
    "torch.ops.aten._local_scalar_dense.default", "torch.ops.aten.nonzero.default", "torch.ops.aten.item.default",
})


def target_name(node: torch.fx.Node) -> str:
    """A node's target as a string: ``Tensor.norm`` (a method), ``torch.relu``, ``_operator.matmul``, ..."""
    target = node.target
    if node.op == "call_method":
        return f"Tensor.{target}"
    if node.op in ("call_module", "get_attr"):
        return f"{node.op}:{target}"
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.{target}"
    module = getattr(target, "__module__", None) or ""
    name = getattr(target, "__name__", None) or getattr(target, "__qualname__", None) or repr(target)
    if module == "torch._C._VariableFunctions" or (module == "torch" and "_VariableFunctions" in
                                                   (getattr(target, "__qualname__", "") or "")):
        module = "torch"
    return f"{module}.{name}" if module else str(name)


def _unbacked(value: Any) -> bool:
    try:
        from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

        return bool(free_unbacked_symbols(value))
    except Exception:  # noqa: BLE001 - a value that holds no symbol
        return False


def _size(s: Any) -> int | str:
    if isinstance(s, torch.SymInt):
        try:
            return int(str(s.node.expr)) if str(s.node.expr).lstrip("-").isdigit() else str(s.node.expr)
        except Exception:  # noqa: BLE001
            return str(s)
    return int(s)


def _source(node: torch.fx.Node) -> str:
    arg = node.meta.get("grapharg")
    source = getattr(arg, "source", None)
    name = getattr(source, "name", "") if source is not None else ""
    return str(name() if callable(name) else name)[:200]


def describe(gm: torch.fx.GraphModule, parameters: Sequence[str], call: int) -> dict[str, Any]:
    """One FX graph as plain data: its inputs (argument position, kind, sizes), its nodes (kind, target,
    whether its value depends on a size or number read from the data) and the call that compiled it."""
    inputs, nodes = [], []
    unbacked_nodes: set[str] = set()
    for node in gm.graph.nodes:
        value = node.meta.get("example_value")
        if node.op == "placeholder":
            source = _source(node)
            position = None
            for i, p in enumerate(parameters):
                if source == f"L['{p}']":
                    position = i
            entry: dict[str, Any] = {"source": source, "position": position}
            if isinstance(value, torch.Tensor):
                entry.update(kind="tensor", shape=[_size(s) for s in value.shape], dtype=str(value.dtype))
            elif isinstance(value, torch.SymInt):
                entry.update(kind="size", expr=str(value))
            else:
                entry.update(kind=type(value).__name__)
            inputs.append(entry)
            continue
        if node.op == "output":
            continue
        data = _unbacked(value)
        if data:
            unbacked_nodes.add(node.name)
        produced = data and not any(isinstance(a, torch.fx.Node) and a.name in unbacked_nodes
                                    for a in node.all_input_nodes)
        nodes.append({"op": node.op, "target": target_name(node), "from_data": produced})
        if len(nodes) >= 4000:
            break
    return {"call": call, "inputs": inputs, "nodes": nodes}


def record(graphs: list[dict[str, Any]], parameters: Sequence[str] = (),
           current: list[int] | None = None) -> Callable[..., Any]:
    """A backend that appends :func:`describe` of each graph to ``graphs`` and runs the graph unchanged."""
    def recording_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        graphs.append(describe(gm, parameters, current[0] if current else 0))
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
    torch.compiler.reset()
    torch._dynamo.utils.counters.clear()


def _counters() -> dict[str, int]:
    counters = torch._dynamo.utils.counters
    return {"unique_graphs": int(counters["stats"]["unique_graphs"]),
            "graph_breaks": int(sum(counters["graph_break"].values()))}


def _parameters(fn: Callable[..., Any]) -> list[str]:
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def compiled(mod: Any, name: str, calls: Sequence[Sequence[Any]], *, dynamic: bool | None = None,
             mark_dynamic: Sequence[Sequence[int]] | None = None, stop_after: int | None = None) -> dict[str, Any]:
    """Compile ``name`` once (``fullgraph=True``, the recording backend) and call it with each ``calls[i]``.

    ``dynamic``: ``torch.compile``'s shape policy.  ``mark_dynamic``: for each argument position, the
    dimensions marked dynamic (``torch._dynamo.mark_dynamic``) before each call, as a training loop with
    varying batch sizes would.  Dynamo may not fall back to running the function as Python (the
    recompilation limit is an error).  Returns ``outputs`` (one per call that ran), ``error`` (what the first
    call that failed raised, or None), ``failed_call`` (its index), ``graphs`` (:func:`describe` of each
    compilation) and ``counters`` (Dynamo's own).  ``stop_after``: stop calling once more than that many
    graphs were compiled (the verdict is known; the remaining calls would only recompile).  The compile caches
    are emptied before and after.
    """
    graphs: list[dict[str, Any]] = []
    outputs: list[Any] = []
    error, failed = None, None
    current = [0]
    _reset()
    try:
        target = function(mod, name)
        backend = record(graphs, _parameters(target), current)
        fn = torch.compile(target, backend=backend, fullgraph=True, dynamic=dynamic)
        with _quiet(), torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, suppress_errors=False):
            for i, args in enumerate(calls):
                current[0] = i
                args = list(args)
                for position, dims in enumerate(mark_dynamic or ()):
                    for dim in dims:
                        torch._dynamo.mark_dynamic(args[position], dim)
                try:
                    outputs.append(fn(*args))
                except Exception as exc:  # noqa: BLE001 - what Dynamo refused, reported as data
                    error, failed = _first_line(exc), i
                    break
                if stop_after is not None and len(graphs) > stop_after:
                    break
        counts = _counters()
    finally:
        _reset()
    return {"outputs": outputs, "error": error, "failed_call": failed, "graphs": graphs, "counters": counts}


def explain(mod: Any, name: str, args: Sequence[Any]) -> dict[str, Any]:
    """``torch._dynamo.explain`` of one call of ``name``: graphs, breaks, and each break's reason and line.

    (It runs the function as Python between the graphs: the grader asks for it only to explain a failure.)
    """
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


# ---------------------------------------------------------------------------------------------
# The rules of a graph, on plain data (what the grader received, or what the self-check's probe saw)
# ---------------------------------------------------------------------------------------------

# The function's work by families of spellings: a graph must hold at least as many matrix products as the
# given code does (two layers) and a reduction where the given code reduces.
_FAMILIES = {
    "matrix product": {"_operator.matmul", "torch.matmul", "Tensor.matmul", "torch.mm", "Tensor.mm", "torch.bmm",
                       "Tensor.bmm", "torch.functional.einsum", "torch.einsum", "torch._C._nn.linear",
                       "torch.nn.functional.linear", "torch.addmm", "torch.baddbmm", "torch.functional.tensordot",
                       "torch.tensordot", "torch.inner", "Tensor.__matmul__", "torch.dot", "Tensor.dot"},
    "reduction": {"Tensor.sum", "torch.sum", "Tensor.mean", "torch.mean", "Tensor.nansum", "torch.nansum",
                  "Tensor.nanmean", "torch.nanmean", "torch._C._nn.mse_loss", "torch.nn.functional.mse_loss",
                  "Tensor.norm", "torch.functional.norm", "torch.norm", "torch._C._linalg.linalg_vector_norm",
                  "torch.linalg.vector_norm", "torch._C._linalg.linalg_norm", "torch.cumsum", "Tensor.cumsum"},
}


def families(nodes: Sequence[dict[str, Any]]) -> dict[str, int]:
    """How many nodes of each family of work a graph's nodes hold."""
    return {family: sum(n.get("target") in members for n in nodes) for family, members in _FAMILIES.items()}


def work_problems(graph: dict[str, Any], given: dict[str, int]) -> list[str]:
    """What the graph lacks of the work the given code does (``given``: :func:`families` of its graphs)."""
    mine = families(graph.get("nodes", []))
    need = {"matrix product": min(given.get("matrix product", 0), 2), "reduction": min(given.get("reduction", 0), 1)}
    return [f"the graph holds {mine[f]} {f}(s), the given code {need[f]} at least: the function's work is not "
            "in the graph" for f in need if mine.get(f, 0) < need[f]]


def shapes_of(calls: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """For each call, each argument's shape (None for what is not a tensor): what :func:`graph_problems` needs."""
    return [[list(a.shape) if isinstance(a, torch.Tensor) else None for a in c] for c in calls]


def _admits(graph: dict[str, Any], shapes: Sequence[Any]) -> bool:
    """Whether a graph's input sizes (numbers, or symbols) admit a call whose tensor arguments have ``shapes``."""
    for entry in graph.get("inputs", []):
        position = entry.get("position")
        if entry.get("kind") != "tensor" or not isinstance(position, int) or not 0 <= position < len(shapes):
            continue
        want = shapes[position]
        if want is None or len(want) != len(entry.get("shape", [])):
            return False
        if any(isinstance(s, int) and s != w for s, w in zip(entry["shape"], want)):
            return False
    return True


def graph_problems(report: Any, shapes: Sequence[Sequence[Any]], *, max_graphs: int,
                   marked: Sequence[Sequence[int]] | None = None, host_reads: bool = True) -> list[str]:
    """What a :func:`compiled` report shows against the rules of a graph, as sentences; ``[]`` if nothing.

    ``shapes``: for each call, each argument's shape (None for a number); ``marked``: the dimensions marked
    dynamic per argument position (they must be symbolic in every graph); ``host_reads``: whether a node
    that reads a tensor's data counts against it.
    """
    if not isinstance(report, dict) or not {"outputs", "error", "graphs", "counters"} <= set(report):
        return ["the probe's report is incomplete"]
    graphs, counters, error = report["graphs"], report["counters"], report["error"]
    if not isinstance(graphs, list) or not isinstance(counters, dict) or not all(isinstance(g, dict) for g in graphs):
        return ["the probe's report is malformed"]
    if error is not None:
        return [f"torch.compile(fullgraph=True) failed: {error}"]
    problems: list[str] = []
    n = len(graphs)
    ran = len(report["outputs"]) if isinstance(report["outputs"], list) else 0
    if n == 0:
        return ["nothing was compiled"]
    if counters.get("unique_graphs") != n or counters.get("graph_breaks") != 0:
        problems.append(f"the backend received {n} graph(s) but Dynamo's counters say {counters.get('unique_graphs')}"
                        f" graph(s) and {counters.get('graph_breaks')} break(s)")
    if n > max_graphs:
        problems.append(f"{n} compilations for the first {ran} of {len(shapes)} calls, at most {max_graphs} allowed: "
                        "each new shape was traced again (a Python number taken from a size, a loop over a dimension)")
    calls = [g.get("call") for g in graphs]
    if calls != sorted(calls) or calls[0] != 0 or len(set(calls)) != n:
        problems.append(f"the graphs were compiled at calls {calls}: one compilation per call that needed one")
    for i, call_shapes in enumerate(shapes[:ran]):
        serving = [g for g in graphs if isinstance(g.get("call"), int) and g["call"] <= i]
        if not any(_admits(g, call_shapes) for g in serving):
            problems.append(f"call {i + 1} has sizes that no graph compiled by then admits (the counts disagree with "
                            "the sizes)")
            break
    for g in graphs:
        nodes = g.get("nodes", [])
        foreign = sorted({str(x.get("target")) for x in nodes if x.get("op") in ("call_function", "call_module")
                          and str(x.get("target")).split(".")[0] not in _OPERATOR_MODULES})
        if foreign:
            problems.append(f"the graph calls {', '.join(foreign[:3])} as single node(s): a function hidden from the "
                            "compiler")
        if host_reads:
            reads = sorted({str(x.get("target")) for x in nodes
                            if x.get("target") in HOST_READS or x.get("from_data")})
            if reads:
                problems.append(f"the graph reads tensor data into Python ({', '.join(reads[:3])}): `int(t)`, "
                                "`float(t)`, `.item()` and operations whose size depends on the values are host "
                                "reads (a synchronisation on a GPU); keep the values in tensors")
        for position, dims in enumerate(marked or ()):
            for entry in g.get("inputs", []):
                if entry.get("position") == position and entry.get("kind") == "tensor":
                    shape = entry.get("shape", [])
                    fixed = [d for d in dims if d < len(shape) and isinstance(shape[d], int)]
                    if fixed:
                        problems.append(f"argument {position + 1}'s dimension(s) {fixed} were marked dynamic but the "
                                        f"graph has fixed sizes {shape}")
    return list(dict.fromkeys(problems))


def _warm() -> None:
    """One tiny compile at import: Dynamo's lazy set-up (a few seconds the first time in a process) is then paid
    once by the process that imports the probe -- the check run before any job, and so every host it forks --
    instead of by each graded compile."""
    def tiny(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).relu().sum()

    try:
        compiled(types.SimpleNamespace(forward=tiny), "forward", [[torch.ones(2, 3), torch.ones(3, 2)]])
    except Exception:  # noqa: BLE001 - warming is an optimisation only
        pass


_warm()
