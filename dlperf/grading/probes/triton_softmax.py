"""Probes and public rules of the ``triton_softmax`` exercise (the self-check and the grader use the same code).

The student writes a Triton kernel ``softmax_kernel`` and its launcher ``softmax(x)``.  The grader
grades them apart, each where the student's other code cannot reach the measurement:

* **The kernel** is launched by the grader itself.  Only the ``@triton.jit`` functions of the
  kernel's cell (with the cell's imports and plain constants: :func:`kernel_source`) are loaded, in
  a process of their own where Triton's interpreter was chosen first (:func:`prepare`); nothing
  else of the notebook runs there.  :func:`launch` launches ``softmax_kernel[(M,)](x, out, N,
  stride_x, stride_out, BLOCK)`` on memory the grader owns and counts the bytes its programs load
  and store (:func:`dlperf.kernels.traffic.count_traffic`).  The grader reads ``out`` (and the
  padding around the rows, :func:`layout`) from that memory itself.  Because the kernels' bodies
  may use only ``tl`` (:data:`RULES`), nothing in that process can change the count.
* **The launcher** runs with ``softmax_kernel`` replaced by a stand-in (:func:`launcher`,
  :func:`observe`): each launch ``softmax_kernel[grid](...)`` is reported, and the reporter writes
  into the output argument a transform of the input that the launcher cannot know in advance.
  ``softmax(x)`` must then return exactly that transform of the untouched ``x``
  (:func:`launcher_problems`): a launcher that works on the data with torch, launches on other
  data, launches twice or ignores the output cannot pass.

:data:`RULES` is the reading of the cells (an allow-list, :mod:`dlperf.grading.reading`): outside
the kernels, only allocations, sizes, strides, dtypes, ``triton.next_power_of_2``/``cdiv`` and the
launch; inside them, only ``tl``'s operations, their arguments and locals, and other kernels.
"""

from __future__ import annotations

import ast
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

import torch

from dlperf.grading.reading import Rules, cells_of, findings_case, read

__all__ = ["KERNEL_RULES", "Other", "PARAMETERS", "RULES", "Recorder", "TOLERANCE", "TRAFFIC_FACTOR",
           "compare", "cuda_kernel", "intact", "kernel_names", "kernel_parameters", "kernel_source",
           "launch", "launch_kernel", "launcher", "launcher_problems", "layout", "next_power_of_2", "observe",
           "parameters_of", "prepare", "reading", "reading_case", "rows_of", "traffic_problem", "transform"]

