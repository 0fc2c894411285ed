"""The checker's side of the ``roofline_place`` exercise: inputs, expected values, counted bytes, verdicts.

The student writes, in plain Python, the FLOPs and the minimum bytes of six operations (part 1), an
operation's place on a hierarchical roofline (part 2) and the bytes two of the course's Triton kernels
move (part 3).  Everything is judged here, on inputs drawn for each submission (:func:`hidden_runs`,
from :func:`~autograder.trusted.seed`):

* **costs** (part 1): the student's functions are called in a host (:class:`~autograder.trusted.Student`,
  the solution cells and nothing else, read first with :data:`~dlperf.grading.probes.roofline_place.RULES`) on
  shapes and dtypes the notebook never shows, and compared with values derived from the shapes of the
  operation's tensors (:func:`cost`: every tensor in and out once for the bytes; for the products, the
  multiply-adds of each output element, as PyTorch's FLOP counter counts them); the bytes of no operation
  are written out here as a formula;
* **place** (part 2): ``roofline(flops, traffic, peak, bandwidth)`` on the costs of those operations
  (computed here) placed on machines chosen around each operation's ridge, so that the same operation is
  memory-bound on one and compute-bound on another, and on two-level machines where the cache's roof
  binds (:func:`place`);
* **kernels** (part 3): the bytes the student predicts for ``matmul_tiled`` (tile sizes that do not divide
  the matrix, ``BLOCK_M != BLOCK_N``, float16 and float32) and ``layer_norm`` are compared with the bytes
  **counted** by Triton's interpreter in a host of its own that runs no student code
  (:func:`dlperf.grading.probes.roofline_place.count`), never with a claim of the student's process.

The public checker holds no formula of part 3 either: the expected bytes are the count.  The runs (one
student host, one counting host) are made once per submission and shared by the three hidden cells; every
hidden cell applies the reading first (a refused reading costs every cell).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

from dlperf.grading.probes import roofline_place as probe
from dlperf.grading.reading import read

from autograder.exercises import self_check_case
from autograder.trusted import CheckFailed, Student, StudentRaised, seed, solution_parts

__all__ = ["COSTS", "FUNCTIONS", "SELF_CHECK_RUNS", "case", "check", "cost", "hidden_runs", "place"]

COSTS = ("matmul_cost", "elementwise_cost", "softmax_cost", "layer_norm_cost", "conv2d_cost", "attention_cost")
KERNELS = {"tiled": "tiled_matmul_traffic", "layer_norm": "layer_norm_traffic"}
FUNCTIONS = (*COSTS, "roofline", *KERNELS.values())
RTOL = 1e-9


# -- the expected values -------------------------------------------------------------------------------------

def _itemsize(dtype: str) -> int:
    import torch

    return torch.empty((), dtype=getattr(torch, dtype)).element_size()


def cost(name: str, args: dict[str, Any]) -> tuple[int, int]:
    """``(FLOPs, minimum bytes)`` of the operation ``name`` (one of :data:`COSTS`) with keyword ``args``,
    from the shapes of the tensors the operation takes and returns:

    * FLOPs: for the products (matmul, conv2d, attention) 2 per multiply-add, the multiply-adds counted from
      the output's shape and the length of each dot product (what ``torch.utils.flop_counter.FlopCounterMode``
      reports for ``torch.mm``, ``F.conv2d`` and ``F.scaled_dot_product_attention``; the tests hold them
      against it: the counter is not imported here, it imports Triton); for the others the specification's
      count per element of the output;
    * the minimum bytes: every tensor the operation takes and every tensor it returns, once each, in
      ``dtype`` (the operation's intermediates and a convolution's padding are no tensors of it)."""
    a = dict(args)
    s = _itemsize(a.pop("dtype"))
    if name == "matmul_cost":                      # C (m x n) = A (m x k) @ B (k x n)
        inputs, out = [(a["m"], a["k"]), (a["k"], a["n"])], (a["m"], a["n"])
        dot = a["k"]                               # each output element: a dot product of length k
    elif name == "elementwise_cost":               # `inputs` tensors of n elements in, one out
        inputs, out, per_element = [(a["n"],)] * a["inputs"], (a["n"],), a["ops"]
    elif name == "softmax_cost":                   # over the last dimension
        inputs, out, per_element = [(a["rows"], a["cols"])], (a["rows"], a["cols"]), 5
    elif name == "layer_norm_cost":                # over the last dimension, with a weight and a bias
        inputs, out, per_element = [(a["rows"], a["cols"]), (a["cols"],), (a["cols"],)], (a["rows"], a["cols"]), 7
    elif name == "conv2d_cost":                    # stride 1, no bias
        side = [a["height"], a["width"]]
        inputs = [(a["batch"], a["c_in"], *side), (a["c_out"], a["c_in"], a["kernel"], a["kernel"])]
        out = (a["batch"], a["c_out"], *(x + 2 * a["padding"] - a["kernel"] + 1 for x in side))
        dot = math.prod(inputs[1][1:])             # over c_in x kernel x kernel inputs
    elif name == "attention_cost":                 # softmax(Q K^T / sqrt(d)) V, fused
        inputs = [(a["batch"], a["heads"], a["seq"], a["head_dim"])] * 3
        out = inputs[0]
        dot = 2 * a["seq"]                         # Q K^T and P V: 2 seq^2 head_dim multiply-adds per head,
        #                                            2 seq per element of the output
    else:
        raise ValueError(f"unknown operation {name!r}")
    flops = 2 * dot * math.prod(out) if name in ("matmul_cost", "conv2d_cost", "attention_cost") else \
        per_element * math.prod(out)
    return int(flops), sum(math.prod(shape) for shape in (*inputs, out)) * s


def place(flops: float, traffic: dict[str, float], peak: float, bandwidth: dict[str, float]) -> dict[str, Any]:
    """The hierarchical roofline (:func:`dlperf.probe.attainable_flops` at every level): intensity per level,
    attainable the lowest of the levels' roofs, and the bound: ``"compute"`` when the peak is that lowest
    roof (a tie included), else the level whose roof is below the peak and lowest."""
    from dlperf.probe import attainable_flops

    intensity = {level: flops / traffic[level] for level in traffic}
    roofs = {level: attainable_flops(intensity[level], peak, bandwidth[level]) for level in traffic}
    lowest = min(roofs, key=lambda level: roofs[level])
    return {"intensity": intensity, "attainable": roofs[lowest],
            "bound": "compute" if roofs[lowest] >= peak else lowest}


# -- the cases -----------------------------------------------------------------------------------------------

SELF_CHECK_RUNS = {
    "costs": [("matmul_cost", {"m": 96, "n": 40, "k": 200, "dtype": "bfloat16"}),
              ("elementwise_cost", {"n": 1000, "inputs": 3, "ops": 2, "dtype": "float32"}),
              ("softmax_cost", {"rows": 12, "cols": 100, "dtype": "float16"}),
              ("layer_norm_cost", {"rows": 10, "cols": 64, "dtype": "float32"}),
              ("conv2d_cost", {"batch": 2, "c_in": 3, "height": 10, "width": 12, "c_out": 8, "kernel": 3,
                               "padding": 0, "dtype": "float32"}),
              ("attention_cost", {"batch": 1, "heads": 4, "seq": 128, "head_dim": 32, "dtype": "bfloat16"})],
    "place": [  # (case, flops, traffic, peak, bandwidth)
        ("an elementwise add on 100 GFLOP/s, 20 GB/s", 1e6, {"DRAM": 1.2e7}, 1e11, {"DRAM": 2e10}),
        ("a matmul on 100 GFLOP/s, 20 GB/s", 2e9, {"DRAM": 3e6}, 1e11, {"DRAM": 2e10}),
        ("a matmul on two levels, the cache binds", 2e9, {"DRAM": 3e6, "L2": 4e8}, 2e11,
         {"DRAM": 5e10, "L2": 2e11}),
    ],
    "kernels": [["tiled", 20, 24, 16, 16, 8, 8, "float32"], ["tiled", 32, 32, 32, 16, 16, 16, "float16"],
                ["layer_norm", 4, 24, "float32"]],
}

_DTYPES = ("float32", "bfloat16", "float16", "float64", "float8_e4m3fn")


def hidden_runs(tag: str = "hidden") -> dict[str, list[Any]]:
    """The hidden cells' cases, drawn from the submission's seed: operations of six kinds, machines placed
    around each one's ridge (so that it flips from memory- to compute-bound), and kernel launches."""
    rng = random.Random(seed("roofline_place", tag))
    dt = lambda i: rng.choice(_DTYPES[:3]) if i == 0 else rng.choice(_DTYPES)   # noqa: E731 (first: s >= 2)
    costs: list[tuple[str, dict[str, Any]]] = []
    for i in range(3):
        costs.append(("matmul_cost", {"m": rng.randrange(1, 5000), "n": rng.randrange(1, 5000),
                                      "k": rng.randrange(1, 5000), "dtype": dt(i)}))
        costs.append(("elementwise_cost", {"n": rng.randrange(1, 10**8), "inputs": rng.randrange(1, 5),
                                           "ops": rng.randrange(2 if i == 0 else 1, 9), "dtype": dt(i)}))
        costs.append(("softmax_cost", {"rows": rng.randrange(1, 5000), "cols": rng.randrange(1, 50000),
                                       "dtype": dt(i)}))
        costs.append(("layer_norm_cost", {"rows": rng.randrange(1, 5000), "cols": rng.randrange(1, 10000),
                                          "dtype": dt(i)}))
        kernel = rng.choice((1, 3, 5, 7))
        costs.append(("conv2d_cost", {"batch": rng.randrange(1, 33), "c_in": rng.randrange(1, 257),
                                      "height": rng.randrange(kernel, 120), "width": rng.randrange(kernel, 120),
                                      "c_out": rng.randrange(1, 257), "kernel": kernel,
                                      "padding": (kernel // 2) if i != 1 else 0, "dtype": dt(i)}))
        costs.append(("attention_cost", {"batch": rng.randrange(1, 17), "heads": rng.randrange(1, 33),
                                         "seq": rng.randrange(1, 9000), "head_dim": rng.choice((32, 64, 80, 128)),
                                         "dtype": dt(i)}))
    roof: list[tuple[str, float, dict[str, float], float, dict[str, float]]] = []
    for name, args in costs[:6]:        # each kind of operation once, on a machine each side of its ridge
        flops, nbytes = cost(name, args)
        bw = rng.uniform(5e10, 5e12)
        for factor in (rng.uniform(1.5, 6.0), 1 / rng.uniform(1.5, 6.0)):   # memory-bound, then compute-bound
            peak = flops / nbytes * bw * factor    # the ridge peak / bw is factor x the intensity
            roof.append((f"{_call(name, args)} on a machine of {_si(peak, 'FLOP/s')} and {_si(bw, 'B/s')}",
                         flops, {"DRAM": nbytes}, peak, {"DRAM": bw}))
    for bound in ("L2", "DRAM", "compute"):   # a tiled matmul on two levels: the cache's traffic is the tiles'
        m, n, k = (rng.randrange(512, 4097) for _ in range(3))
        tile = 16 if bound == "L2" else rng.choice((32, 64))   # small tiles: the cache moves the most
        flops, dram = cost("matmul_cost", {"m": m, "n": n, "k": k, "dtype": "bfloat16"})
        l2 = int(dram * (2 * min(m, n, k) / tile) * rng.uniform(0.5, 1.0))   # the tiles' re-reads of A and B
        bw = rng.uniform(1e12, 5e12)
        even = (flops / dram * bw) / (flops / l2)     # the cache bandwidth at which both roofs meet
        bw2 = even * (rng.uniform(0.3, 0.6) if bound == "L2" else rng.uniform(1.5, 3.0))
        lo = min(flops / dram * bw, flops / l2 * bw2)
        peak = lo * (rng.uniform(1.5, 4.0) if bound != "compute" else 1 / rng.uniform(1.5, 4.0))
        roof.append((f"C = A @ B, {m} x {k} @ {k} x {n} bfloat16 in {tile} x {tile} tiles, on two levels "
                     f"({_si(peak, 'FLOP/s')}; DRAM {_si(bw, 'B/s')}, L2 {_si(bw2, 'B/s')})",
                     flops, {"DRAM": dram, "L2": l2}, peak, {"DRAM": bw, "L2": bw2}))
    kernels: list[list[Any]] = []
    for i in range(4):
        bm, bn = rng.choice((8, 16, 32)), rng.choice((8, 16, 32))
        m, n, k = (rng.randrange(17, 49) for _ in range(3))
        while i == 0 and (bm == bn or m == n or m % bm == 0 or n % bn == 0):   # the first: ragged, not square,
            bm, bn = rng.choice((8, 16, 32)), rng.choice((8, 16, 32))      # BLOCK_M != BLOCK_N
            m, n = rng.randrange(17, 49), rng.randrange(17, 49)
        kernels.append(["tiled", m, n, k, bm, bn, rng.choice((8, 16)), "float16" if i % 2 else "float32"])
    kernels.append(["layer_norm", rng.randrange(2, 7), rng.randrange(17, 100), "float16"])
    kernels.append(["layer_norm", rng.randrange(2, 7), rng.randrange(17, 100), "float32"])
    return {"costs": costs, "place": roof, "kernels": kernels}


def _si(value: float, unit: str) -> str:
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _call(name: str, args: dict[str, Any]) -> str:
    return f"{name}(" + ", ".join(f"{k}={v!r}" for k, v in args.items()) + ")"


def _kernel_call(case: Sequence[Any]) -> str:
    kind, *shape = case
    if kind == "tiled":
        m, n, k, bm, bn, bk, dtype = shape
        return (f"tiled_matmul_traffic({m}, {n}, {k}, {bm}, {bn}, {bk}, {dtype!r}) (matmul_tiled of a {m} x {k} "
                f"and a {k} x {n} {dtype} matrix, tiles {bm} x {bn}, {bk} along k)")
    rows, cols, dtype = shape
    return f"layer_norm_traffic({rows}, {cols}, {dtype!r}) (layer_norm of a {rows} x {cols} {dtype} matrix)"


# -- the runs: made once per submission ----------------------------------------------------------------------

_made: dict[str, Any] = {"key": None, "value": None}


def _call_all(host: Student, name: str, calls: Sequence[Sequence[Any]], kwargs: bool = False) -> list[Any]:
    out = []
    for args in calls:
        try:
            out.append(("ok", host.call(name, **args[0]) if kwargs else host.call(name, *args)))
        except StudentRaised as exc:
            out.append(("raised", f"{exc.type_name}: {exc.message}"))
    return out


def _make(solution: Sequence[Any], source: Sequence[tuple[str, str]], runs: dict[str, Any]) -> dict[str, Any]:
    got: dict[str, Any] = {}
    host = Student(*solution, timeout=30) if solution else Student(parts=source, timeout=30)
    with host:
        if "costs" in runs:
            got["costs"] = [_call_all(host, name, [(args,)], kwargs=True)[0] for name, args in runs["costs"]]
        if "place" in runs:
            got["place"] = _call_all(host, "roofline", [(f, dict(t), p, dict(b)) for _, f, t, p, b in runs["place"]])
        if "kernels" in runs:
            got["kernels"] = [_call_all(host, KERNELS[c[0]], [c[1:]])[0] for c in runs["kernels"]]
    if "kernels" in runs:       # counted where no student code runs
        counter = Student(parts=[("<roofline_place: Triton's interpreter, no student code>", probe.SETUP)], timeout=120)
        with counter:
            got["counted"] = counter.probe("roofline_place:count", [list(c) for c in runs["kernels"]],
                                           seed("roofline_place", "tensors"))
    return got


def _runs(solution: Sequence[Any], source: Sequence[tuple[str, str]], runs: dict[str, Any]) -> dict[str, Any]:
    key = (tuple(tuple(p) for p in source), repr(runs))
    if _made["key"] != key:
        try:
            value: Any = _make(solution, source, runs)
        except CheckFailed as exc:
            value = exc
        _made["key"], _made["value"] = key, value
    if isinstance(_made["value"], CheckFailed):
        raise CheckFailed(str(_made["value"]))
    return _made["value"]


# -- the verdicts --------------------------------------------------------------------------------------------

def _close(got: Any, want: float) -> bool:
    return (type(got) in (int, float) and math.isfinite(got)
            and abs(got - want) <= RTOL * max(abs(want), 1e-300))


def _pair(result: tuple[str, Any], what: str) -> tuple[Any, Any]:
    status, value = result
    if status == "raised":
        raise CheckFailed(f"{what}: your function raised {value}")
    if type(value) not in (list, tuple) or len(value) != 2:
        raise CheckFailed(f"{what}: returned {value!r}; expected a pair of numbers")
    return value[0], value[1]


def _cost_hint(name: str, args: dict[str, Any], flops: Any, nbytes: Any, want: tuple[int, int]) -> str:
    s = _itemsize(args["dtype"])
    if _close(flops, want[0] / 2):
        return " (a multiply-add is 2 FLOP: a matrix product of m x k by k x n does 2 m n k)"
    if _close(nbytes, want[1] / s) and s > 1:
        return f" (that many elements, not bytes: a {args['dtype']} element is {s} bytes)"
    if type(nbytes) in (int, float) and nbytes > want[1]:
        return (" (more than the minimum: count each input read once and each output written once; the "
                "intermediates stay on chip in a fused kernel, and the padding zeros are never read)")
    return ""


def _costs(runs: dict[str, Any], got: dict[str, Any]) -> None:
    for (name, args), result in zip(runs["costs"], got["costs"]):
        what = _call(name, args)
        flops, nbytes = _pair(result, what)
        want = cost(name, args)
        if not (_close(flops, want[0]) and _close(nbytes, want[1])):
            raise CheckFailed(f"{what} returned (FLOPs, bytes) = ({flops!r}, {nbytes!r}); expected "
                              f"({want[0]}, {want[1]}){_cost_hint(name, args, flops, nbytes, want)}")


def _place(runs: dict[str, Any], got: dict[str, Any]) -> None:
    for (label, flops, traffic, peak, bandwidth), (status, value) in zip(runs["place"], got["place"]):
        what = f"roofline of {label}"
        if status == "raised":
            raise CheckFailed(f"{what}: your function raised {value}")
        want = place(flops, traffic, peak, bandwidth)
        if not isinstance(value, dict) or set(value) != {"intensity", "attainable", "bound"}:
            raise CheckFailed(f"{what}: returned {value!r}; expected a dict with the keys intensity, attainable "
                              "and bound")
        intensity = value["intensity"]
        if (not isinstance(intensity, dict) or set(intensity) != set(traffic)
                or not all(_close(intensity[k], want["intensity"][k]) for k in traffic)):
            raise CheckFailed(f"{what}: intensity {intensity!r}; expected {want['intensity']!r} (FLOPs over the "
                              "bytes moved at each level)")
        if value["bound"] != want["bound"]:
            ridges = ", ".join(f"{k} {peak / bandwidth[k]:.4g}" for k in traffic)
            raise CheckFailed(f"{what}: bound {value['bound']!r}; expected {want['bound']!r} (the ridge of a level "
                              f"is peak / bandwidth, in FLOP/byte: {ridges}; an intensity below a level's ridge puts "
                              "that level's roof below the peak, and the lowest roof binds)")
        if not _close(value["attainable"], want["attainable"]):
            above = type(value["attainable"]) in (int, float) and value["attainable"] > want["attainable"]
            raise CheckFailed(f"{what}: attainable {value['attainable']!r} FLOP/s; expected {want['attainable']!r}"
                              + (" (above the roof: the attainable rate is the minimum of the peak and every "
                                 "level's intensity x bandwidth)" if above else ""))


def _kernels(runs: dict[str, Any], got: dict[str, Any]) -> None:
    for case, result, counted in zip(runs["kernels"], got["kernels"], got["counted"]):
        what = _kernel_call(case)
        loaded, stored = _pair(result, what)
        if not (_close(loaded, counted[0]) and _close(stored, counted[1])):
            raise CheckFailed(f"{what} returned (loaded, stored) = ({loaded!r}, {stored!r}); the grader launched "
                              f"the kernel in Triton's interpreter and counted ({counted[0]}, {counted[1]}) bytes")


_VERDICTS: dict[str, Callable[[dict[str, Any], dict[str, Any]], None]] = {
    "costs": _costs, "place": _place, "kernels": _kernels}


def check(*solution: Any, source: Sequence[tuple[str, str]] | None = None, runs: dict[str, Any], what: str) -> None:
    """``what``: ``costs`` (part 1), ``place`` (part 2) or ``kernels`` (part 3), judged on ``runs``
    (:func:`hidden_runs` or :data:`SELF_CHECK_RUNS`).

    ``solution``: the solution's functions (none: load ``source`` itself); ``source``: their cells (by default
    their ``solution_parts``), read with :data:`~dlperf.grading.probes.roofline_place.RULES` first.  The runs
    are made once and kept for the other cells (same solution, same runs)."""
    if source is None:
        source = solution_parts(*solution)
    found = read(source, probe.RULES)
    if found:
        raise CheckFailed("the grader's reading of your cells refuses (the self-check's reading row shows the "
                          "same):\n" + "\n".join(found))
    _VERDICTS[what](runs, _runs(solution, source, runs))


def case(*solution: Any, what: str, runs: dict[str, Any] | None = None) -> Callable[[], tuple[Any, Any, bool]]:
    """A self-check case: :func:`check` of part ``what`` on ``runs`` (by default that part's
    :data:`SELF_CHECK_RUNS`), :func:`autograder.exercises.self_check_case`."""
    return self_check_case(check, solution, runs or {what: SELF_CHECK_RUNS[what]}, what)
