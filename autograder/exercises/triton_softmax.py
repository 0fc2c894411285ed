"""The checker's side of the ``triton_softmax`` exercise: inputs, expected values, the verdicts.

The student writes a Triton kernel ``softmax_kernel`` and its launcher ``softmax(x)``; they are graded
apart, each measured where the student's other code cannot reach (the public half is
:mod:`dlperf.grading.probes.triton_softmax`, which the self-checks use too).

**The kernel, launched here.**  The reading of the kernel's cell comes first (an allow-list,
``probe.RULES``: the kernels' bodies use only ``tl``, their arguments and locals, other kernels).  Then
only the ``@triton.jit`` functions of that cell, its imports and plain constants
(``probe.kernel_source``) are loaded into a host whose Triton mode was set to the interpreter first;
no other code of the notebook runs there.  This process shares ``x`` and ``out`` with it
(:meth:`Student.share`), laid out with padding and a tail of canaries (``probe.layout``), and the
public probe ``launch`` launches ``softmax_kernel[(M,)](x, out, N, stride_x, stride_out, BLOCK)``
with the grid, the strides and ``BLOCK = next_power_of_2(N)`` chosen here.  The values are read here
from that memory (the rows, the canaries around them, ``x`` untouched), compared with
``torch.softmax`` computed here; the bytes are counted in the host by the interpreter, where nothing
but the allow-listed kernel runs.

**The launcher, cross-checked.**  The launcher's cell runs in a host of its own, with the kernel's
names bound to nothing, and ``softmax_kernel`` replaced by a stand-in while ``softmax(x)`` runs on a
shared ``x``: each launch calls back into this process (:class:`probe.Recorder`), which records the
grid and the arguments and writes into the output argument ``scale * x + shift`` with a scale and a
shift drawn for each submission.  ``softmax(x)`` must return exactly that, for the untouched ``x``:
torch work on the data, a launch on other data, two launches or an ignored output cannot pass, whatever
the launcher's process reports.  Grid ``(M,)``, ``N``, the strides and ``BLOCK`` are read from what was
recorded here, and a non-2-D or non-contiguous ``x`` must raise ``ValueError`` without a launch.

Not closed: the launcher could tell the stand-in from a Triton kernel and behave differently with
the real one (the reading refuses the builtins that would tell, ``type``, ``isinstance`` of Triton
classes aside); the end-to-end values of ``softmax`` with the real kernel are not graded, only the two
halves.
"""

from __future__ import annotations

import math
import time
import types
from typing import Any

import torch

from autograder.trusted import CheckFailed, Student, StudentRaised, seed, solution_parts
from dlperf.grading.probes import triton_softmax as probe

__all__ = [
    "TOLERANCE",
    "TRAFFIC_FACTOR",
    "check_kernel",
    "check_launcher",
    "check_rejects",
    "check_speed",
    "check_traffic",
    "expected",
    "kernel_host",
    "launcher_host",
    "make_input",
    "minimum_bytes",
]

TOLERANCE = probe.TOLERANCE
TRAFFIC_FACTOR = probe.TRAFFIC_FACTOR
SPEED_FACTOR = 3.0         # on a CUDA device: at most this times torch.softmax's time (plus the slack)
SPEED_SLACK = 0.005        # seconds, for the wire around one timed request
X_FILL = 30.0              # what lies around x's rows: a kernel that reads it gets a wrong maximum or sum
OUT_FILL = -7.0            # what lies around out's rows: it must still be there afterwards

SETUP = ("from dlperf.grading.probes.triton_softmax import prepare as _prepare\n"
         "_prepare({interpret})\n"
         "del _prepare\n")


# ---------------------------------------------------------------------------------------------
# The student's processes
# ---------------------------------------------------------------------------------------------


def _plain(obj: Any) -> Any:
    if not isinstance(obj, (types.FunctionType, type)):
        obj = getattr(obj, "fn", obj)   # a JITFunction / InterpretedFunction keeps the decorated function
    return obj


