"""A probe of the reader's machine, used live by the hardware chapter.

Every function here measures one property of the machine the book is being
executed on and returns a :class:`ProbeResult`: the value, its unit, and the
:class:`~dlperf.Measurement` it was computed from (so a reader can check the
spread).  All timings go through :func:`dlperf.benchmark`, which synchronises
the device.  Rates use decimal prefixes: 1 GB/s = 10^9 bytes per second,
1 GFLOP/s = 10^9 floating-point operations per second.

What is measured, and how the number is computed from the median time ``t`` of
one call:

* memory bandwidth (:func:`memory_bandwidth`): ``dst.copy_(src)`` reads and
  writes ``S`` bytes, so ``bandwidth = 2 S / t``;
* matrix multiplication (:func:`matmul_flops`): an ``(m, k) @ (k, n)`` product
  does ``m n k`` multiply-adds, so ``FLOP/s = 2 m n k / t``;
* host <-> device copies (:func:`transfer_bandwidth`, CUDA only):
  ``bandwidth = S / t`` for ``S`` bytes, from pageable and from pinned host memory;
* dispatch and launch overhead (:func:`launch_overhead`): the time of one
  addition of two 1-element tensors, next to one call of an empty Python function;
* sequential versus strided access (:func:`strided_access`): summing ``n``
  elements ``s`` apart; ``bandwidth = n * itemsize / t`` counts the useful bytes only;
* memory latency (:func:`memory_latency`): a pointer chase, where each load
  needs the result of the previous one, ``latency = t / steps``.

:func:`probe` runs them all, with sizes chosen by :func:`dlperf.by_device`, and
returns a :class:`ProbeReport` that renders as a table in a notebook.
"""

from __future__ import annotations

import array
import contextlib
import html
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch

from .bench import Measurement, Stopwatch, benchmark
from .devices import by_device, cpu_threads, describe, has_cuda

from .sysinfo import (  # noqa: F401  (the probe's report and the chapters use them through here)
    GiB, KiB, MiB, CacheLevel, _nbytes_text, _resolve, cpu_caches, cpu_features, gpu_properties,
)

__all__ = [
    "CacheLevel",
    "ProbeReport",
    "ProbeResult",
    "attainable_flops",
    "cpu_caches",
    "cpu_features",
    "gpu_properties",
    "launch_overhead",
    "matmul_flops",
    "matmul_flops_by_dtype",
    "memory_bandwidth",
    "memory_latency",
    "probe",
    "ridge_point",
    "strided_access",
    "transfer_bandwidth",
]


_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _si(amount: float, unit: str) -> str:
    """``1.5e12, 'FLOP/s'`` -> ``'1.5 TFLOP/s'`` (decimal prefixes)."""
    for scale, prefix in _SI:
        if abs(amount) >= scale:
            return f"{amount / scale:.3g} {prefix}{unit}"
    return f"{amount:.3g} {unit}"


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@contextlib.contextmanager
def _on(device: torch.device) -> Iterator[None]:
    """Make ``device`` the current CUDA device, so that the benchmark's CUDA
    events are recorded on the stream the work runs on."""
    if device.type == "cuda":
        with torch.cuda.device(device):
            yield
    else:
        yield


@dataclass(frozen=True)
class ProbeResult:
    """One measured property of the machine.

    ``value`` is in ``unit`` (GB/s, GFLOP/s or ns), or ``None`` when the
    property could not be measured here, in which case ``reason`` says why.
    ``work`` is the amount of work one timed call does, in ``work_unit``
    (bytes or FLOP); for rates ``value == work / measurement.median / 1e9``.
    """

    key: str
    name: str
    value: float | None
    unit: str
    device: str
    measurement: Measurement | None = None
    work: float | None = None
    work_unit: str = ""
    detail: str = ""
    reason: str = ""

    @property
    def available(self) -> bool:
        """True when the value was measured."""
        return self.value is not None

    @property
    def per_second(self) -> float | None:
        """The rate in base units (bytes/s or FLOP/s): ``work / median``."""
        if self.measurement is None or self.work is None:
            return None
        return self.work / self.measurement.median

    def text(self) -> str:
        """The value with a readable prefix, or why there is none."""
        if self.value is None:
            return f"not measured: {self.reason}"
        if self.unit == "GB/s":
            return _si(self.value * 1e9, "B/s")
        if self.unit == "GFLOP/s":
            return _si(self.value * 1e9, "FLOP/s")
        if self.unit == "ns":
            if self.value < 1e3:
                return f"{self.value:.3g} ns"
            return f"{self.value:,.0f} ns" if self.value < 1e5 else f"{self.value / 1e3:,.0f} us"
        return f"{self.value:.3g} {self.unit}"

    def __str__(self) -> str:
        extra = f" ({self.detail})" if self.detail and self.available else ""
        return f"{self.name} on {self.device}: {self.text()}{extra}"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(str(self))}</code>"