PARAMETERS = ("x_ptr", "out_ptr", "n_cols", "stride_x", "stride_out", "BLOCK")
# |got - expected| <= atol + rtol |expected|, elementwise
TOLERANCE = {torch.float32: (1e-5, 1e-6), torch.float16: (2.0 ** -10, 2.0 ** -24)}
TRAFFIC_FACTOR = 1.25      # loaded + stored at most this times the minimum 2 M N s
LAUNCH_OPTIONS = frozenset({"num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                            "launch_cooperative_grid", "launch_pdl"})

# ---------------------------------------------------------------------------------------------
# The reading (an allow-list; the grader applies the same rules)
# ---------------------------------------------------------------------------------------------

_TL = ("program_id", "num_programs", "arange", "load", "store", "max", "min", "sum", "exp", "exp2", "log",
       "log2", "where", "maximum", "minimum", "float16", "float32", "float64", "bfloat16", "int1", "int8",
       "int16", "int32", "int64", "uint8", "uint32", "constexpr", "zeros", "zeros_like", "full", "cdiv",
       "static_range", "range", "fdiv", "div_rn", "fma", "sqrt", "sqrt_rn", "rsqrt", "abs", "floor",
       "ceil", "clamp", "multiple_of", "max_contiguous", "max_constancy", "debug_barrier", "device_print",
       "device_assert", "static_assert", "static_print", "reshape", "broadcast", "broadcast_to",
       "expand_dims", "cast", "reduce", "argmax", "argmin", "tensor", "dtype", "pointer_type", "math.exp",
       "math.exp2", "math.log", "math.log2", "math.fdiv", "math.div_rn", "math.fma", "math.sqrt",
       "math.sqrt_rn", "math.rsqrt", "math.abs", "math.floor", "math.ceil")
_TENSOR_ATTRIBUTES = ("to", "dtype", "element_ty", "shape", "T", "type", "value", "abs", "argmax", "argmin",
                      "broadcast_to", "cast", "cdiv", "ceil", "cumsum", "cumprod", "exp", "exp2", "expand_dims",
                      "floor", "log", "log2", "max", "min", "permute", "ravel", "reshape", "rsqrt", "sqrt",
                      "sum", "trans", "view", "logical_and", "logical_or", "reduce", "scalar", "numel",
                      "primitive_bitwidth", "is_fp16", "is_fp32", "is_floating", "is_ptr")
_UNCOUNTED = "the traffic counter does not see it (the exercise uses masked tl.load and tl.store only)"

KERNEL_RULES = Rules(
    what="a @triton.jit kernel (tl's operations, the kernel's arguments and locals, other @triton.jit functions)",
    names=frozenset(f"triton.language.{n}" for n in _TL),
    builtins=frozenset({"range", "float", "int", "min", "max", "len", "print", "abs", "ValueError",
                        "AssertionError"}),
    attributes=frozenset(_TENSOR_ATTRIBUTES),
    decorators=frozenset(),
    classes=False,
    explain={"triton.language.softmax": "writing the softmax out of max, exp, sum and a division is the exercise",
             "torch": "a kernel computes with tl only (torch cannot run inside a compiled kernel)",
             "triton.language.make_block_ptr": _UNCOUNTED, "triton.language.advance": _UNCOUNTED,
             "triton.language.make_tensor_descriptor": _UNCOUNTED,
             "triton.language.load_tensor_descriptor": _UNCOUNTED,
             "triton.language.store_tensor_descriptor": _UNCOUNTED,
             "triton.language.inline_asm_elementwise": _UNCOUNTED,
             **{f"triton.language.atomic_{op}": _UNCOUNTED
                for op in ("add", "and", "cas", "load", "max", "min", "or", "store", "xchg", "xor", "poll")},
             ".handle": "it is the interpreter's internal value, not a Triton operation",
             ".store": "write with tl.store(pointer, value, mask=...)",
             ".softmax": "writing the softmax out of max, exp, sum and a division is the exercise"},
)

_LAUNCHER_WORK = ("outside the kernels the code only allocates the output, checks the input, reads sizes, strides "
                  "and dtypes and launches: the softmax is the kernel's work")
RULES = Rules(
    what="softmax_kernel and softmax",
    imports=frozenset({"torch", "triton", "triton.language", "math"}),
    names=frozenset({"torch.empty", "torch.empty_like", "torch.zeros", "torch.zeros_like", "torch.float16",
                     "torch.float32", "torch.bfloat16", "torch.float64", "torch.Tensor", "torch.Size",
                     "torch.contiguous_format", "torch.dtype", "torch.device",
                     "triton.jit", "triton.next_power_of_2", "triton.cdiv", "triton.language.constexpr",
                     "triton.language.float16", "triton.language.float32", "math.*"}),
    attributes=frozenset({"shape", "size", "stride", "dim", "ndim", "ndimension", "is_contiguous", "dtype",
                          "device", "numel", "element_size", "itemsize", "new_empty", "new_zeros", "is_cuda",
                          "is_floating_point", "bit_length"}),
    decorators=frozenset(),
    classes=False,
    within={"triton.jit": KERNEL_RULES},
    explain={"torch": _LAUNCHER_WORK, "triton": "the launcher needs only triton.jit, triton.next_power_of_2 and "
                                               "triton.cdiv",
             "triton.language": "tl's operations belong inside a @triton.jit function",
             ".contiguous": "the specification asks for a ValueError on a non-contiguous input, not a copy",
             **{f".{m}": _LAUNCHER_WORK for m in ("softmax", "exp", "max", "sum", "sub", "div", "to", "float",
                                                 "half", "clone", "copy_", "amax", "logsumexp", "log_softmax",
                                                 "exp_", "div_", "sub_")}},
)


def _aliases(tree: ast.Module) -> dict[str, str]:
    aliases: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def _dotted(node: ast.AST, aliases: dict[str, str]) -> str:
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([aliases.get(node.id, node.id), *reversed(attrs)])


def _is_jit(node: ast.AST, aliases: dict[str, str]) -> bool:
    return isinstance(node, ast.FunctionDef) and any(
        _dotted(d.func if isinstance(d, ast.Call) else d, aliases) == "triton.jit" for d in node.decorator_list)


def _constant(node: ast.AST, aliases: dict[str, str]) -> bool:
    """A plain constant: numbers and arithmetic on them, ``tl.constexpr(...)`` and ``math`` of constants."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float, bool))
    if isinstance(node, ast.UnaryOp):
        return _constant(node.operand, aliases)
    if isinstance(node, ast.BinOp):
        return _constant(node.left, aliases) and _constant(node.right, aliases)
    if isinstance(node, ast.Attribute):
        return _dotted(node, aliases) in ("math.e", "math.pi", "math.inf")
    if isinstance(node, ast.Call) and not node.keywords:
        name = _dotted(node.func, aliases)
        return (name == "triton.language.constexpr" or name.startswith("math.")) and all(
            _constant(a, aliases) for a in node.args)
    return False


def kernel_source(source: str) -> str:
    """What the grader loads of the kernel's cell: its imports, its ``@triton.jit`` functions and its plain
    constants (``LOG2E = 1.4426950408889634``, ``C: tl.constexpr = ...``), each on its own lines; every other
    line is left blank (the line numbers stay the cell's).  Nothing else of the cell runs when the kernel
    is graded (its examples, prints, helpers that are not ``@triton.jit``)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source                     # the reading says where
    aliases = _aliases(tree)
    keep, drop = [], []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) or _is_jit(node, aliases) or (
                isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and _constant(node.value, aliases)) or (
                isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None
                and _constant(node.value, aliases)):
            keep.append(node)
        else:
            drop.append(node)

    def span(node: ast.AST) -> range:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return range(first - 1, node.end_lineno or node.lineno)

    kept = {i for node in keep for i in span(node)}
    if any(i in kept for node in drop for i in span(node)):      # two statements on one line: rebuild
        return ast.unparse(ast.Module(body=keep, type_ignores=[])) + "\n"
    lines = source.splitlines(True)
    return "".join(line if i in kept else ("\n" if line.endswith("\n") else "") for i, line in enumerate(lines))


def kernel_parameters(source: str, name: str = "softmax_kernel") -> tuple[str, ...]:
    """The parameter names of the kernel ``name`` in a cell's source (the specification's if not found)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return PARAMETERS
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return tuple(a.arg for a in [*node.args.posonlyargs, *node.args.args])
    return PARAMETERS


def parameters_of(kernel: Any) -> tuple[str, ...]:
    """The parameter names of the notebook's ``softmax_kernel`` (read from its cell, as the grader does)."""
    return kernel_parameters(cells_of(kernel)[0][1])


def _named(found: list[str], names: Sequence[str]) -> list[str]:
    out = []
    for sentence in found:
        for i, name in enumerate(names, 1):
            if sentence.startswith(f"cell {i}"):
                sentence = name + sentence[len(f"cell {i}"):]
        out.append(sentence)
    return out


def reading(kernel_cell: str, launcher_cell: str | None = None) -> tuple[list[str], list[str]]:
    """The grader's reading: ``(findings in the kernel's part, findings in the launcher's cell)``.

    The kernel's part is :func:`kernel_source` of its cell (what the grader runs); the launcher's cell
    (``None``: the kernel and the launcher share one cell) is read whole, with the kernel's part's names
    known to it."""
    kernel = kernel_source(kernel_cell)
    kernel_found = _named(read([("kernel", kernel)], RULES), ["your kernel's cell"])
    kernel_found = [s.replace("your cell", "your kernel's cell", 1) if s.startswith("your cell") else s
                    for s in kernel_found]
    if not any("does not parse" in s for s in kernel_found) and "softmax_kernel" not in kernel_names(kernel_cell):
        kernel_found.append("your kernel's cell has no `@triton.jit` `def softmax_kernel(...)` at its top level: the "
                            "grader loads only the cell's @triton.jit functions, imports and constants")
    if launcher_cell is None:
        return kernel_found, []
    # The launcher's cell sees the kernel's part's names (as in the notebook); its findings alone are its own.
    try:
        names = sorted({n.name for n in ast.parse(kernel).body if isinstance(n, ast.FunctionDef)}
                       | {t.id for n in ast.parse(kernel).body if isinstance(n, (ast.Assign, ast.AnnAssign))
                          for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                          if isinstance(t, ast.Name)})
    except SyntaxError:
        names = []
    stub = "".join(f"{n} = None\n" for n in names)
    found = read([("kernels", stub), ("launcher", launcher_cell)], RULES)
    found = [s for s in found if not s.startswith("cell 1")]      # the stub is ours
    return kernel_found, _named(found, ["your kernel's cell", "your launcher's cell"])


def reading_case(kernel: Any, launcher: Any | None = None) -> Callable[[], tuple[Any, Any, bool]]:
    """A self-check case: the grader's reading of the kernel's cell (``launcher=None``) or of the launcher's."""
    def find() -> list[str]:
        cells = cells_of(kernel) if launcher is None else cells_of(kernel, launcher)
        kernel_cell = cells[0][1]
        launcher_cell = None if launcher is None else (cells[1][1] if len(cells) > 1 else kernel_cell)
        k, lnc = reading(kernel_cell, launcher_cell)
        return k if launcher is None else lnc
    return findings_case(find)


# ---------------------------------------------------------------------------------------------
# The process's Triton mode
# ---------------------------------------------------------------------------------------------


def prepare(interpret: bool | None = None) -> str:
    """Choose the Triton mode of this process before any kernel is decorated; returns the choice in words.

    ``interpret=None``: :func:`dlperf.kernels.select_mode`'s choice (the interpreter where no CUDA device
    exists).  ``interpret=True``: the interpreter even on a CUDA device (Triton helpers imported earlier
    are switched to it too).
    """
    from dlperf.kernels import mode

    # Compiled kernels are cached on disk: in the grader's processes only the private /tmp is sure to be writable.
    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(tempfile.gettempdir(), "triton-cache"))
    if interpret:
        os.environ[mode.ENV] = "1"
        if "triton.language" in sys.modules:
            mode._interpret_imported_triton()
    chosen = mode.select_mode(verbose=False)
    if interpret and not chosen.interpreted:
        raise RuntimeError(f"the interpreter was asked for, but {chosen}")
    return str(chosen)


# ---------------------------------------------------------------------------------------------
# The kernel, launched by the grader
# ---------------------------------------------------------------------------------------------


def next_power_of_2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def layout(x: torch.Tensor, stride: int, fill: float) -> torch.Tensor:
    """A flat buffer holding ``x``'s rows ``stride`` elements apart, then a block's worth of tail; every
    element that is not ``x``'s is ``fill`` (the canaries: a masked kernel neither reads nor writes them)."""
    rows, cols = x.shape
    flat = torch.full((rows * stride + next_power_of_2(cols),), fill, dtype=x.dtype)
    flat[: rows * stride].view(rows, stride)[:, :cols] = x
    return flat


def rows_of(flat: torch.Tensor, rows: int, cols: int, stride: int) -> torch.Tensor:
    """The ``rows x cols`` tensor of a :func:`layout` buffer (a view of it)."""
    return flat.as_strided((rows, cols), (stride, 1))


def intact(flat: torch.Tensor, rows: int, cols: int, stride: int, fill: float) -> bool:
    """Whether every element of a :func:`layout` buffer outside the rows still holds ``fill``."""
    outside = torch.ones_like(flat, dtype=torch.bool)
    outside[: rows * stride].view(rows, stride)[:, :cols] = False
    want = torch.full((), fill, dtype=flat.dtype)
    return bool((flat[outside].view(torch.int16 if flat.element_size() == 2 else torch.int32)
                 == want.view(torch.int16 if flat.element_size() == 2 else torch.int32)).all())


def launch_kernel(kernel: Any, x: torch.Tensor, out: torch.Tensor, stride_x: int, stride_out: int,
                  count: bool = True) -> dict[str, Any]:
    """``kernel[(M,)](x, out, N, stride_x, stride_out, next_power_of_2(N))``, the bytes counted when
    ``count`` (interpreter only): ``{"launches": [...], "loaded": bytes, "stored": bytes}``."""
    rows, cols = x.shape
    fn = getattr(kernel, "fn", None)
    if callable(fn):      # a signature other than the specification's: say so (not an error inside the counter)
        import inspect

        try:
            inspect.signature(fn).bind(x, out, cols, stride_x, stride_out, next_power_of_2(cols))
        except TypeError as exc:
            raise TypeError(f"softmax_kernel{inspect.signature(fn)} cannot be launched as the specification's "
                            f"softmax_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_out, BLOCK): {exc}") from None
    if not count:
        kernel[(rows,)](x, out, cols, stride_x, stride_out, next_power_of_2(cols))
        return {"launches": [], "loaded": 0, "stored": 0}
    from dlperf.kernels.traffic import count_traffic

    with count_traffic() as traffic:
        kernel[(rows,)](x, out, cols, stride_x, stride_out, next_power_of_2(cols))
    return {"launches": [{"kernel": str(t.kernel), "grid": list(t.grid), "loaded": t.loaded_bytes,
                          "stored": t.stored_bytes} for t in traffic.launches],
            "loaded": traffic.loaded_bytes, "stored": traffic.stored_bytes}


def launch(mod: Any, x: torch.Tensor, out: torch.Tensor, stride_x: int, stride_out: int) -> dict[str, Any]:
    """The host's probe: :func:`launch_kernel` of ``mod.softmax_kernel`` (the kernel's part only is loaded)."""
    return launch_kernel(mod.softmax_kernel, x, out, stride_x, stride_out)


def compare(got: Any, want: torch.Tensor) -> str | None:
    """``None`` when ``got`` is ``want`` within :data:`TOLERANCE`; else what differs, as a sentence."""
    if type(got) is not torch.Tensor:
        return f"got {type(got).__name__}, expected a tensor"
    if got.dtype != want.dtype:
        return f"got a {str(got.dtype)[6:]} tensor, expected {str(want.dtype)[6:]}"
    if got.shape != want.shape:
        return f"got shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    rtol, atol = TOLERANCE[want.dtype]
    bad = ~torch.isclose(got.float(), want.float(), rtol=rtol, atol=atol, equal_nan=False)
    if not bad.any():
        return None
    rows = sorted({int(r) for r in bad.nonzero()[:, 0].tolist()})
    shown = ", ".join(map(str, rows[:8])) + (", ..." if len(rows) > 8 else "")
    worst = float(((got.float() - want.float()).abs() - rtol * want.float().abs()).nan_to_num(float("inf")).max())
    nan = int(torch.isnan(got.float()).sum())
    return (f"{int(bad.sum())} of {got.numel()} values outside the tolerance (rtol {rtol:.3g}, atol {atol:.3g}; "
            f"worst excess {worst:.3g}) in rows {shown}" + (f"; {nan} NaN" if nan else ""))


def traffic_problem(report: Any, rows: int, cols: int, itemsize: int) -> str | None:
    """``None`` when the launch loaded and stored at least ``M N s`` bytes each and at most
    :data:`TRAFFIC_FACTOR` times ``2 M N s`` in all; else why not."""
    if not isinstance(report, dict) or type(report.get("loaded")) is not int or type(report.get("stored")) is not int:
        return "the probe's report is malformed"
    need = rows * cols * itemsize
    loaded, stored = report["loaded"], report["stored"]
    said = (f"the kernel loaded {loaded:,} B and stored {stored:,} B; a softmax must load and store {need:,} B "
            "each (every element once)")
    if loaded < need or stored < need:
        return f"{said}: some elements were never read or written (is the block as wide as the row?)"
    if loaded + stored > TRAFFIC_FACTOR * 2 * need:
        return (f"{said}, so {loaded / need:.2f}x and {stored / need:.2f}x the minimum; at most {TRAFFIC_FACTOR:g}x "
                "in all is allowed: read the row once, keep it in registers for the max, the sum and the division, "
                "and mask the lanes past the row's end")
    return None


# ---------------------------------------------------------------------------------------------
# The launcher, with a stand-in for the kernel
# ---------------------------------------------------------------------------------------------


def transform(x: torch.Tensor, scale: float, shift: float) -> torch.Tensor:
    """What the stand-in writes into the output: ``scale x + shift`` (computed in float64), in ``x``'s dtype."""
    return (x.double() * scale + shift).to(x.dtype)


class _StandIn:
    """Takes the kernel's place while the launcher runs: ``standin[grid](*args, **kwargs)`` reports the launch."""

    def __init__(self, report: Callable[..., Any], parameters: Sequence[str]):
        self.report = report
        self.parameters = list(parameters)

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        def launch(*args: Any, **kwargs: Any) -> None:
            g = grid
            if callable(g):
                meta = dict(zip(self.parameters, args))
                meta.update(kwargs)
                g = g(meta)
            if isinstance(g, tuple):
                g = list(g)
            self.report(g, *args, **kwargs)
        return launch

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a Triton kernel is launched as softmax_kernel[grid](...), not called")


class Other:
    """Takes the place of the kernels' cell's other ``@triton.jit`` functions while the launcher is graded."""

    def __init__(self, name: str):
        self.name = name

    def __getitem__(self, grid: Any) -> Callable[..., Any]:
        return self

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"softmax launched {self.name}: the specification asks for one launch of softmax_kernel "
                           "and nothing else")