def _cells(kernel: Any, launcher: Any) -> tuple[tuple[str, str], tuple[str, str] | None]:
    """The kernel's cell and the launcher's cell (``None`` when it is the kernel's)."""
    cells = solution_parts(_plain(kernel), _plain(launcher))
    return cells[0], (cells[1] if len(cells) > 1 else None)


def _setup(interpret: bool | None) -> tuple[str, str]:
    return ("<triton_softmax: the grader's choice of Triton mode>", SETUP.format(interpret=interpret))


def _refuse(found: list[str], what: str) -> None:
    if found:
        shown = "\n".join(found[:6]) + (f"\n... and {len(found) - 6} more" if len(found) > 6 else "")
        raise CheckFailed(f"the grader's reading of {what} (the same as your self-check's) refuses:\n{shown}")


def kernel_host(kernel: Any, launcher: Any, *, interpret: bool | None = True, timeout: float = 120.0) -> Student:
    """A host with the Triton mode chosen first, then only the kernel's part of its cell (after the reading)."""
    (kfile, ksource), lcell = _cells(kernel, launcher)
    found, _ = probe.reading(ksource)
    _refuse(found, "your kernel's cell")
    host = Student(parts=[_setup(interpret), (kfile, probe.kernel_source(ksource))], timeout=timeout)
    host.parameters = probe.kernel_parameters(ksource)  # type: ignore[attr-defined]
    return host


def launcher_host(kernel: Any, launcher: Any, *, timeout: float = 60.0) -> Student:
    """A host with the launcher's cell (after the reading); the kernel's cell's other kernels are bound to
    :class:`probe.Other` there (launching one fails), ``softmax_kernel`` to the stand-in while ``softmax`` runs."""
    (kfile, ksource), lcell = _cells(kernel, launcher)
    parameters = probe.kernel_parameters(ksource)
    if lcell is None:           # one cell holds both: it runs whole, the kernel replaced while softmax runs
        _, found = probe.reading(ksource, ksource)
        parts = [_setup(True), (kfile, ksource)]
    else:
        _, found = probe.reading(ksource, lcell[1])
        others = [n for n in probe.kernel_names(ksource) if n != "softmax_kernel"]
        stub = ("<triton_softmax: the kernel's names>",
                "from dlperf.grading.probes.triton_softmax import Other as _Other\n\nsoftmax_kernel = None\n"
                + "".join(f"{n} = _Other({n!r})\n" for n in others) + "del _Other\n")
        parts = [_setup(True), stub, lcell]
    _refuse(found, "your launcher's cell")
    host = Student(parts=parts, timeout=timeout)
    host.parameters = parameters  # type: ignore[attr-defined]
    return host


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
# The kernel, launched here
# ---------------------------------------------------------------------------------------------


def _launch(host: Student, x: torch.Tensor, where: str, pad_x: int, pad_out: int) -> tuple[dict[str, Any], Any]:
    """Launch the kernel on ``x`` laid out ``pad_x`` elements apart (rows), into an output ``pad_out`` apart;
    the report and the output as read here.  ``x`` and everything around the rows must stay as they were."""
    rows, cols = x.shape
    sx, so = cols + pad_x, cols + pad_out
    x_flat = probe.layout(x, sx, X_FILL)
    out_flat = probe.layout(torch.full_like(x, OUT_FILL), so, OUT_FILL)
    xs, outs = host.share(x_flat), host.share(out_flat)
    xv, ov = xs.view((rows, cols), (sx, 1)), outs.view((rows, cols), (so, 1))
    try:
        report = host.probe("triton_softmax:launch", xv, ov, sx, so)
    except StudentRaised as exc:
        raise CheckFailed(f"{where}: your kernel, launched as softmax_kernel[({rows},)](x, out, {cols}, {sx}, {so}, "
                          f"{probe.next_power_of_2(cols)}), raised {exc.type_name}: {exc.message}\n"
                          f"{exc.student_traceback}".rstrip()) from None
    if not torch.equal(xs.read().view(torch.uint8), x_flat.view(torch.uint8)):
        raise CheckFailed(f"{where}: the kernel wrote into its input x (or the memory around its rows)")
    got = outs.read()
    return report, (got, probe.rows_of(got, rows, cols, so).clone(), so)


