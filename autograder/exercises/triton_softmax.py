"""The checker's side of the ``triton_softmax`` exercise: inputs, expected values, the static reading, the verdicts.

The student writes a Triton kernel for the row-wise softmax of a 2-D tensor and its launcher
``softmax(x)``.  Their cells run in a host (:class:`autograder.trusted.Student`), ahead of which a setup
part of ours chooses the Triton mode (:func:`dlperf.grading.probes.triton_softmax.prepare`): the
interpreter, always for the values and the traffic (on a GPU machine too), compiled on a CUDA device for
the timing.  Everything expected is computed here: the softmax by ``torch.softmax`` in ``float32`` (cast
to the input's dtype), the minimum traffic from the shape.

**What the student's process could fake, and the cross-check.**  The bytes are counted in the host by
:func:`dlperf.kernels.traffic.count_traffic`, which watches the interpreter's loads and stores.  Code in
that process could patch the counter or the interpreter's builder, move data in ways the counter does
not watch (``tl.make_block_ptr``, tensor descriptors, atomics), or compute the softmax with torch in the
launcher and hand a kernel the finished values (which then loads and stores exactly the minimum).  So
:func:`static_findings` reads the solution cells' source here (never run here): a ``@triton.jit``
function with ``tl.load`` and ``tl.store`` that the launcher launches; imports of ``triton``,
``triton.language``, ``torch`` and ``math`` only; outside the kernels, no torch operation on data (only
allocations, sizes and strides, ``triton.cdiv``/``next_power_of_2``, the launch); inside them nothing
but ``tl``, their arguments and other kernels; no private attribute, ``getattr``, ``exec`` and their
kind.  The traffic and kernel cells give their points only when the reading finds nothing.

Not closed: an attack written entirely with allowed constructs that the reading does not know of.
"""

from __future__ import annotations

import ast
import math
import time
import types
from collections.abc import Sequence
from typing import Any

import torch

from autograder.trusted import CheckFailed, Student, StudentRaised, difference, seed, solution_parts

__all__ = [
    "ALLOWED_IMPORTS",
    "TOLERANCE",
    "TRAFFIC_FACTOR",
    "check_speed",
    "check_static",
    "check_traffic",
    "check_values",
    "expected",
    "make_input",
    "minimum_bytes",
    "parts",
    "static_findings",
    "student",
]

ALLOWED_IMPORTS = ("triton", "triton.language", "torch", "math")
# |got - expected| <= atol + rtol |expected|, elementwise
TOLERANCE = {torch.float32: (1e-5, 1e-6), torch.float16: (2.0 ** -10, 2.0 ** -24)}
TRAFFIC_FACTOR = 1.25      # loaded + stored at most this times the minimum 2 M N s
SPEED_FACTOR = 3.0         # on a CUDA device: at most this times torch.softmax's time (plus the slack)
SPEED_SLACK = 0.005        # seconds, for the wire around one timed request

SETUP = ("from dlperf.grading.probes.triton_softmax import prepare as _prepare\n"
         "_prepare({interpret})\n"
         "del _prepare\n")
REFERENCE = ("import torch\n\n\n"
             "def softmax(x):\n"
             "    return torch.softmax(x, dim=1)\n")


# ---------------------------------------------------------------------------------------------
# The student's process
# ---------------------------------------------------------------------------------------------


def parts(*objects: Any) -> list[tuple[str, str]]:
    """The cells that define ``objects`` (functions, or ``@triton.jit`` kernels: their Python function)."""
    plain = []
    for obj in objects:
        if not isinstance(obj, (types.FunctionType, type)):
            obj = getattr(obj, "fn", obj)   # a JITFunction / InterpretedFunction keeps the decorated function
        plain.append(obj)
    return solution_parts(*plain)