def kernel_names(source: str) -> list[str]:
    """The ``@triton.jit`` functions of a kernel's cell (of :func:`kernel_source`), in order."""
    try:
        tree = ast.parse(kernel_source(source))
    except SyntaxError:
        return ["softmax_kernel"]
    return [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]


def launcher(mod: Any, x: torch.Tensor, report: Callable[..., Any], parameters: Sequence[str] = PARAMETERS) -> Any:
    """The host's probe: ``mod.softmax(x)`` with ``mod.softmax_kernel`` replaced by a stand-in whose launches
    call ``report(grid, *args, **kwargs)`` (the grader's callback)."""
    missing = object()
    old = mod.__dict__.get("softmax_kernel", missing)
    mod.softmax_kernel = _StandIn(report, parameters)
    try:
        return mod.softmax(x)
    finally:
        if old is missing:
            mod.__dict__.pop("softmax_kernel", None)
        else:
            mod.softmax_kernel = old


class Recorder:
    """The reporting side of the stand-in: records each launch and writes :func:`transform` of the input
    into the output argument (the grader's runs in the grader's process, as a callback)."""

    def __init__(self, x: torch.Tensor, scale: float, shift: float, parameters: Sequence[str] = PARAMETERS):
        self.x = x.clone()
        self.scale, self.shift = scale, shift
        self.parameters = list(parameters)
        self.launches: list[dict[str, Any]] = []

    def __call__(self, grid: Any, *args: Any, **kwargs: Any) -> None:
        self.launches.append({"grid": grid, "args": list(args), "kwargs": dict(kwargs)})
        bound = dict(zip(self.parameters, args))
        bound.update((k, v) for k, v in kwargs.items() if k not in bound)
        source, out = (bound.get(n) for n in (self.parameters + [None, None])[:2])
        if isinstance(source, torch.Tensor) and isinstance(out, torch.Tensor):
            if source.shape == out.shape and source.dtype.is_floating_point and out.dtype.is_floating_point:
                with torch.no_grad():
                    out.copy_(transform(source, self.scale, self.shift).to(out.dtype))