def check_kernel(host: Student, x: torch.Tensor, where: str, *, pad_x: int = 0, pad_out: int = 0,
                 canaries: bool = True) -> None:
    """The kernel, launched here with grid (M,) and BLOCK = next_power_of_2(N) (rows ``pad_x``/``pad_out``
    elements of padding apart): its output within :data:`TOLERANCE` of the softmax, ``x`` untouched, and
    (``canaries``) nothing written outside the output's rows."""
    rows, cols = x.shape
    layout = "" if not (pad_x or pad_out) else f", rows {cols + pad_x} (x) and {cols + pad_out} (out) elements apart"
    where = f"{where}: {describe(x)}{layout}"
    _, (flat, got, so) = _launch(host, x, where, pad_x, pad_out)
    problem = probe.compare(got, expected(x))
    if problem:
        raise CheckFailed(f"{where}: {problem}")
    if canaries and not probe.intact(flat, rows, cols, so, OUT_FILL):
        raise CheckFailed(f"{where}: the kernel wrote outside the output's rows (past a row's end, into the padding "
                          "or past the tensor): mask the store as well as the load")


def check_traffic(host: Student, x: torch.Tensor, where: str) -> dict[str, Any]:
    """The bytes the kernel's programs loaded and stored, counted by the interpreter in the kernel's host:
    at least the minimum each, at most :data:`TRAFFIC_FACTOR` times it in all."""
    where = f"{where}: {describe(x)}"
    report, _ = _launch(host, x, where, 0, 0)
    problem = probe.traffic_problem(report, x.shape[0], x.shape[1], x.element_size())
    if problem:
        raise CheckFailed(f"{where}: {problem}")
    return report


# ---------------------------------------------------------------------------------------------
# The launcher, cross-checked
# ---------------------------------------------------------------------------------------------


def _transform(case: Any) -> tuple[float, float]:
    g = torch.Generator().manual_seed(seed("triton_softmax", "transform", case))
    scale = float(0.5 + 3.0 * torch.rand((), generator=g, dtype=torch.float64))
    sign = 1.0 if float(torch.rand((), generator=g, dtype=torch.float64)) < 0.5 else -1.0
    shift = float(4.0 * torch.rand((), generator=g, dtype=torch.float64) - 2.0)
    return sign * scale, shift


def check_launcher(host: Student, x: torch.Tensor, where: str) -> None:
    """``softmax(x)`` with the stand-in: one launch, grid (M,), x itself, a new output of x's dtype and shape,
    N, the strides, BLOCK = next_power_of_2(N), and exactly what the stand-in wrote returned; x untouched."""
    where = f"{where}: softmax(x), x a contiguous {x.shape[0]} x {x.shape[1]} {str(x.dtype)[6:]} tensor"
    scale, shift = _transform((tuple(x.shape), str(x.dtype)))
    recorder = probe.Recorder(x, scale, shift, host.parameters)
    shared = host.share(x)
    try:
        result = host.probe("triton_softmax:launcher", shared, recorder.__call__, list(host.parameters))
    except StudentRaised as exc:
        raise CheckFailed(f"{where}: your launcher raised {exc.type_name}: {exc.message}\n"
                          f"{exc.student_traceback}".rstrip()) from None
    if not torch.equal(shared.read().view(torch.uint8), x.view(torch.uint8)):
        raise CheckFailed(f"{where}: softmax changed its input x; it must return a new tensor and leave x as it was")
    found = probe.launcher_problems(x, result, recorder.launches, probe.transform(x, scale, shift),
                                    host.parameters)
    if found:
        raise CheckFailed(f"{where}: " + "; ".join(found))