def student(*objects: Any, interpret: bool | None = True, reference: bool = False, timeout: float = 120.0) -> Student:
    """A host with the Triton mode chosen first (``interpret``: see :func:`~dlperf.grading.probes.triton_softmax.prepare`),
    then the cells that define ``objects`` (or, ``reference=True``, a launcher that calls ``torch.softmax``)."""
    setup = ("<triton_softmax: the grader's choice of Triton mode>", SETUP.format(interpret=interpret))
    cells = [("<triton_softmax: torch.softmax>", REFERENCE)] if reference else parts(*objects)
    return Student(parts=[setup, *cells], timeout=timeout)


# ---------------------------------------------------------------------------------------------
# Inputs and expected values
# ---------------------------------------------------------------------------------------------


def make_input(case: Any, rows: int, cols: int, dtype: torch.dtype = torch.float32, *, scale: float = 1.0,
               offset: float = 0.0) -> torch.Tensor:
    """A contiguous ``rows x cols`` tensor of ``dtype``: ``offset + scale * N(0, 1)``, random from the
    submission's seed for ``case``."""
    g = torch.Generator().manual_seed(seed("triton_softmax", case))
    x = offset + scale * torch.randn(rows, cols, generator=g, dtype=torch.float64)
    return x.to(dtype)


def expected(x: torch.Tensor) -> torch.Tensor:
    """The softmax of every row, computed in float32 and rounded to ``x``'s dtype."""
    return torch.softmax(x.float(), dim=1).to(x.dtype)


def describe(x: torch.Tensor) -> str:
    dtype = str(x.dtype).removeprefix("torch.")
    lo, hi = float(x.float().min()), float(x.float().max())
    return f"softmax of a {x.shape[0]} x {x.shape[1]} {dtype} tensor (values in [{lo:.4g}, {hi:.4g}])"


def minimum_bytes(rows: int, cols: int, itemsize: int) -> int:
    """What a softmax must load (each element once), and also what it must store: ``rows cols itemsize``."""
    return rows * cols * itemsize


# ---------------------------------------------------------------------------------------------
# Running the launcher in the host
# ---------------------------------------------------------------------------------------------


def _run(host: Student, x: torch.Tensor, where: str) -> dict[str, Any]:
    """The probe's report for ``softmax(x)`` on memory this process owns; the input must stay untouched."""
    shared = host.share(x)
    report = host.probe("triton_softmax:run", shared)
    if not isinstance(report, dict) or not {"out", "launches", "loaded", "stored"} <= set(report):
        raise CheckFailed(f"{where}: the probe's report is incomplete (your code interfered with it)")
    if not torch.equal(shared.read().view(torch.uint8), x.view(torch.uint8)):
        raise CheckFailed(f"{where}: softmax changed its input x; it must return a new tensor and leave x as it was")
    launches = report["launches"]
    if not isinstance(launches, list) or not launches:
        raise CheckFailed(f"{where}: softmax launched no Triton kernel (the softmax must be computed by your "
                          "@triton.jit kernel)")
    return report