def observe(softmax: Callable[..., Any], x: torch.Tensor, scale: float, shift: float,
            parameters: Sequence[str] = PARAMETERS) -> tuple[Any, BaseException | None, list[dict[str, Any]]]:
    """In this process (the self-check): ``softmax(x)`` with the notebook's ``softmax_kernel`` replaced by the
    stand-in; ``(result, exception or None, launches)``."""
    namespace = softmax.__globals__
    recorder = Recorder(x, scale, shift, parameters)
    others: list[str] = []
    if "softmax_kernel" in namespace:
        try:
            others = [n for n in kernel_names(cells_of(namespace["softmax_kernel"])[0][1]) if n != "softmax_kernel"]
        except (TypeError, ValueError):
            others = []
    missing = object()
    old = {name: namespace.get(name, missing) for name in ["softmax_kernel", *others]}
    namespace["softmax_kernel"] = _StandIn(recorder, parameters)
    for name in others:
        namespace[name] = Other(name)
    try:
        return softmax(x), None, recorder.launches
    except Exception as exc:  # noqa: BLE001 - the launcher's exception is an observation
        return None, exc, recorder.launches
    finally:
        for name, value in old.items():
            if value is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = value


def _same(a: Any, b: torch.Tensor) -> bool:
    return (type(a) is torch.Tensor and a.dtype == b.dtype and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8)))