def _unavailable(key: str, name: str, unit: str, device: torch.device, reason: str, detail: str = "") -> ProbeResult:
    return ProbeResult(key, name, None, unit, str(device), detail=detail, reason=reason)


def _rate(key: str, name: str, unit: str, device: torch.device, m: Measurement, work: float, work_unit: str, detail: str) -> ProbeResult:
    # value = work / median / 1e9, computed exactly as ``per_second / 1e9``
    return ProbeResult(key, name, work / m.median / 1e9, unit, str(device), m, float(work), work_unit, detail)


# ---------------------------------------------------------------------------
# Memory bandwidth
# ---------------------------------------------------------------------------


def memory_bandwidth(
    device: torch.device | str | None = None,
    nbytes: int | None = None,
    *,
    dtype: torch.dtype = torch.float32,
    min_run_time: float = 0.2,
    repeat: int | None = None,
    threads: int | None = None,
) -> ProbeResult:
    """Bandwidth of a large copy ``dst.copy_(src)`` on ``device``, in GB/s.

    A copy of ``S`` bytes reads ``S`` bytes and writes ``S`` bytes, so
    ``bandwidth = 2 S / t`` (decimal GB/s).  ``nbytes`` is the size of *one*
    buffer (default 256 MiB on a CPU, 1 GiB on a GPU); make it several times
    larger than the last-level cache to measure the main memory rather than a
    cache.  ``repeat`` fixes the number of timed repeats (default: as many as
    fit in ``min_run_time``, at least 5).  On a CPU, ``threads`` sets the
    number of threads for the copy (``None``: PyTorch's setting, all cores).
    """
    device = _resolve(device)
    if nbytes is None:
        nbytes = by_device(device, cpu=256 * MiB, cuda=1 * GiB)
    itemsize = torch.empty((), dtype=dtype).element_size()
    numel = max(1, nbytes // itemsize)
    nbytes = numel * itemsize
    with _on(device), cpu_threads(threads if device.type == "cpu" else None):
        src = torch.empty(numel, dtype=dtype, device=device).fill_(1)
        dst = torch.empty_like(src)
        m = benchmark(dst.copy_, src, device=device, min_run_time=min_run_time, repeat=repeat, label="copy")
        used = torch.get_num_threads()
    del src, dst
    return _rate(
        "bandwidth",
        "memory bandwidth (copy)",
        "GB/s",
        device,
        m,
        2 * nbytes,
        "bytes",
        f"copy of {_nbytes_text(nbytes)}, read + write counted" + (f", {used} thread(s)" if device.type == "cpu" else ""),
    )


# ---------------------------------------------------------------------------
# Matrix multiplication
# ---------------------------------------------------------------------------


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()


def matmul_flops(
    device: torch.device | str | None = None,
    n: int | None = None,
    dtype: torch.dtype = torch.float32,
    *,
    m: int | None = None,
    k: int | None = None,
    min_run_time: float = 0.2,
    max_call_seconds: float = 2.0,
) -> ProbeResult:
    """FLOP/s of ``a @ b`` with ``a`` of shape ``(m, k)`` and ``b`` of shape ``(k, n)``.

    The product does ``m n k`` multiply-adds, counted as two floating-point
    operations each: ``FLOP/s = 2 m n k / t``.  ``m`` and ``k`` default to
    ``n`` (square matrices); ``n`` defaults to 512 on a CPU and 8192 on a GPU.

    A dtype that the device cannot multiply (an error is raised) is reported
    as not measured, with the error.  So is one that is so slow here that a
    single product of the requested size would take more than
    ``max_call_seconds`` (predicted from the fastest of three trial products
    of at most 256 x 256 x 256): some CPUs have no fast kernel for ``float16``.
    """
    device = _resolve(device)
    if n is None:
        n = by_device(device, cpu=512, cuda=8192)
    m = n if m is None else m
    k = n if k is None else k
    name = _dtype_name(dtype)
    key = f"matmul/{name}"
    title = f"matmul FLOP/s, {name}"
    flops = 2 * m * n * k
    detail = f"({m} x {k}) @ ({k} x {n})"
    if device.type == "cuda" and dtype == torch.float32:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            precision = torch.get_float32_matmul_precision()
        detail += f", float32 matmul precision '{precision}'"
    with _on(device):
        tm, tk, tn = min(m, 256), min(k, 256), min(n, 256)
        try:
            a = torch.randn(tm, tk, device=device).to(dtype)
            b = torch.randn(tk, tn, device=device).to(dtype)
            torch.matmul(a, b)  # the first call may load a library: untimed
            trials = []
            for _ in range(3):  # the fastest of three: one interruption must not skip a dtype
                with Stopwatch(device) as trial:
                    torch.matmul(a, b)
                trials.append(trial.seconds)
        except (RuntimeError, NotImplementedError, TypeError) as error:
            return _unavailable(key, title, "GFLOP/s", device, f"{name} matmul unsupported on {device.type}: {_first_line(error)}", detail)
        best = max(min(trials), 1e-12)
        predicted = best * (m * n * k) / (tm * tk * tn)
        if predicted > max_call_seconds:
            return _unavailable(
                key,
                title,
                "GFLOP/s",
                device,
                f"{name} matmul too slow here to time quickly: a {tm}x{tk}x{tn} trial ran at "
                f"{_si(2 * tm * tk * tn / best, 'FLOP/s')}, so one {m}x{k}x{n} product would take ~{predicted:.1f} s",
                detail,
            )
        a = torch.randn(m, k, device=device).to(dtype)
        b = torch.randn(k, n, device=device).to(dtype)
        out = torch.empty(m, n, device=device, dtype=dtype)
        meas = benchmark(torch.matmul, a, b, out=out, device=device, min_run_time=min_run_time, label=f"matmul {name}")
    return _rate(key, title, "GFLOP/s", device, meas, flops, "FLOP", detail)


def matmul_flops_by_dtype(
    device: torch.device | str | None = None,
    n: int | None = None,
    dtypes: Sequence[torch.dtype] = (torch.float32, torch.bfloat16, torch.float16),
    **kwargs: float,
) -> dict[str, ProbeResult]:
    """:func:`matmul_flops` for each dtype, keyed by dtype name (``'float32'``...)."""
    return {_dtype_name(dt): matmul_flops(device, n, dt, **kwargs) for dt in dtypes}


# ---------------------------------------------------------------------------
# Host <-> device transfers
# ---------------------------------------------------------------------------


def transfer_bandwidth(
    device: torch.device | str | None = None,
    nbytes: int | None = None,
    *,
    min_run_time: float = 0.2,
) -> list[ProbeResult]:
    """Host-to-device and device-to-host copy bandwidth, pageable and pinned, in GB/s.

    One copy of ``S`` bytes in one direction: ``bandwidth = S / t``.
    *Pageable* host memory is ordinary memory, which the driver first copies
    into a pinned staging buffer; *pinned* (page-locked) memory can be read by
    the GPU's copy engine directly, and is copied with ``non_blocking=True``.

    CUDA only: on any other device the four results say so (``available`` is
    False) rather than failing.
    """
    device = _resolve(device)
    cases = [
        ("h2d/pageable", "host to device, pageable", "h2d", False),
        ("h2d/pinned", "host to device, pinned", "h2d", True),
        ("d2h/pageable", "device to host, pageable", "d2h", False),
        ("d2h/pinned", "device to host, pinned", "d2h", True),
    ]
    if device.type != "cuda" or not has_cuda():
        if device.type in ("cpu", "cuda"):
            reason = "no accelerator: host-device copies need a CUDA device, and none is available"
        else:
            reason = f"host-device copies are only probed on CUDA devices, not on {device.type}"
        return [_unavailable(key, name, "GB/s", device, reason) for key, name, _, _ in cases]
    if nbytes is None:
        nbytes = 256 * MiB
    results = []
    with _on(device):
        on_device = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
        for key, name, direction, pinned in cases:
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned).fill_(1)  # touched: no zero page
            if direction == "h2d":
                meas = benchmark(on_device.copy_, host, non_blocking=pinned, device=device, min_run_time=min_run_time, label=name)
            else:
                meas = benchmark(host.copy_, on_device, non_blocking=pinned, device=device, min_run_time=min_run_time, label=name)
            results.append(_rate(key, name, "GB/s", device, meas, nbytes, "bytes", f"{_nbytes_text(nbytes)} per copy"))
            del host
        del on_device
    return results