def check_values(host: Student, x: torch.Tensor, where: str) -> None:
    """``softmax(x)`` launched a Triton kernel, returned a new tensor of ``x``'s dtype and shape whose values
    are the softmax of every row within :data:`TOLERANCE`, and left ``x`` untouched."""
    where = f"{where}: {describe(x)}"
    got = _run(host, x, where)["out"]
    want = expected(x)
    if type(got) is not torch.Tensor:
        raise CheckFailed(f"{where}: softmax returned {type(got).__name__}, expected a tensor")
    if got.dtype != want.dtype:
        raise CheckFailed(f"{where}: got a {str(got.dtype)[6:]} tensor, expected {str(want.dtype)[6:]} (the input's "
                          "dtype)")
    if got.shape != want.shape:
        raise CheckFailed(f"{where}: got shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    rtol, atol = TOLERANCE[want.dtype]
    problem = difference(got, want, rtol=rtol, atol=atol)
    if problem:
        bad = ~torch.isclose(got.float(), want.float(), rtol=rtol, atol=atol, equal_nan=False)
        rows = sorted({int(r) for r in bad.nonzero()[:, 0].tolist()})
        shown = ", ".join(map(str, rows[:8])) + (", ..." if len(rows) > 8 else "")
        nan = int(torch.isnan(got.float()).sum())
        raise CheckFailed(f"{where}: {problem}; {int(bad.sum())} of {got.numel()} values outside the tolerance "
                          f"(rtol {rtol:.3g}, atol {atol:.3g}) in rows {shown}" + (f"; {nan} NaN" if nan else ""))


def check_traffic(host: Student, x: torch.Tensor, where: str) -> dict[str, Any]:
    """One launch of ``softmax(x)`` with one program per row, and the bytes its programs loaded and stored,
    counted by the interpreter: at least the minimum each (every element read and written), at most
    :data:`TRAFFIC_FACTOR` times it in all."""
    where = f"{where}: {describe(x)}"
    report = _run(host, x, where)
    loaded, stored = report["loaded"], report["stored"]
    if type(loaded) is not int or type(stored) is not int:
        raise CheckFailed(f"{where}: the probe's report is malformed (your code interfered with it)")
    need = minimum_bytes(x.shape[0], x.shape[1], x.element_size())
    launches = report["launches"]
    grids = [launch.get("grid") if isinstance(launch, dict) else None for launch in launches]
    if grids != [[x.shape[0], 1, 1]]:
        raise CheckFailed(f"{where}: softmax made {len(grids)} launch(es) with grid(s) {grids}; the specification "
                          f"asks for one launch with one program per row, grid ({x.shape[0]},)")
    kernels = ", ".join(f"{launch.get('kernel')}[{launch.get('programs')} programs]" for launch in report["launches"]
                        if isinstance(launch, dict))
    said = (f"the kernel(s) ({kernels}) loaded {loaded:,} B and stored {stored:,} B; a softmax must load and store "
            f"{need:,} B each (every element once)")
    if loaded < need or stored < need:
        raise CheckFailed(f"{where}: {said}: some elements were never read or written (is the block as wide as the "
                          "row?)")
    if loaded + stored > TRAFFIC_FACTOR * 2 * need:
        raise CheckFailed(f"{where}: {said}, so {loaded / need:.2f}x and {stored / need:.2f}x the minimum; at most "
                          f"{TRAFFIC_FACTOR:g}x in all is allowed: read the row once, keep it in registers for the "
                          "max, the sum and the division, and mask the lanes past the row's end")
    return report


# ---------------------------------------------------------------------------------------------
# The static reading of the solution cells
# ---------------------------------------------------------------------------------------------

FORBIDDEN_NAMES = {"getattr", "setattr", "delattr", "hasattr", "eval", "exec", "compile", "globals", "locals",
                   "vars", "open", "input", "breakpoint", "importlib", "sys", "os", "builtins", "dir", "type",
                   "object", "super", "memoryview", "numpy", "np", "ctypes"}
FORBIDDEN_ATTRIBUTES = {"runtime", "knobs", "compiler", "backends", "interpreter", "testing", "extra", "tools",
                        "make_block_ptr", "advance", "make_tensor_descriptor", "load_tensor_descriptor",
                        "store_tensor_descriptor", "inline_asm_elementwise", "handle", "data", "data_ptr",
                        "untyped_storage", "storage", "numpy", "tolist", "item", "autotune", "heuristics",
                        "modules", "func_globals", "f_globals", "f_back", "gi_frame", "cr_frame"}
# Outside the kernels: what the launcher may call (allocate, read sizes and strides, compute the grid, launch).
TORCH_ALLOWED = {"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "float16", "float32", "float64",
                 "bfloat16", "half", "float", "dtype", "device", "Tensor", "Size"}
TRITON_ALLOWED = {"jit", "cdiv", "next_power_of_2", "language"}
TENSOR_METHODS = {"stride", "size", "dim", "numel", "is_contiguous", "element_size", "contiguous", "new_empty",
                  "new_zeros"}
HOST_BUILTINS = {"len", "range", "int", "float", "bool", "str", "max", "min", "tuple", "list", "isinstance", "print",
                 "enumerate", "zip", "abs", "ValueError", "TypeError", "RuntimeError", "AssertionError",
                 "NotImplementedError", "IndexError"}
KERNEL_BUILTINS = {"range", "float", "int", "min", "max", "len", "print", "ValueError", "AssertionError"}


def _root(node: ast.AST) -> ast.AST:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    return ""


def _is_jit(decorator: ast.AST, aliases: dict[str, str]) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = _dotted(target)
    head, _, rest = name.partition(".")
    full = f"{aliases.get(head, head)}.{rest}" if rest else aliases.get(head, head)
    return full == "triton.jit"


def _local_names(fn: ast.FunctionDef) -> set[str]:
    args = fn.args
    names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def static_findings(sources: Sequence[str]) -> list[str]:
    """What the solution cells' source does that the exercise's rules refuse, or lacks, each as a sentence.

    ``sources``: the cells' source, in order.  An empty list means the reading found nothing.
    """
    found: list[str] = []
    trees: list[tuple[int, ast.Module, list[str]]] = []
    for cell, source in enumerate(sources, 1):
        try:
            trees.append((cell, ast.parse(source), source.splitlines()))
        except SyntaxError as exc:
            found.append(f"cell {cell} does not parse: {exc.msg} (line {exc.lineno})")
    # Names bound by imports (tl -> triton.language), kernels and plain functions, across the cells.
    aliases: dict[str, str] = {}
    for _, tree, _ in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    aliases[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module:
                for a in node.names:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    kernels: dict[str, ast.FunctionDef] = {}
    helpers: set[str] = set()
    for _, tree, _ in trees:
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                if any(_is_jit(d, aliases) for d in node.decorator_list):
                    kernels[node.name] = node
                else:
                    helpers.add(node.name)
    tl_names = {name for name, full in aliases.items() if full == "triton.language"}
    triton_names = {name for name, full in aliases.items() if full == "triton"}
    torch_names = {name for name, full in aliases.items() if full == "torch"}
    math_names = {name for name, full in aliases.items() if full == "math"}
    jit_names = {name for name, full in aliases.items() if full == "triton.jit"}
    launched = loads = stores = False

    for cell, tree, lines in trees:
        where = f"cell {cell}" if len(sources) > 1 else "your cell"

        def add(node: ast.AST, what: str) -> None:
            line = getattr(node, "lineno", 0)
            text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
            sentence = f"{where}, line {line} (`{text[:70]}`): {what}"
            if sentence not in found:
                found.append(sentence)

        # Everywhere: imports, private and special names, what can hide a call.
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name not in ALLOWED_IMPORTS:
                        add(node, f"imports {a.name} (allowed: {', '.join(ALLOWED_IMPORTS)})")
            elif isinstance(node, ast.ImportFrom):
                module = node.module or ""
                for a in node.names:
                    full = f"{module}.{a.name}"
                    if (module not in ALLOWED_IMPORTS or a.name == "*" or a.name.startswith("_")
                            or a.name in FORBIDDEN_ATTRIBUTES
                            or (module == "torch" and a.name not in TORCH_ALLOWED)
                            or (module == "triton" and a.name not in TRITON_ALLOWED)):
                        add(node, f"imports {full} (allowed: {', '.join(ALLOWED_IMPORTS)}, and from them only what "
                                  "the rules name)")
            elif isinstance(node, ast.Attribute):
                if node.attr.startswith("_"):
                    add(node, f"uses the private or special attribute .{node.attr}")
                elif node.attr in FORBIDDEN_ATTRIBUTES or node.attr.startswith("atomic_"):
                    add(node, f"uses .{node.attr} (not needed here; the traffic counter does not see it, or it "
                              "reaches past the rules)")
            elif isinstance(node, ast.Name):
                if node.id.startswith("__") or node.id in FORBIDDEN_NAMES:
                    add(node, f"uses {node.id} (not needed here; it can hide what the code calls)")
            elif isinstance(node, (ast.Global, ast.Nonlocal)):
                add(node, f"uses {type(node).__name__.lower()} state")
            elif isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    if not _is_jit(d, aliases):
                        add(d, f"decorates {node.name} with {_dotted(d.func if isinstance(d, ast.Call) else d) or 'an expression'} "
                               "(only @triton.jit)")
            elif isinstance(node, ast.ClassDef):
                add(node, f"defines the class {node.name} (a kernel and functions are all this needs)")
            elif isinstance(node, ast.AsyncFunctionDef):
                add(node, "defines an async function (plain functions only)")

        # Inside the kernels: tl, triton, the arguments and locals, other kernels, a few builtins.
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name in kernels):
                continue
            local = _local_names(node)
            allowed = local | tl_names | triton_names | set(kernels) | KERNEL_BUILTINS | jit_names
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id not in allowed:
                    add(sub, f"the kernel {node.name} uses {sub.id} (a kernel uses only tl, its arguments and "
                             "other @triton.jit functions)")
                elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
                    name = _dotted(sub.func)
                    head, _, rest = name.partition(".")
                    if head in tl_names and rest == "load":
                        loads = True
                    elif head in tl_names and rest == "store":
                        stores = True

        # Outside the kernels (the launcher, helpers, the cell's top level): no torch work on the data.
        outside: list[ast.AST] = []
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name in kernels:
                continue
            outside.append(node)
        for stmt in outside:
            for sub in ast.walk(stmt):
                if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
                    if sub.value.id in torch_names and sub.attr not in TORCH_ALLOWED:
                        add(sub, f"uses torch.{sub.attr} outside the kernel (the launcher only allocates the output, "
                                 "reads sizes and strides and launches: the softmax is the kernel's work)")
                    elif sub.value.id in triton_names and sub.attr not in TRITON_ALLOWED:
                        add(sub, f"uses triton.{sub.attr} outside the kernel")
                    elif sub.value.id in tl_names:
                        add(sub, f"uses tl.{sub.attr} outside a @triton.jit function")
                if not isinstance(sub, ast.Call):
                    continue
                func = sub.func
                if isinstance(func, ast.Subscript):
                    base = _root(func.value)
                    if isinstance(func.value, ast.Name) and func.value.id in kernels:
                        launched = True
                    else:
                        add(sub, "launches something that is not a @triton.jit function of your cells"
                            if not isinstance(base, ast.Name) or base.id not in kernels else
                            "launches a kernel through an expression (write kernel[grid](...))")
                elif isinstance(func, ast.Name):
                    if func.id in kernels:
                        add(sub, f"calls the kernel {func.id}(...) without a grid (write {func.id}[grid](...))")
                    elif func.id in helpers or func.id in HOST_BUILTINS:
                        pass
                    elif func.id in aliases and aliases[func.id].partition(".")[2] in (
                            TORCH_ALLOWED if aliases[func.id].startswith("torch.") else
                            TRITON_ALLOWED if aliases[func.id].startswith("triton.") else ()):
                        pass
                    else:
                        add(sub, f"calls {func.id}(...) outside the kernel (the launcher may call only "
                                 "allocations, size and stride queries, triton.cdiv, triton.next_power_of_2, "
                                 "Python builtins and the kernel)")
                elif isinstance(func, ast.Attribute):
                    name = _dotted(func)
                    head = name.split(".")[0]
                    if head in torch_names or head in triton_names or head in math_names or head in tl_names:
                        continue   # torch.X / triton.X were judged above; math works on Python numbers
                    if func.attr not in TENSOR_METHODS:
                        add(sub, f"calls .{func.attr}(...) outside the kernel (on a tensor that is torch work on "
                                 f"the data; allowed: {', '.join(sorted(TENSOR_METHODS))})")
                else:
                    add(sub, "calls the result of an expression outside the kernel")

    if not kernels:
        found.append("no function is decorated with @triton.jit: the softmax must be a Triton kernel")
    else:
        if not loads:
            found.append("no kernel calls tl.load: the kernel must read the input itself")
        if not stores:
            found.append("no kernel calls tl.store: the kernel must write the output itself")
        if not launched:
            found.append("nothing launches a @triton.jit kernel (kernel[grid](...)) outside the kernels")
    return found


def check_static(*objects: Any) -> None:
    """Fail unless the reading of the cells that define ``objects`` finds nothing (read here, never run here)."""
    problems = static_findings([source for _, source in parts(*objects)])
    if problems:
        shown = "\n".join(problems[:6]) + (f"\n... and {len(problems) - 6} more" if len(problems) > 6 else "")
        raise CheckFailed("the grader's reading of your cells found (the traffic is counted in your process, so the "
                          f"grader also reads your code):\n{shown}")


# ---------------------------------------------------------------------------------------------
# On a CUDA device: the time against torch.softmax
# ---------------------------------------------------------------------------------------------


def _timed(host: Student, repeats: int) -> tuple[float, Any]:
    start = time.perf_counter()
    sums = host.probe("triton_softmax:cuda_repeat", repeats, _timeout=120.0)
    return time.perf_counter() - start, sums


def check_speed(x: torch.Tensor, where: str, *objects: Any, rounds: int = 3) -> str:
    """On a CUDA device: the student's launcher, compiled, against ``torch.softmax`` in a host of its own,
    both timed here in alternating rounds; at most :data:`SPEED_FACTOR` times as long (plus
    :data:`SPEED_SLACK`).  Without a CUDA device: nothing, and says so."""
    if not torch.cuda.is_available():
        return "no CUDA device: not timed"
    where = f"{where}: {describe(x)} on the GPU"
    want = expected(x)
    rtol, atol = TOLERANCE[x.dtype]
    with student(*objects, interpret=None) as mine, student(interpret=None, reference=True) as ref:
        try:
            got = mine.probe("triton_softmax:cuda_prepare", x, _timeout=300.0)
        except StudentRaised as exc:
            raise CheckFailed(f"{where}: your softmax failed compiled on the GPU: {exc.type_name}: "
                              f"{exc.message}") from None
        problem = difference(got, want, rtol=rtol, atol=atol)
        if problem:
            raise CheckFailed(f"{where}, compiled: {problem}")
        ref.probe("triton_softmax:cuda_prepare", x, _timeout=300.0)
        per_call = _timed(ref, 10)[0] / 10
        repeats = max(10, min(5000, math.ceil(0.05 / max(per_call, 1e-6))))
        ours, theirs = [], []
        for _ in range(rounds):
            t, sums = _timed(mine, repeats)
            if type(sums) is not torch.Tensor or sums.shape != (x.shape[0],) or not torch.allclose(
                    sums, torch.ones_like(sums), rtol=1e-2, atol=1e-2):
                raise CheckFailed(f"{where}: the timed calls did not return the softmax")
            ours.append(t)
            theirs.append(_timed(ref, repeats)[0])
    mine_s, ref_s = min(ours) / repeats, min(theirs) / repeats
    if min(ours) > SPEED_FACTOR * min(theirs) + SPEED_SLACK:
        raise CheckFailed(f"{where}: {mine_s * 1e3:.3f} ms per call, torch.softmax {ref_s * 1e3:.3f} ms: more than "
                          f"{SPEED_FACTOR:g}x as long (one program per row, the row in one block, read once)")
    return f"{mine_s * 1e3:.3f} ms per call, torch.softmax {ref_s * 1e3:.3f} ms"