def launcher_problems(x: torch.Tensor, result: Any, launches: Sequence[Any], want: torch.Tensor,
                      parameters: Sequence[str] = PARAMETERS) -> list[str]:
    """What the launcher did against the specification, from what the stand-in observed (``[]``: nothing).

    ``x``: the input as it was (and still is); ``result``: what ``softmax(x)`` returned; ``launches``: the
    stand-in's records; ``want``: the transform the stand-in wrote into the output argument of a right launch."""
    rows, cols = x.shape
    names = list(parameters)[:6] if len(parameters) >= 6 else list(PARAMETERS)
    if not launches:
        return ["softmax never launched softmax_kernel[grid](...): the softmax must be computed by your kernel"]
    if len(launches) > 1:
        return [f"softmax launched softmax_kernel {len(launches)} times; the specification asks for one launch"]
    found: list[str] = []
    record = launches[0] if isinstance(launches[0], dict) else {}
    grid = record.get("grid")
    grid_ok = (isinstance(grid, (list, tuple)) and 1 <= len(grid) <= 3 and all(type(g) is int for g in grid)
               and list(grid) == [rows] + [1] * (len(grid) - 1))
    if not grid_ok:
        found.append(f"the grid was {grid!r}; the specification asks for one program per row: grid ({rows},)")
    args, kwargs = list(record.get("args", [])), dict(record.get("kwargs", {}))
    bound: dict[str, Any] = dict(zip(names, args))
    if len(args) > len(names):
        found.append(f"the launch passed {len(args)} arguments; softmax_kernel takes {len(names)}")
    for key, value in kwargs.items():
        if key in LAUNCH_OPTIONS:
            continue
        if key not in names:
            found.append(f"the launch passed {key}=, which softmax_kernel does not take")
        elif key in bound:
            found.append(f"the launch passed {key} twice")
        else:
            bound[key] = value
    missing = [n for n in names if n not in bound]
    if missing:
        found.append(f"the launch did not pass {', '.join(missing)}")
        return found
    src, out = bound[names[0]], bound[names[1]]
    if not _same(src, x):
        what = (f"a {str(src.dtype)[6:]} tensor of shape {tuple(src.shape)}" if isinstance(src, torch.Tensor)
                else type(src).__name__)
        found.append(f"the kernel's input was not x as given ({what}, other values or another dtype): the launcher "
                     "passes x itself and leaves the work to the kernel")
    if not isinstance(out, torch.Tensor) or out.shape != x.shape or out.dtype != x.dtype:
        what = (f"a {str(out.dtype)[6:]} tensor of shape {tuple(out.shape)}" if isinstance(out, torch.Tensor)
                else type(out).__name__)
        found.append(f"the kernel's output was {what}; expected a new {str(x.dtype)[6:]} tensor of x's shape "
                     f"{(rows, cols)}")
    expect = {names[2]: cols, names[3]: x.stride(0), names[4]: cols, names[5]: next_power_of_2(cols)}
    for name, value in expect.items():
        got = bound[name]
        if type(got) is not int or got != value:
            found.append(f"{name} was {got!r}, expected {value}" + (
                " (triton.next_power_of_2(N))" if name == names[5] else ""))
    if not found and not _same(result, want):
        found.append("softmax did not return the tensor its kernel launch wrote (return the output you passed "
                     "to the kernel, unchanged)")
    return found


# ---------------------------------------------------------------------------------------------
# On a CUDA device: the kernel compiled
# ---------------------------------------------------------------------------------------------

_kept: dict[str, Any] = {}


def cuda_kernel(mod: Any, x: torch.Tensor, repeats: int = 0) -> torch.Tensor:
    """The host's probe on a CUDA device: ``repeats == 0``: a CUDA copy of ``x`` is kept and the kernel
    (compiled) launched three times on it, its result returned on the CPU; ``repeats > 0``: that many
    launches on the kept input, then a synchronisation; the row sums of the result, on the CPU."""
    if repeats <= 0:
        xc = x.to("cuda")
        _kept["x"], _kept["out"] = xc, torch.empty_like(xc)
    xc, out = _kept["x"], _kept["out"]
    run = mod.softmax_kernel if hasattr(mod, "softmax_kernel") else None
    for _ in range(max(3, int(repeats))):
        if run is None:
            out = torch.softmax(xc, dim=1)
        else:
            launch_kernel(run, xc, out, xc.stride(0), out.stride(0), count=False)
    torch.cuda.synchronize()
    return out.cpu() if repeats <= 0 else out.float().sum(dim=1).cpu()