# ---------------------------------------------------------------------------
# Overheads
# ---------------------------------------------------------------------------


def _empty_python_function() -> None:
    return None


def launch_overhead(device: torch.device | str | None = None, *, min_run_time: float = 0.2) -> list[ProbeResult]:
    """Time of one tiny operation on ``device``, and of one empty Python call, in ns.

    The operation is ``torch.add(a, b, out=c)`` on 1-element tensors: its
    arithmetic is one addition, so its time is the cost of getting *any*
    operation done -- Python, PyTorch's dispatcher and, on a GPU, the kernel
    launch.  On a GPU the benchmark times back-to-back launches, so the result
    is the time per operation whichever side (host or device) limits it.
    ``latency = t`` per call, in nanoseconds.
    """
    device = _resolve(device)
    with _on(device):
        a = torch.ones(1, device=device)
        b = torch.ones(1, device=device)
        c = torch.empty(1, device=device)
        op = benchmark(torch.add, a, b, out=c, device=device, min_run_time=min_run_time, label="tiny op")
    py = benchmark(_empty_python_function, min_run_time=min_run_time, label="python call")
    return [
        ProbeResult("launch/op", "tiny op (add two 1-element tensors)", op.median * 1e9, "ns", str(device), op,
                    detail="Python + dispatcher" + (" + kernel launch" if device.type != "cpu" else "")),
        ProbeResult("launch/python", "empty Python function call", py.median * 1e9, "ns", "cpu", py,
                    detail="includes the loop that calls it"),
    ]


