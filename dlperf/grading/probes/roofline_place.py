"""The rules of the ``roofline_place`` exercise (public: the self-check applies them) and its counting probe.

The student writes closed forms in plain Python: the FLOPs and the minimum bytes of six operations, an
operation's place on a (hierarchical) roofline, and the bytes two of the course's Triton kernels
(:mod:`dlperf.kernels.triton_kernels`) load and store.  The grader's reading of the three solution cells
(:func:`dlperf.grading.reading.read`, an allow-list) lets through the standard modules of
:data:`~dlperf.grading.reading.STANDARD_LIBRARY` (``math``, ...), the ordinary builtins, and the methods of
numbers, strings, lists, tuples and dicts; nothing else: no ``torch``, no ``triton``, no ``dlperf``.  A cell
that launched the kernel and counted it would answer with a measurement, not a prediction; the course
library's roofline helpers (``dlperf.probe.attainable_flops``, ``dlperf.roofline``) are what part 2 asks
for.

The bytes the student predicts are compared with bytes the grader **counts**: :func:`count` runs in a host
of its own, with Triton's interpreter chosen first (:func:`dlperf.grading.probes.triton_softmax.prepare`)
and no student code loaded, launches the library's kernels on random tensors and returns what
:func:`dlperf.kernels.traffic.count_traffic` saw.  Nothing the student writes runs in that process.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dlperf.grading.reading import DEFAULT_BUILTINS, STANDARD_LIBRARY, Rules

__all__ = ["DTYPES", "RULES", "SETUP", "count"]

# dtype name -> bytes per element: the names the grader passes, each with its itemsize (the specification's table)
DTYPES = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "int8": 1}

_ATTRIBUTES = {
    # dicts, lists, tuples, strings
    "items", "keys", "values", "get", "append", "extend", "insert", "pop", "index", "count", "copy", "update",
    "setdefault", "startswith", "endswith", "lower", "upper", "split", "join", "replace", "format", "strip",
    # numbers
    "real", "imag", "bit_length", "is_integer", "as_integer_ratio", "numerator", "denominator",
}

_LIBRARY = ("the closed forms are the exercise: plain Python and math are all the cells need (the course library "
            "and the kernels' counter measure what you are asked to predict)")

RULES = Rules(
    what="the roofline_place exercise's functions",
    imports=set(STANDARD_LIBRARY["imports"]),
    names=set(STANDARD_LIBRARY["names"]),
    builtins=DEFAULT_BUILTINS,
    attributes=_ATTRIBUTES,
    decorators=set(STANDARD_LIBRARY["decorators"]),
    classes=False,
    explain={**{name: _LIBRARY for name in ("dlperf", "dlperf.probe", "dlperf.roofline", "dlperf.kernels",
                                            "dlperf.kernels.traffic", "dlperf.kernels.triton_kernels",
                                            "autograder", "autograder.exercises", "triton", "triton.language")},
             "torch": "no tensor is needed: the functions take sizes and return numbers (the itemsizes are in "
                      "the specification's table)"},
)

SETUP = ("from dlperf.grading.probes.triton_softmax import prepare as _prepare\n"
         "_prepare(True)\n"
         "del _prepare\n")


def count(mod: Any, cases: Sequence[Sequence[Any]], seed: int = 0) -> list[list[int]]:
    """The host's probe (no student code in the host): for each case launch the library's kernel in
    Triton's interpreter on random tensors and return ``[loaded bytes, stored bytes]`` as counted.

    A case is ``["tiled", m, n, k, block_m, block_n, block_k, dtype]`` (:func:`matmul_tiled` of an
    ``m x k`` and a ``k x n`` matrix of ``dtype``) or ``["layer_norm", rows, cols, dtype]``
    (:func:`layer_norm` of a ``rows x cols`` matrix, weight and bias of ``cols``, all ``dtype``)."""
    import torch

    from dlperf.kernels import triton_kernels as K
    from dlperf.kernels.traffic import count_traffic

    gen = torch.Generator().manual_seed(int(seed) % 2**31)
    out = []
    for case in cases:
        kind, *shape = case
        dtype = getattr(torch, shape[-1])
        if kind == "tiled":
            m, n, k, bm, bn, bk = (int(v) for v in shape[:6])
            a, b = torch.randn(m, k, generator=gen).to(dtype), torch.randn(k, n, generator=gen).to(dtype)
            with count_traffic() as traffic:
                K.matmul_tiled(a, b, bm, bn, bk)
        elif kind == "layer_norm":
            rows, cols = int(shape[0]), int(shape[1])
            x, w, bias = (torch.randn(*s, generator=gen).to(dtype) for s in ((rows, cols), (cols,), (cols,)))
            with count_traffic() as traffic:
                K.layer_norm(x, w, bias)
        else:
            raise ValueError(f"unknown kernel {kind!r}")
        out.append([traffic.loaded_bytes, traffic.stored_bytes])
    return out