def check_rejects(host: Student, x: torch.Tensor, shape: tuple[int, ...], stride: tuple[int, ...],
                  where: str) -> None:
    """``softmax`` of the view ``(shape, stride)`` of ``x``'s memory (not a contiguous 2-D tensor) raises
    ValueError and launches nothing."""
    shared = host.share(x.reshape(-1))
    view = shared.view(shape, stride)
    recorder = probe.Recorder(view.tensor.clone(), 1.0, 0.0, host.parameters)
    where = f"{where}: softmax(x), x of shape {shape} and strides {stride}"
    try:
        host.probe("triton_softmax:launcher", view, recorder.__call__, list(host.parameters))
    except StudentRaised as exc:
        if not exc.is_a("ValueError"):
            raise CheckFailed(f"{where}: raised {exc.type_name}: {exc.message}; the specification asks for "
                              "ValueError") from None
        if recorder.launches:
            raise CheckFailed(f"{where}: raised ValueError, but only after launching the kernel") from None
        return
    raise CheckFailed(f"{where}: returned without raising; the specification asks for ValueError when x is not a "
                      "contiguous 2-D tensor")


# ---------------------------------------------------------------------------------------------
# On a CUDA device: the kernel compiled, against torch.softmax
# ---------------------------------------------------------------------------------------------


def _timed(host: Student, repeats: int) -> tuple[float, Any]:
    start = time.perf_counter()
    sums = host.probe("triton_softmax:cuda_kernel", None, repeats, _timeout=120.0)
    return time.perf_counter() - start, sums


def check_speed(x: torch.Tensor, where: str, kernel: Any, launcher: Any, rounds: int = 3) -> str:
    """On a CUDA device: the kernel's part compiled, launched by the probe with grid (M,), against
    ``torch.softmax`` in a host of its own, both timed here in alternating rounds; at most
    :data:`SPEED_FACTOR` times as long (plus :data:`SPEED_SLACK`).  Without a CUDA device: nothing."""
    if not torch.cuda.is_available():
        return "no CUDA device: not timed"
    where = f"{where}: {describe(x)} on the GPU"
    want = expected(x)
    with kernel_host(kernel, launcher, interpret=None) as mine, \
            Student(parts=[_setup(None), ("<triton_softmax: torch.softmax>", "import torch\n")]) as ref:
        try:
            got = mine.probe("triton_softmax:cuda_kernel", x, 0, _timeout=300.0)
        except StudentRaised as exc:
            raise CheckFailed(f"{where}: your kernel failed compiled on the GPU: {exc.type_name}: "
                              f"{exc.message}") from None
        problem = probe.compare(got, want)
        if problem:
            raise CheckFailed(f"{where}, compiled: {problem}")
        ref.probe("triton_softmax:cuda_kernel", x, 0, _timeout=300.0)
        per_call = _timed(ref, 10)[0] / 10
        repeats = max(10, min(5000, math.ceil(0.05 / max(per_call, 1e-6))))
        ours, theirs = [], []
        for _ in range(rounds):
            t, sums = _timed(mine, repeats)
            if type(sums) is not torch.Tensor or sums.shape != (x.shape[0],) or not torch.allclose(
                    sums, torch.ones_like(sums), rtol=1e-2, atol=1e-2):
                raise CheckFailed(f"{where}: the timed launches did not compute the softmax")
            ours.append(t)
            theirs.append(_timed(ref, repeats)[0])
    mine_s, ref_s = min(ours) / repeats, min(theirs) / repeats
    if min(ours) > SPEED_FACTOR * min(theirs) + SPEED_SLACK:
        raise CheckFailed(f"{where}: {mine_s * 1e3:.3f} ms per launch, torch.softmax {ref_s * 1e3:.3f} ms: more than "
                          f"{SPEED_FACTOR:g}x as long (one program per row, the row in one block, read once)")
    return f"{mine_s * 1e3:.3f} ms per launch, torch.softmax {ref_s * 1e3:.3f} ms"
