"""The checker's side of the ``flash_attention`` exercise: the runs, the expected values, the verdicts.

The student writes FlashAttention-2's forward kernel ``flash_fwd_kernel`` in Triton (no launcher); it is
graded as ``triton_softmax``'s kernel is (the public half is :mod:`dlperf.grading.probes.flash_attention`,
which the self-check uses through :func:`case`, the grader's own code on other shapes).

**The kernel, launched here.**  The reading of the kernel's cell comes first (an allow-list,
``probe.RULES``: the kernels' bodies use only ``tl``, their arguments and locals, other kernels), in every
hidden cell.  Then only the ``@triton.jit`` functions of that cell, its imports and plain constants are
loaded into a host whose Triton mode was set to the interpreter first (with the interpreter's
``bfloat16`` fixed, ``probe.prepare``); no other code of the notebook runs there.  This process shares
``q``, ``k``, ``v``, ``out`` and ``lse`` with it, each followed by a tail of canaries (``probe.buffer``),
and the public probe ``launch`` launches ``flash_fwd_kernel[(cdiv(N, BLOCK_M), H)](q, k, v, out, lse, N,
scale, CAUSAL, BLOCK_M, BLOCK_N, HEAD_DIM)`` with the grid, the sizes and the blocks chosen here.  The
values are read here from that memory and compared with attention computed here in ``float64``; the
bytes are counted in the host by the interpreter, where nothing but the allow-listed kernel runs.

**Once per submission.**  The launches of :data:`RUNS` (float16 and bfloat16, head dimensions 16 and 32,
sequence lengths that are not multiples of the blocks, causal and not) are made once, in one host, and
kept for the three hidden cells (:class:`~autograder.exercises.runs.RunsOnce`): ``values`` grades the
runs without the mask, ``causal`` those with it (output, log-sum-exp, canaries, inputs untouched),
``traffic`` every run's bytes against ``flash_bytes`` (on right values without the mask).  Time is not
graded.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from autograder.exercises.runs import RunsOnce
from autograder.trusted import CheckFailed, Student, StudentRaised, seed
from dlperf.grading.probes import flash_attention as probe
from dlperf.grading.reading import read

__all__ = ["BYTES_CASES", "RUNS", "SELF_CHECK_BYTES_CASES", "SELF_CHECK_RUNS", "bytes_case", "case", "check",
           "check_bytes"]

# (heads, seq_len, head_dim, dtype, causal, BLOCK_M, BLOCK_N): lengths not multiples of the blocks
RUNS = [(2, 40, 16, torch.float16, False, 16, 16), (2, 13, 32, torch.bfloat16, False, 16, 16),
        (2, 37, 32, torch.float16, True, 32, 16), (2, 40, 16, torch.bfloat16, True, 16, 16)]
SELF_CHECK_RUNS = [(2, 35, 16, torch.float16, False, 16, 16), (1, 29, 32, torch.bfloat16, True, 16, 16)]
# (heads, seq_len, head_dim, itemsize, BLOCK_M, BLOCK_N, causal): kernel_bytes against flash_bytes
BYTES_CASES = [(2, 64, 16, 2, 16, 16, False), (3, 40, 32, 2, 16, 16, False), (2, 64, 16, 2, 16, 16, True),
               (2, 40, 16, 2, 16, 16, True), (4, 37, 32, 2, 32, 16, True), (1, 100, 64, 4, 64, 32, True),
               (8, 1000, 128, 2, 128, 64, True), (1, 5, 16, 2, 16, 16, True), (2, 130, 64, 4, 64, 16, False)]
SELF_CHECK_BYTES_CASES = [(1, 32, 16, 2, 16, 16, False), (2, 48, 32, 2, 16, 16, True), (1, 45, 16, 2, 32, 16, True)]
SETUP = ("from dlperf.grading.probes.flash_attention import prepare as _prepare\n"
         "_prepare(True)\n"
         "del _prepare\n")


def describe(run: Sequence[Any]) -> str:
    heads, n, d, dtype, causal, bm, bn = run
    return (f"{'causal' if causal else 'no mask'}, {str(dtype)[6:]}, {heads} heads x {n} queries x head_dim {d}, "
            f"BLOCK_M={bm}, BLOCK_N={bn}")


def _source(kernel: Any) -> tuple[str, str]:
    from autograder.trusted import solution_parts

    plain = kernel if callable(kernel) and not hasattr(kernel, "fn") else getattr(kernel, "fn", kernel)
    return solution_parts(plain)[0]


def _launches(kfile: str, ksource: str, runs: Sequence[Any]) -> list[dict[str, Any]]:
    done: list[dict[str, Any]] = []
    parts = [("<flash_attention: the grader's choice of Triton mode>", SETUP), (kfile, probe.kernel_source(ksource))]
    with Student(parts=parts, timeout=120.0) as host:
        for run in runs:
            heads, n, d, dtype, causal, bm, bn = run
            q, k, v = probe.inputs(heads, n, d, dtype, seed("flash_attention", *[str(x) for x in run]) % 2**31)
            flats = [probe.buffer(t, probe.IN_FILL) for t in (q, k, v)]
            flats += [probe.buffer(torch.zeros_like(q), probe.OUT_FILL),
                      probe.buffer(torch.zeros(heads, n, dtype=torch.float32), probe.OUT_FILL)]
            shared = [host.share(f) for f in flats]
            shapes = [(heads, n, d)] * 4 + [(heads, n)]
            views = [s.view(shape, torch.empty(shape).stride()) for s, shape in zip(shared, shapes)]
            record: dict[str, Any] = {"run": run, "case": describe(run), "q": q, "k": k, "v": v}
            try:
                record["report"] = host.probe("flash_attention:launch", *views, causal, bm, bn)
            except StudentRaised as exc:
                record["error"] = (f"your kernel, launched on grid ({-(-n // bm)}, {heads}), raised {exc.type_name}: "
                                   f"{exc.message}\n{exc.student_traceback}".rstrip())
            except CheckFailed as exc:
                record["error"] = f"the kernel's process failed: {exc}"
                done.append(record)
                break       # the host is gone
            after = [s.read() for s in shared]
            record["inputs"] = probe.inputs_problem(flats[:3], after[:3])
            record["out"], record["lse"] = after[3], after[4]
            done.append(record)
    return done


def _values(record: dict[str, Any], gate: str = "") -> None:
    where = f"{gate}{record['case']}"
    if "error" in record:
        raise CheckFailed(f"{where}: {record['error']}")
    problem = record["inputs"] or probe.values_problem(record["q"], record["k"], record["v"], record["run"][4],
                                                      record["out"], record["lse"])
    if problem:
        raise CheckFailed(f"{where}: {problem}")


def _traffic(record: dict[str, Any]) -> None:
    if "error" in record:
        raise CheckFailed(f"{record['case']}: {record['error']}")
    heads, n, d, dtype, causal, bm, bn = record["run"]
    itemsize = torch.empty((), dtype=dtype).element_size()
    problem = probe.traffic_problem(record["report"], heads, n, d, itemsize, bm, bn, causal)
    if problem:
        raise CheckFailed(f"traffic, {record['case']}: {problem}")


_RUNS = RunsOnce()


def check(kernel: Any, *, what: str, runs: Sequence[Any] = RUNS) -> None:
    """``what``: ``values`` (the runs without the mask), ``causal`` (those with it) or ``traffic`` (every
    run's bytes, on right values without the mask).  The reading of the kernel's cell first; the launches
    are made once for the kernel's cell and ``runs`` and kept for the other cells."""
    kfile, ksource = _source(kernel)
    found = probe.reading(ksource)
    if found:
        raise CheckFailed("the grader's reading of your kernel's cell (the same as your self-check's) refuses:\n"
                          + "\n".join(found[:6]))
    records = list(_RUNS.each([(kfile, ksource)], [tuple(runs)], lambda group: _launches(kfile, ksource, group)))
    if len(records) < len(runs):          # the host died: the run that killed it says why
        raise CheckFailed(f"{records[-1]['case']}: {records[-1].get('error', 'the kernel process died')}")
    for record in records:
        if what == "traffic":
            if not record["run"][4]:
                _values(record, "(traffic is graded on right values) ")
        elif record["run"][4] == (what == "causal"):
            _values(record)
    if what == "traffic":
        for record in records:
            _traffic(record)


def case(kernel: Any, *, what: str, runs: Sequence[Any] = SELF_CHECK_RUNS) -> Callable[[], tuple[Any, Any, bool]]:
    """A :class:`~dlperf.grading.SelfCheck` case: :func:`check` on ``runs`` (the grader's code, the same rules);
    the message of a failure is printed in full above the table."""
    def run() -> tuple[Any, Any, bool]:
        try:
            check(kernel, what=what, runs=runs)
        except CheckFailed as exc:
            print(f"{what}: {exc}\n")
            return str(exc).splitlines()[0][:60], "passes", False
        return "passes", "passes", True
    return run


# ---------------------------------------------------------------------------------------------
# Part 1: the closed form of the kernel's bytes (plain Python, called in a host of its own)
# ---------------------------------------------------------------------------------------------


def check_bytes(kernel_bytes: Any, cases: Sequence[Any] = BYTES_CASES) -> None:
    """``kernel_bytes(heads, seq_len, head_dim, itemsize, block_m, block_n, causal)`` in a host of its own (after
    the reading of its cell, :data:`probe.BYTES_RULES`) equals ``flash_bytes``'s ``{"load": ..., "store": ...}``
    for each of ``cases``."""
    from autograder.trusted import solution_parts
    from dlperf.kernels.flash import flash_bytes

    parts = solution_parts(kernel_bytes)
    found = read(parts, probe.BYTES_RULES)
    if found:
        raise CheckFailed("the grader's reading of your kernel_bytes cell (the same as your self-check's) refuses:\n"
                          + "\n".join(found[:6]))
    with Student(parts=parts, timeout=30.0) as host:
        for heads, n, d, itemsize, bm, bn, causal in cases:
            want = flash_bytes(heads, n, n, d, itemsize, bm, bn, causal)
            where = (f"kernel_bytes(heads={heads}, seq_len={n}, head_dim={d}, itemsize={itemsize}, block_m={bm}, "
                     f"block_n={bn}, causal={causal})")
            try:
                got = host.call("kernel_bytes", heads, n, d, itemsize, bm, bn, causal)
            except StudentRaised as exc:
                raise CheckFailed(f"{where} raised {exc.type_name}: {exc.message}") from None
            if not isinstance(got, dict) or set(got) != {"load", "store"} or any(
                    type(x) is not int for x in got.values()):
                raise CheckFailed(f"{where} returned {got!r}; expected a dict {{'load': int, 'store': int}}")
            if got != want:
                hint = ("; the store is the output (itemsize bytes per element) and the log-sum-exp (4 bytes per query)"
                        if got["store"] != want["store"] else
                        "; causal: program t loads the key blocks up to its last query, (t + 1) block_m - 1, and no "
                        "key past seq_len - 1" if causal else "; every program loads its queries once and every key "
                        "and value once")
                raise CheckFailed(f"{where} returned {got}, expected {want}{hint}")


def bytes_case(kernel_bytes: Any, cases: Sequence[Any] = SELF_CHECK_BYTES_CASES) -> Callable[[], tuple[Any, Any, bool]]:
    """A :class:`~dlperf.grading.SelfCheck` case: :func:`check_bytes` on ``cases`` (the grader's code)."""
    def run() -> tuple[Any, Any, bool]:
        try:
            check_bytes(kernel_bytes, cases)
        except CheckFailed as exc:
            print(f"kernel_bytes: {exc}\n")
            return str(exc).splitlines()[0][:60], "passes", False
        return "passes", "passes", True
    return run