# ---------------------------------------------------------------------------
# Caches: sequential vs strided access, latency
# ---------------------------------------------------------------------------


def strided_access(
    device: torch.device | str | None = "cpu",
    n: int | None = None,
    strides: Sequence[int] = (1, 16),
    *,
    dtype: torch.dtype = torch.float32,
    threads: int | None = 1,
    min_run_time: float = 0.2,
) -> list[ProbeResult]:
    """Sum ``n`` elements that lie ``s`` elements apart, for each stride ``s``.

    Every stride sums the same number of elements, so the arithmetic is the
    same; what changes is how much memory is touched.  A CPU moves memory in
    cache lines (64 bytes on most CPUs); with 4-byte elements and ``s >= 16``
    every element needs a line of its own, 16 times as many bytes as the
    useful ones.  The result counts useful bytes only:
    ``bandwidth = n * itemsize / t`` (GB/s); ``ns per element = t / n``
    is in each result's ``detail``.  Default ``n``: 2**20 on a CPU, 2**24 on a GPU.

    On a CPU the sums run on ``threads`` threads (default 1: one core's view of
    its caches, and no waiting for a second thread that the operating system
    has lent to another program); ``None`` keeps PyTorch's setting.
    """
    device = _resolve(device)
    if n is None:
        n = by_device(device, cpu=2**20, cuda=2**24)
    itemsize = torch.empty((), dtype=dtype).element_size()
    with _on(device), cpu_threads(threads if device.type == "cpu" else None):
        base = torch.ones(n * max(strides), dtype=dtype, device=device)
        results = []
        for s in strides:
            view = base[:: s][:n]
            assert view.numel() == n
            meas = benchmark(torch.sum, view, device=device, min_run_time=min_run_time, label=f"stride {s}")
            results.append(
                _rate(
                    f"stride/{s}",
                    f"sum, stride {s}",
                    "GB/s",
                    device,
                    meas,
                    n * itemsize,
                    "bytes",
                    f"{n} elements {s * itemsize} B apart, {meas.median / n * 1e9:.3g} ns per element"
                    + (f", {torch.get_num_threads()} thread(s)" if device.type == "cpu" else ""),
                )
            )
        del base
    return results


