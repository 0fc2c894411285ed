"""Measured collectives: an nccl-tests-style sweep on real process groups, and an alpha-beta fit.

:func:`sweep` starts ``ranks`` processes with :func:`dlperf.launch.launch`
(gloo on the CPU, NCCL with one GPU per rank where there are enough GPUs) and
times ``all_reduce``, ``reduce_scatter``, ``all_gather``, ``broadcast`` and
``all_to_all`` over a range of message sizes.  Under ``torchrun`` the same
worker, :func:`measure`, runs in the process group that already exists
(``python -m dlperf.collectives`` does either; ``--help`` says how).

**What is timed.**  After ten untimed barriers and small all-reduces for
the whole sweep, for each operation and size: ``warmup`` untimed calls,
then ``iters`` timed calls.  Before each call the ranks meet at a barrier;
each rank times its call between two device synchronisations (CUDA events on
a GPU, :mod:`dlperf.bench`'s clock); the time of an iteration is the *maximum
over the ranks*, since a collective is over only when its slowest rank is
done.  A row reports the median over the iterations and the interquartile
range.  (nccl-tests times a block of 20 back-to-back calls and, by default,
averages that block's time over the ranks, its ``-a 1``; ``-a 3`` takes the
maximum.  Timing each call separately gives a spread, which a shared machine
needs.)  The values are checked on the first warm-up call and on the last
timed call against sums written out in :func:`expected_output`; the ``wrong``
column counts the elements that differed, as nccl-tests' ``#wrong`` does.

**Bandwidths and the fit** (``busbw``, ``algbw``, :func:`fit_alpha_beta`, :class:`Fit`) are in
:mod:`dlperf.collective_model`, imported here.

Operations a backend cannot run are kept in the result as rows with status
``"unsupported"`` and the backend's message; they never get a number.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from .bench import Measurement, _Clock, format_bytes
from .collective_model import (OPS, Fit, _check_op, _check_ranks, algbw, busbw, busbw_factor, cost_model,
                               fit_alpha_beta, predict)
from .launch import default_backend, init_from_env, launch

__all__ = [
    "OPS",
    "all_gather_into",
    "reduce_scatter_into",
    "Fit",
    "Row",
    "Sweep",
    "algbw",
    "busbw",
    "busbw_factor",
    "cost_model",
    "expected_output",
    "fit_alpha_beta",
    "input_for",
    "measure",
    "message_sizes",
    "parse_size",
    "predict",
    "sweep",
]

# --------------------------------------------------------------------------- buffers and expected values


def _shapes(op: str, nbytes: int, n: int, element_size: int) -> tuple[int, int, int]:
    """``(input numel, output numel, S actually used)`` for a requested size ``S`` (nccl-tests' meaning)."""
    count = max(1, nbytes // element_size)
    if op in ("reduce_scatter", "all_gather", "all_to_all"):
        count = max(n, count - count % n)  # a multiple of n elements, at least one per rank
    used = count * element_size
    if op == "reduce_scatter":
        return count, count // n, used
    if op == "all_gather":
        return count // n, count, used
    return count, count, used


def _pattern(numel: int, dtype: torch.dtype) -> torch.Tensor:
    """The base values ``i mod 13``: small integers, exact in every floating type and in sums of a few ranks."""
    return (torch.arange(numel) % 13).to(dtype)


def input_for(op: str, rank: int, n: int, numel: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The input rank ``rank`` of ``n`` contributes to ``op`` (``numel`` elements; CPU tensor).

    ``all_reduce``, ``reduce_scatter``: ``base + rank``; ``all_gather``:
    ``base + rank`` (its block of ``numel`` elements); ``broadcast``: the root
    (rank 0) holds ``base``, every other rank ``base + rank`` (overwritten);
    ``all_to_all``: block ``j`` (the one sent to rank ``j``) is
    ``base_block + rank n + j``.  ``base[i] = i mod 13``.
    """
    base = _pattern(numel, dtype)
    if op == "all_to_all":
        block = numel // n
        offset = torch.arange(n, dtype=dtype).repeat_interleave(block) + rank * n
        return base + offset
    return base + rank


def expected_output(op: str, rank: int, n: int, numel: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """What rank ``rank`` must hold after ``op`` on the inputs of :func:`input_for`, written out.

    ``numel`` is the *input* size of a rank.  ``all_reduce``: ``n base + n(n-1)/2``;
    ``reduce_scatter``: block ``rank`` of that; ``all_gather``: the blocks
    ``base + j`` for ``j = 0 .. n-1`` one after the other; ``broadcast``:
    ``base``; ``all_to_all``: block ``j`` comes from rank ``j``, which sent
    ``base_block(rank) + j n + rank``.
    """
    _check_op(op)
    base = _pattern(numel, dtype)
    total = n * base + n * (n - 1) // 2
    if op == "all_reduce":
        return total
    if op == "reduce_scatter":
        block = numel // n
        return total[rank * block:(rank + 1) * block]
    if op == "all_gather":
        return torch.cat([base + j for j in range(n)])
    if op == "broadcast":
        return base
    block = numel // n
    return torch.cat([base[rank * block:(rank + 1) * block] + j * n + rank for j in range(n)])


def all_gather_into(output: torch.Tensor, tensor: torch.Tensor, group: Any = None, async_op: bool = False) -> Any:
    """Every rank's ``tensor`` concatenated along dim 0 into ``output``: ``dist.all_gather_single`` where torch
    has it (2.13 renamed the tensor forms), ``dist.all_gather_into_tensor`` before (the GPU machines' 2.11,
    where the model-parallelism chapter failed without it on 2026-11-26)."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, tensor, group=group, async_op=async_op)


def reduce_scatter_into(output: torch.Tensor, tensor: torch.Tensor, group: Any = None, async_op: bool = False) -> Any:
    """The sum over ranks of ``tensor``, this rank's 1/world slice of dim 0 into ``output``: ``dist.reduce_scatter_single``
    where torch has it, ``dist.reduce_scatter_tensor`` before (see :func:`all_gather_into`)."""
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return scatter(output, tensor, group=group, async_op=async_op)


def _call(op: str) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    """The torch.distributed call for ``op`` as ``f(input, output)`` (in-place ops ignore ``output``)."""
    return {
        "all_reduce": lambda i, o: dist.all_reduce(i),
        "reduce_scatter": lambda i, o: reduce_scatter_into(o, i),
        "all_gather": lambda i, o: all_gather_into(o, i),
        "broadcast": lambda i, o: dist.broadcast(i, src=0),
        "all_to_all": lambda i, o: dist.all_to_all_single(o, i),
    }[op]


_UNSUPPORTED = re.compile(r"not support|unsupported|not implemented|does not implement", re.IGNORECASE)


# --------------------------------------------------------------------------- rows and the sweep


@dataclass(frozen=True)
class Row:
    """One operation at one size: per-iteration times (maximum over ranks) and what they mean."""

    op: str
    nbytes: int
    count: int
    dtype: str
    ranks: int
    backend: str
    times: tuple[float, ...] = ()
    status: str = "ok"  # "ok", "unsupported" or "failed"
    note: str = ""
    wrong: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def measurement(self) -> Measurement:
        if not self.times:
            raise ValueError(f"{self.op} at {self.nbytes} B has no times: {self.status} {self.note}".rstrip())
        return Measurement(self.times, label=f"{self.op} {format_bytes(self.nbytes)}")

    @property
    def time(self) -> float:
        """Median seconds per call (NaN when the row has no times)."""
        return self.measurement.median if self.times else math.nan

    @property
    def algbw(self) -> float:
        return algbw(self.nbytes, self.time) if self.ok else math.nan

    @property
    def busbw(self) -> float:
        return busbw(self.op, self.nbytes, self.time, self.ranks) if self.ok else math.nan

    def record(self) -> dict[str, Any]:
        """A plain dict of the row with its statistics (for tables and data frames)."""
        d = {k: v for k, v in asdict(self).items() if k != "times"}
        m = self.measurement if self.times else None
        d.update(time_s=m.median if m else math.nan, q1_s=m.q1 if m else math.nan, q3_s=m.q3 if m else math.nan,
                 iters=len(self.times), algbw=self.algbw, busbw=self.busbw)
        return d


@dataclass(frozen=True)
class Sweep:
    """The rows of a sweep (every rank returns the same), with where and how they were measured."""

    rows: tuple[Row, ...]
    ranks: int
    backend: str
    device: str
    torch_version: str
    warmup: int
    iters: int
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def ops(self) -> list[str]:
        return list(dict.fromkeys(r.op for r in self.rows))

    def select(self, op: str) -> list[Row]:
        _check_op(op)
        return [r for r in self.rows if r.op == op]

    def unsupported(self) -> dict[str, str]:
        """Operations the backend could not run, with its message."""
        return {r.op: r.note for r in self.rows if r.status == "unsupported"}

    def records(self) -> list[dict[str, Any]]:
        return [r.record() for r in self.rows]

    def to_pandas(self) -> Any:
        """The records as a ``pandas.DataFrame`` (pandas must be installed)."""
        import pandas as pd

        return pd.DataFrame(self.records())

    def fit(self, op: str, *, relative: bool = True) -> Fit:
        """:func:`fit_alpha_beta` on the rows of ``op`` that ran."""
        rows = [r for r in self.select(op) if r.ok]
        if not rows:
            raise ValueError(f"no measured rows for {op}: {self.unsupported().get(op, 'not in this sweep')}")
        return fit_alpha_beta(op, self.ranks, [r.nbytes for r in rows], [r.time for r in rows], relative=relative)

    def table(self) -> str:
        """The rows as text, in the layout of nccl-tests' output (one block per operation)."""
        lines = [f"# {self.ranks} ranks, {self.backend} on {self.device}, torch {self.torch_version}; "
                 f"{self.warmup} warm-up and {self.iters} timed iterations per size; time = median over iterations "
                 "of the slowest rank"]
        for op in self.ops:
            lines.append(f"#\n# {op}  (busbw = algbw x {busbw_factor(op, self.ranks):.4g})")
            lines.append(f"#{'size':>11} {'count':>11} {'type':>9} {'time':>10} {'IQR':>9} {'algbw':>8} "
                         f"{'busbw':>8} {'#wrong':>7}")
            lines.append(f"#{'(B)':>11} {'(elements)':>11} {'':>9} {'(us)':>10} {'(us)':>9} {'(GB/s)':>8} "
                         f"{'(GB/s)':>8}")
            for r in self.select(op):
                head = f"{r.nbytes:>12} {r.count:>11} {r.dtype:>9}"
                if r.ok:
                    m = r.measurement
                    lines.append(f"{head} {m.median * 1e6:>10.1f} {m.iqr * 1e6:>9.1f} {r.algbw / 1e9:>8.3f} "
                                 f"{r.busbw / 1e9:>8.3f} {r.wrong:>7}")
                else:
                    lines.append(f"{head}   {r.status}: {r.note}")
        return "\n".join(lines)

    def plot(self, ax: Any = None, ops: Sequence[str] | None = None) -> Any:
        """Bus bandwidth (GB/s) against message size (log x) per operation, error bars from the IQR."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5))
        for op in ops or self.ops:
            rows = [r for r in self.select(op) if r.ok]
            if not rows:
                continue
            xs = [r.nbytes for r in rows]
            mid = [r.busbw / 1e9 for r in rows]
            # a longer time is a lower bandwidth: q3 of the time gives the lower end
            lo = [m - busbw(op, r.nbytes, r.measurement.q3, self.ranks) / 1e9 for m, r in zip(mid, rows)]
            hi = [busbw(op, r.nbytes, r.measurement.q1, self.ranks) / 1e9 - m for m, r in zip(mid, rows)]
            ax.errorbar(xs, mid, yerr=[lo, hi], marker="o", ms=3, capsize=2, label=op)
        ax.set_xscale("log")
        ax.set(xlabel="message size S (bytes, nccl-tests' definition)", ylabel="bus bandwidth (GB/s)",
               title=f"{self.ranks} ranks, {self.backend}")
        ax.legend(fontsize=8)
        return ax


def message_sizes(min_bytes: int, max_bytes: int, factor: int = 2) -> list[int]:
    """``min_bytes, min_bytes * factor, ...`` up to ``max_bytes`` (nccl-tests' ``-b``, ``-e``, ``-f``)."""
    if not (isinstance(min_bytes, int) and isinstance(max_bytes, int) and isinstance(factor, int)):
        raise TypeError("sizes and the factor must be integers")
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min_bytes <= max_bytes, got {min_bytes} and {max_bytes}")
    if factor < 2:
        raise ValueError(f"the factor between sizes must be at least 2, not {factor}")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def parse_size(text: str) -> int:
    """``'64M'`` -> ``67108864``: a byte count with an optional K, M or G (powers of 1024, as nccl-tests reads them)."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(i?[bB])?\s*", str(text))
    if not m:
        raise ValueError(f"not a size: {text!r} (write e.g. 8, 64K, 4M, 1G)")
    return int(m.group(1)) * 1024 ** " KMG".index(m.group(2).upper() or " ")


def measure(ops: Sequence[str], sizes: Sequence[int], warmup: int = 5, iters: int = 20,
            dtype: str = "float32") -> dict[str, Any]:
    """The sweep itself, run by every rank of an existing process group (the worker of :func:`sweep`).

    Returns the same rows on every rank (times are reduced with MAX over the
    ranks), as a dict of plain data.
    """
    rank, n, device = init_from_env()
    torch_dtype = getattr(torch, dtype)
    element_size = torch.empty((), dtype=torch_dtype).element_size()
    backend = dist.get_backend()
    rows: list[dict[str, Any]] = []
    clock = _Clock(device, time.perf_counter)  # the benchmark helper's clock: synchronises, CUDA events on GPUs
    warm = torch.zeros(256, dtype=torch_dtype, device=device)
    for _ in range(10):  # once per sweep: the backend's first calls (threads, buffers) are slow
        dist.barrier()
        dist.all_reduce(warm)
    for op in ops:
        call = _call(op)
        done: set[int] = set()
        for requested in sizes:
            numel_in, numel_out, used = _shapes(op, int(requested), n, element_size)
            if used in done:  # two requested sizes rounded to the same S
                continue
            done.add(used)
            row: dict[str, Any] = dict(op=op, nbytes=used, count=used // element_size, dtype=dtype, ranks=n,
                                       backend=backend)
            source = input_for(op, rank, n, numel_in, torch_dtype).to(device)
            inp = source.clone()
            out = torch.empty(numel_out, dtype=torch_dtype, device=device)
            expected = expected_output(op, rank, n, numel_in, torch_dtype).to(device)
            result = out if op in ("reduce_scatter", "all_gather", "all_to_all") else inp
            try:
                call(inp, out)
                failed = 0
                note = ""
            except RuntimeError as e:  # raised by this rank's backend before any message: every rank raises
                failed, note = 1, str(e).strip().splitlines()[0][:200]
            flag = torch.tensor([failed], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)  # every rank agrees whether the op ran
            if flag.item():
                row.update(status="unsupported" if _UNSUPPORTED.search(note) else "failed",
                           note=note or "failed on another rank")
                rows.append(row)
                continue
            wrong = int((result != expected).sum())
            times = []
            for i in range(warmup + iters):
                inp.copy_(source)  # in-place ops overwrite their input; outside the timed region
                dist.barrier()
                clock.start()
                call(inp, out)
                t = clock.stop()
                if i >= warmup:
                    times.append(t)
            wrong += int((result != expected).sum())
            stats = torch.tensor(times + [float(wrong)], dtype=torch.float64, device=device)
            slowest = stats[:-1].clone()
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            total_wrong = stats[-1:].clone()
            dist.all_reduce(total_wrong)
            row.update(times=tuple(slowest.cpu().tolist()), wrong=int(total_wrong.item()))
            rows.append(row)
    return {"rank": rank, "rows": rows, "backend": backend, "device": str(device),
            "torch_version": torch.__version__, "warmup": warmup, "iters": iters}


def _as_sweep(result: dict[str, Any]) -> Sweep:
    rows = tuple(Row(**{**r, "times": tuple(r.get("times", ()))}) for r in result["rows"])
    n = rows[0].ranks if rows else 1
    return Sweep(rows, n, result["backend"], result["device"], result["torch_version"], result["warmup"],
                 result["iters"])


def sweep(ranks: int = 2, *, ops: Sequence[str] = OPS, sizes: Sequence[int] | None = None,
          min_bytes: int = 8, max_bytes: int = 4 * 2**20, factor: int = 4, warmup: int = 3, iters: int = 10,
          dtype: str = "float32", backend: str | None = None, timeout: float = 300.0,
          start_method: str = "spawn") -> Sweep:
    """Run :func:`measure` on ``ranks`` new processes (:func:`dlperf.launch.launch`) and return rank 0's :class:`Sweep`.

    ``sizes`` (bytes, nccl-tests' ``S``) defaults to :func:`message_sizes`
    ``(min_bytes, max_bytes, factor)``.  ``backend`` defaults to NCCL when
    there is one GPU per rank, else gloo.  The sweep's ``meta`` says whether
    every rank returned the same rows (``same_on_every_rank``).
    """
    _check_ranks(ranks)
    for op in ops:
        _check_op(op)
    if not ops:
        raise ValueError("no operations to measure")
    if warmup < 0 or iters < 1:
        raise ValueError(f"need warmup >= 0 and iters >= 1, got {warmup} and {iters}")
    if dtype not in ("float32", "float64", "float16", "bfloat16"):
        raise ValueError(f"dtype must be float32, float64, float16 or bfloat16, not {dtype!r}")
    sizes = list(sizes) if sizes is not None else message_sizes(min_bytes, max_bytes, factor)
    if not sizes or any(not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError(f"sizes must be positive integers (bytes), got {sizes!r}")
    backend = backend or default_backend(ranks)
    results = launch("dlperf.collectives:measure", ranks, args=(tuple(ops), tuple(sizes), warmup, iters, dtype),
                     backend=backend, timeout=timeout, verbose=False, start_method=start_method)
    first = _as_sweep(results[0])
    same = all(r["rows"] == results[0]["rows"] for r in results[1:])
    return Sweep(first.rows, ranks, first.backend, first.device, first.torch_version, first.warmup, first.iters,
                 meta={"same_on_every_rank": same, "per_rank_devices": [r["device"] for r in results]})


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dlperf.collectives``: the sweep as a command, printed like nccl-tests."""
    p = argparse.ArgumentParser(prog="python -m dlperf.collectives", description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", "-n", type=int, default=2, help="processes to start (ignored under torchrun)")
    p.add_argument("--min-bytes", "-b", default="8", help="smallest size S, e.g. 8, 1K (default 8)")
    p.add_argument("--max-bytes", "-e", default="4M", help="largest size S, e.g. 64M (default 4M)")
    p.add_argument("--factor", "-f", type=int, default=2, help="factor between sizes (default 2)")
    p.add_argument("--ops", nargs="+", default=list(OPS), choices=OPS, help="operations (default: all five)")
    p.add_argument("--warmup", "-w", type=int, default=5, help="untimed calls per size (default 5)")
    p.add_argument("--iters", type=int, default=20, help="timed calls per size (default 20)")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64", "float16", "bfloat16"))
    p.add_argument("--backend", choices=("gloo", "nccl"), help="default: nccl with one GPU per rank, else gloo")
    p.add_argument("--no-fit", action="store_true", help="do not fit alpha and beta")
    args = p.parse_args(argv)
    sizes = message_sizes(parse_size(args.min_bytes), parse_size(args.max_bytes), args.factor)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # under torchrun: this process is one rank
        raw = measure(tuple(args.ops), tuple(sizes), args.warmup, args.iters, args.dtype)
        result = _as_sweep(raw)
        if raw["rank"] != 0:
            dist.destroy_process_group()
            return 0
    else:
        result = sweep(args.ranks, ops=args.ops, sizes=sizes, warmup=args.warmup, iters=args.iters,
                       dtype=args.dtype, backend=args.backend, timeout=3600)
    print(result.table())
    if not args.no_fit and result.ranks >= 2:
        print("#\n# alpha-beta fit (relative least squares), t = k_alpha alpha + k_beta S / beta")
        for op in result.ops:
            try:
                print(f"#   {result.fit(op)}")
            except ValueError as e:
                print(f"#   {op}: no fit ({e})")
    bad = sum(r.wrong for r in result.rows)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