def _pointer_chain(nbytes: int, seed: int = 0) -> array.array:
    """An int64 array of ``nbytes`` holding one random cycle through its cache lines.

    Entry ``8 i`` (the first 8 bytes of line ``i``) holds the index of the first
    entry of the next line in the cycle.  Every line is visited once per lap, in
    an order the hardware prefetcher cannot guess.
    """
    lines = max(2, nbytes // 64)
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(lines, generator=g)
    nxt = torch.zeros(lines, 8, dtype=torch.int64)
    nxt[order, 0] = torch.roll(order, -1) * 8
    chain = array.array("q")
    chain.frombytes(memoryview(nxt.numpy()).cast("B"))  # one copy, no temporary bytes
    return chain


def _chase(chain: array.array, steps: int, where: list[int]) -> int:
    """``steps`` dependent loads along ``chain``, from where the previous call stopped (``where[0]``).

    Starting every call at index 0 would revisit the same ``steps`` lines call after call: after the
    first call they sit in the caches, whatever the size of the buffer (a review measured a 256 MiB
    chain at 50 ns a step on this VM, about a cache hit).  Continuing the lap makes every timed call
    visit lines no recent call touched, until the lap comes round again.
    """
    i = where[0]
    for _ in range(steps):
        i = chain[i]
    where[0] = i
    return i


def chase_bytes(quick: bool = True, caches: Sequence[CacheLevel] | None = None) -> int:
    """The working set of the large pointer chase: eight times the largest cache this machine reports
    (so that nearly every step misses every cache), at least 64 MiB (quick) or 256 MiB (full), at most
    1 GiB.

    >>> chase_bytes(True, [CacheLevel(3, "Unified", 32 * MiB, 64, 2)]) // MiB
    256
    >>> chase_bytes(False, []) // MiB
    256
    """
    caches = cpu_caches() if caches is None else caches
    largest = max((c.size_bytes for c in caches), default=0)
    return int(min(GiB, max((64 if quick else 256) * MiB, 8 * largest)))


def memory_latency(
    sizes: Sequence[int] = (16 * KiB, 256 * MiB),
    *,
    steps: int = 20_000,
    min_run_time: float = 0.2,
) -> list[ProbeResult]:
    """Host memory latency by pointer chasing, in ns per step, for each working-set size.

    Each load needs the address produced by the previous one, so the loads
    cannot overlap: ``latency = t / steps``.  The chase runs in a Python loop,
    so every step also pays the interpreter (tens of ns): compare sizes rather
    than reading one value alone.  With a small working set (16 KiB fits in the
    L1 cache) a step costs the interpreter plus a cache hit; with a working set
    far larger than the caches it also pays a trip to main memory (and usually
    a TLB miss).  The difference of the two is an estimate of the extra latency
    of main memory.
    """
    results = []
    for size in sizes:
        chain = _pointer_chain(size)
        meas = benchmark(_chase, chain, steps, [0], min_run_time=min_run_time, warmup=1,
                         label=f"chase {_nbytes_text(size)}")
        results.append(
            ProbeResult(
                f"latency/{_nbytes_text(size).replace(' ', '')}",
                f"pointer chase, {_nbytes_text(size)} working set",
                meas.median / steps * 1e9,
                "ns",
                "cpu",
                meas,
                detail=f"{steps} dependent loads per call, Python loop included",
            )
        )
        del chain
    if len(results) >= 2:
        small = min(results, key=lambda r: sizes[results.index(r)])
        large = max(results, key=lambda r: sizes[results.index(r)])
        results.append(
            ProbeResult(
                "latency/extra",
                "extra latency of the large working set",
                large.value - small.value,
                "ns",
                "cpu",
                large.measurement,
                detail=f"difference of medians: {large.value:.3g} ns - {small.value:.3g} ns",
            )
        )
    return results


# ---------------------------------------------------------------------------
# Roofline
# ---------------------------------------------------------------------------


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roofline: ``min(peak, intensity * bandwidth)``.

    ``intensity`` in FLOP per byte of memory traffic, ``peak_flops`` in FLOP/s,
    ``bandwidth`` in bytes/s; the result is in FLOP/s.
    """
    return min(peak_flops, intensity * bandwidth)


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (FLOP/byte) where the roofline bends: ``peak / bandwidth``."""
    return peak_flops / bandwidth


# ---------------------------------------------------------------------------
# Everything at once
# ---------------------------------------------------------------------------


@dataclass
class ProbeReport:
    """All results of :func:`probe`, in the order they were measured."""

    device: str
    description: str
    results: list[ProbeResult]
    quick: bool
    seconds: float = float("nan")
    caches: list[CacheLevel] = field(default_factory=list)

    def __getitem__(self, key: str) -> ProbeResult:
        for r in self.results:
            if r.key == key:
                return r
        raise KeyError(f"no result {key!r}; have {[r.key for r in self.results]}")

    def get(self, key: str) -> ProbeResult | None:
        try:
            return self[key]
        except KeyError:
            return None

    @property
    def bandwidth(self) -> float:
        """Measured memory bandwidth in bytes/s."""
        return self["bandwidth"].value * 1e9

    def peak_flops(self, dtype: str | torch.dtype) -> float | None:
        """Measured matmul FLOP/s for ``dtype``, or None where it was not measured."""
        name = dtype if isinstance(dtype, str) else _dtype_name(dtype)
        r = self.get(f"matmul/{name}")
        return None if r is None or r.value is None else r.value * 1e9

    def rows(self) -> list[tuple[str, str, str]]:
        """(what, value, how) for each result."""
        return [(r.name, r.text() if r.available else "not measured", r.detail if r.available else r.reason) for r in self.results]

    def __str__(self) -> str:
        rows = [("what", "value", "how")] + self.rows()
        w0 = max(len(r[0]) for r in rows)
        w1 = max(len(r[1]) for r in rows)
        head = f"Probe of {self.description} ({'quick' if self.quick else 'full'}, {self.seconds:.1f} s)"
        return "\n".join([head] + [f"{a:<{w0}}  {b:<{w1}}  {c}" for a, b, c in rows])

    def _repr_html_(self) -> str:
        from .widgets import table_html

        head = f"<p>Probe of <code>{html.escape(self.description)}</code> ({'quick' if self.quick else 'full'}, took {self.seconds:.1f} s)</p>"
        return head + table_html(self.rows(), header=("what", "value", "how"))


def probe(device: torch.device | str | None = None, quick: bool = True, *, min_run_time: float | None = None) -> ProbeReport:
    """Measure the machine: memory bandwidth, matmul FLOP/s per dtype, host-device
    copies, launch overhead, strided access and memory latency.

    Sizes scale with the device (:func:`dlperf.by_device`): on a CPU the quick
    probe takes a few seconds.  ``quick=False`` uses larger problems and times
    each for longer.  Strided access and latency are measured on the host CPU
    whatever ``device`` is (they illustrate the CPU's caches).  ``min_run_time``
    overrides the seconds of timing per measurement (0.1 quick, 0.5 full).
    """
    device = _resolve(device)
    run_time = min_run_time if min_run_time is not None else (0.1 if quick else 0.5)
    results: list[ProbeResult] = []
    with Stopwatch(device) as sw:
        results.append(memory_bandwidth(device, by_device(device, cpu=(128 if quick else 256) * MiB, cuda=1 * GiB), min_run_time=run_time))
        n = by_device(device, cpu=512 if quick else 1024, cuda=8192)
        results.extend(matmul_flops_by_dtype(device, n, min_run_time=run_time).values())
        results.extend(transfer_bandwidth(device, by_device(device, cpu=None, cuda=(256 if quick else 1024) * MiB), min_run_time=run_time))
        results.extend(launch_overhead(device, min_run_time=run_time))
        results.extend(strided_access("cpu", 2**20, (1, 16), min_run_time=run_time))
        results.extend(memory_latency((16 * KiB, chase_bytes(quick)), min_run_time=run_time))
    return ProbeReport(str(device), describe(device), results, quick, sw.seconds, cpu_caches())
