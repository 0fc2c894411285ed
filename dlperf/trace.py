"""The one profiler helper: run ``torch.profiler`` around code, read its trace, draw its timeline.

:func:`record` profiles a callable and returns a :class:`Trace`.  The trace is
parsed from the Chrome trace JSON that ``torch.profiler`` exports, the file that
Perfetto (ui.perfetto.dev) and TensorBoard display: that format changes less
between PyTorch versions than the profiler's Python objects do.  Each complete
span becomes an :class:`Event` with a *lane*:

* a CPU thread, ``"CPU <tid>"`` (``"CPU <tid> (main)"`` for the thread that
  called :func:`record`): operators (category ``cpu_op``), ``record_function``
  spans (``user_annotation``), CUDA runtime calls (``cuda_runtime``);
* a GPU stream, ``"GPU <device> stream <stream>"``: kernels (``kernel``),
  copies (``gpu_memcpy``), memsets (``gpu_memset``), GPU-side annotations.

Times are seconds from the start of the profiled window.  On the set of times
a lane is busy, :meth:`Trace.busy` is the length of the union of its spans
(nested spans count once), :meth:`Trace.overlap` the length of the
intersection of two lanes' unions, :meth:`Trace.gaps` the idle intervals.

What the profiler adds: every operator pays a few microseconds of recording,
so tiny operators look slower under the profiler than in a benchmark.  Use a
trace for *what ran where and when*, and :func:`dlperf.benchmark` for *how fast*.

>>> import torch
>>> x = torch.ones(8)
>>> tr = record(lambda: (x + 1) * 2, warmup=0)
>>> tr.count()["aten::add"], tr.count()["aten::mul"]
(1, 1)
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from .devices import synchronize

__all__ = ["GPU_CATEGORIES", "Collective", "Event", "MemorySample", "Trace", "parse_chrome_trace", "record"]

#: Categories of spans that run on a GPU stream (their lane is the device and stream).
GPU_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"})

# Categories the profiler writes for itself, not for the profiled code.
_SKIPPED = frozenset({"Trace", "python_function"})


@dataclass(frozen=True)
class Event:
    """One span of a trace: ``name`` ran on ``lane`` from ``start`` for ``duration`` seconds.

    ``category`` is the profiler's (``cpu_op``, ``user_annotation``, ``kernel``,
    ``gpu_memcpy``, ``cuda_runtime``, ...); ``flops`` is the profiler's FLOP
    count for the operators it has a formula for (matrix products,
    convolutions, some elementwise operators) when recorded with ``flops=True``;
    ``args`` are the raw Chrome trace arguments (input shapes, stream, ...).
    """

    name: str
    category: str
    lane: str
    start: float
    duration: float
    flops: int | None = None
    args: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def end(self) -> float:
        """``start + duration``."""
        return self.start + self.duration


@dataclass(frozen=True)
class MemorySample:
    """Bytes allocated on ``device`` (``"CPU"`` or ``"GPU <index>"``) after an allocation or free at ``time``."""

    time: float
    device: str
    allocated: int


# The profiler's names of the process-group operations (c10d's dispatcher ops), and what the book calls them.
_C10D = {
    "c10d::allreduce_": "all-reduce",
    "c10d::_allgather_base_": "all-gather",
    "c10d::allgather_": "all-gather",
    "c10d::allgather_into_tensor_coalesced_": "all-gather",
    "c10d::_reduce_scatter_base_": "reduce-scatter",
    "c10d::reduce_scatter_": "reduce-scatter",
    "c10d::reduce_scatter_tensor_coalesced_": "reduce-scatter",
    "c10d::broadcast_": "broadcast",
}
# Element sizes of the dtypes the profiler names in "Input type" (a list of tensors says "TensorList").
_ELEMENT_SIZE = {"float": 4, "double": 8, "c10::BFloat16": 2, "c10::Half": 2, "BFloat16": 2, "Half": 2}


@dataclass(frozen=True)
class Collective:
    """One process-group operation: its kind and the elements of the whole (unsharded) tensor.

    For an all-gather that is its output, for a reduce-scatter its input, for an all-reduce or a
    broadcast the tensor itself: the quantity that ZeRO's accounting calls ``S`` for a layer.
    """

    kind: str
    elements: int
    element_size: int

    @property
    def nbytes(self) -> int:
        return self.elements * self.element_size


def _elements(dims: Any) -> int:
    """Elements of a tensor (``[4160]``) or of a list of tensors (``[[128, 64]]``) in the profiler's 'Input Dims'."""
    if dims and isinstance(dims[0], list):
        return sum(_elements(d) for d in dims)
    n = 1
    for d in dims:
        n *= int(d)
    return n


def _union(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Merge intervals ``(start, end)`` into disjoint sorted intervals."""
    merged: list[list[float]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _length(spans: Iterable[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def _intersection(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Intersection of two disjoint sorted interval lists (two-pointer sweep)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass
class Trace:
    """A parsed profiler trace: events on lanes, memory samples, and the raw Chrome JSON.

    ``lanes`` is in display order: the recording thread first, then other CPU
    threads by their first event, then GPU streams by device and stream.
    ``duration`` is the profiled window (seconds), from 0 to the last event's end.
    """

    events: list[Event]
    memory: list[MemorySample]
    lanes: list[str]
    duration: float
    chrome: dict[str, Any] = field(repr=False)

    # -- selection and counts ---------------------------------------------------------------------
    def select(self, *, category: str | Iterable[str] | None = None, lane: str | Iterable[str] | None = None,
               name: str | Callable[[str], bool] | None = None, min_duration: float = 0.0) -> list[Event]:
        """Events matching every filter given: a category or set of them, a lane or set of them,
        a name (exact string, or a predicate on the name), and at least ``min_duration`` seconds."""
        cats = {category} if isinstance(category, str) else None if category is None else set(category)
        lanes = {lane} if isinstance(lane, str) else None if lane is None else set(lane)
        if lanes is not None and not lanes <= set(self.lanes):
            raise ValueError(f"unknown lane(s) {sorted(lanes - set(self.lanes))}; this trace has {self.lanes}")
        keep = name if callable(name) else (lambda n: n == name) if name is not None else (lambda n: True)
        return [e for e in self.events if (cats is None or e.category in cats) and (lanes is None or e.lane in lanes)
                and keep(e.name) and e.duration >= min_duration]

    def count(self, category: str | Iterable[str] | None = "cpu_op", **filters: Any) -> Counter[str]:
        """How many events of each name (default: CPU operators; ``category="kernel"`` for GPU kernels).

        Nested operators count separately: ``aten::linear`` calls ``aten::addmm``,
        and both are counted.  ``filters`` are those of :meth:`select`.
        """
        return Counter(e.name for e in self.select(category=category, **filters))

    def top_level(self, **filters: Any) -> list[Event]:
        """The selected events that are not nested inside another selected event of their lane.

        For CPU operators: the calls the program made itself (``aten::linear``),
        without the operators they call in turn (``aten::addmm``).
        """
        events = self.select(**filters)
        return [e for e, d in zip(events, _depths(events)) if d == 0]

    def total_flops(self, **filters: Any) -> int:
        """Sum of the profiler's FLOP counts over the selected events (0 where it has no formula)."""
        return sum(e.flops or 0 for e in self.select(**filters))

    def collectives(self, default_element_size: int = 4) -> list[Collective]:
        """The process-group operations recorded (``record(..., shapes=True)``), in order, with their sizes.

        The element size comes from the profiler's "Input type"; operations on lists of tensors
        (DDP's all-reduce, broadcasts) carry no dtype there and get ``default_element_size``.
        """
        found = []
        for e in sorted((e for e in self.events if e.name in _C10D), key=lambda e: e.start):
            kind = _C10D[e.name]
            dims = e.args.get("Input Dims", [])
            if not dims:
                raise ValueError(f"the trace has no sizes for {e.name}: record it with shapes=True")
            whole = 1 if kind == "reduce-scatter" else 0   # (output, input): a reduce-scatter's input is whole
            types = e.args.get("Input type", [])
            size = _ELEMENT_SIZE.get(types[whole], default_element_size) if len(types) > whole else default_element_size
            found.append(Collective(kind, _elements(dims[whole]), size))
        return found

    # -- time on lanes ----------------------------------------------------------------------------
    def _spans(self, lane: str, category: str | Iterable[str] | None) -> list[tuple[float, float]]:
        return _union((e.start, e.end) for e in self.select(lane=lane, category=category))

    def busy(self, lane: str, category: str | Iterable[str] | None = None) -> float:
        """Seconds during which ``lane`` runs at least one selected event (nested spans count once)."""
        return _length(self._spans(lane, category))

    def gaps(self, lane: str, category: str | Iterable[str] | None = None,
             min_gap: float = 0.0) -> list[tuple[float, float]]:
        """Idle intervals of ``lane`` between its first and its last selected event, at least ``min_gap`` long."""
        spans = self._spans(lane, category)
        return [(a[1], b[0]) for a, b in zip(spans, spans[1:]) if b[0] - a[1] >= min_gap]

    def overlap(self, lane_a: str, lane_b: str, category: str | Iterable[str] | None = None) -> float:
        """Seconds during which both lanes are busy at once: ``|busy(a) ∩ busy(b)|``."""
        return _length(_intersection(self._spans(lane_a, category), self._spans(lane_b, category)))

    def lane(self, kind: str) -> list[str]:
        """The lanes of one kind: ``"main"`` (the recording thread), ``"cpu"`` (all CPU threads), ``"gpu"``."""
        if kind == "main":
            return [name for name in self.lanes if name.endswith("(main)")]
        if kind in ("cpu", "gpu"):
            return [name for name in self.lanes if name.lower().startswith(kind)]
        raise ValueError(f"kind must be 'main', 'cpu' or 'gpu', not {kind!r}")

    # -- output -----------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write the Chrome trace JSON (gzip-compressed if ``path`` ends in ``.gz``) and return the path.

        Open it in Perfetto (https://ui.perfetto.dev, "Open trace file": the file is read in the
        browser, not uploaded) or ``chrome://tracing``; TensorBoard's PyTorch profiler plugin reads
        files named ``*.pt.trace.json`` from its log directory.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.chrome).encode()
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
        return path

    @classmethod
    def load(cls, path: str | Path, main_tid: int | None = None) -> Trace:
        """A trace from a saved Chrome trace file (``.json`` or ``.json.gz``)."""
        raw = Path(path).read_bytes()
        return parse_chrome_trace(json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw), main_tid)

    def plot(self, *, category: str | Iterable[str] | None = None, lanes: Sequence[str] | None = None,
             name: str | Callable[[str], bool] | None = None, min_duration: float = 0.0, max_depth: int = 2,
             memory: bool | None = None, legend: int = 8, title: str | None = None, width: float = 9.0,
             ax: Any = None, time_unit: str | None = None) -> Any:
        """Draw the timeline: one row per lane, each selected event a bar, nested events below their parent.

        Filters are those of :meth:`select`.  A lane's row is split into up to
        ``max_depth`` sub-rows by nesting depth (depth 0 = outermost spans; deeper
        spans are not drawn).  A bar is labelled with its name where it is wide
        enough; colours go to names by their total time in the figure (most time first, ties by
        name), and the ``legend`` names with the most time are listed.
        With ``memory`` (default: when samples were recorded), a second panel
        draws the allocated bytes per device.  ``ax`` draws into an existing
        matplotlib axis instead of a new figure (without the memory panel), e.g.
        two traces above each other on a shared time axis; ``time_unit`` (``"s"``,
        ``"ms"`` or ``"µs"``) fixes the axis unit, chosen from the duration by
        default.  Returns the matplotlib figure.
        """
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch

        if max_depth < 1:
            raise ValueError(f"max_depth must be at least 1, not {max_depth}")
        shown = list(lanes) if lanes is not None else list(self.lanes)
        events = self.select(category=category, lane=shown, name=name, min_duration=min_duration)
        if not events:
            raise ValueError("no event matches these filters: nothing to draw")
        shown = [lane for lane in shown if any(e.lane == lane for e in events)]
        depth = _depths(events)
        rows: list[tuple[str, int]] = []
        for lane in shown:
            deepest = min(max_depth, 1 + max(depth[i] for i, e in enumerate(events) if e.lane == lane))
            rows += [(lane, d) for d in range(deepest)]
        row_of = {key: i for i, key in enumerate(rows)}
        memory = bool(self.memory) and ax is None if memory is None else memory
        if memory and not self.memory:
            raise ValueError("this trace has no memory samples: record it with memory=True")
        if memory and ax is not None:
            raise ValueError("the memory panel needs a figure of its own: pass memory=False with ax")
        units = {"s": 1.0, "ms": 1e3, "µs": 1e6}
        if time_unit is not None and time_unit not in units:
            raise ValueError(f"time_unit must be one of {sorted(units)}, not {time_unit!r}")
        unit, scale = _time_unit(self.duration) if time_unit is None else (time_unit, units[time_unit])
        height = 0.9 + 0.32 * len(rows)
        given = ax is not None
        # an axis shared with others that already show a trace keeps the longest one in view
        siblings = ax.get_shared_x_axes().get_siblings(ax) if given else []
        right = max([a.get_xlim()[1] for a in siblings if a.has_data()], default=0.0)
        if given:
            fig = ax.figure
        elif memory:
            fig, (ax, mem_ax) = plt.subplots(2, 1, sharex=True, figsize=(width, height + 1.6),
                                             gridspec_kw={"height_ratios": [height, 1.6]})
        else:
            fig, ax = plt.subplots(figsize=(width, height))
        span = max(self.duration, max(e.end for e in events)) * scale
        shown_span = max(right, span * 1.01)  # the axis' range, for what fits in a bar
        drawn = [(i, e) for i, e in enumerate(events) if depth[i] < max_depth]
        time_by_name: Counter[str] = Counter()
        for _, e in drawn:
            time_by_name[e.name] += e.duration
        ranked = sorted(time_by_name, key=lambda n: (-time_by_name[n], n))
        color = {n: _PALETTE[k % len(_PALETTE)] for k, n in enumerate(ranked)}
        for i, e in drawn:
            y = row_of[(e.lane, depth[i])]
            x, w = e.start * scale, max(e.duration * scale, shown_span * 1e-4)
            ax.barh(y, w, left=x, height=0.8, color=color[e.name], edgecolor="black", linewidth=0.3)
            label = _short(e.name)
            if w >= shown_span * 0.011 * (len(label) + 1):
                ax.text(x + w / 2, y, label, ha="center", va="center", fontsize=7, clip_on=True)
        ax.set_yticks(range(len(rows)), [lane if d == 0 else "" for lane, d in rows], fontsize=8)
        for k in range(1, len(rows)):
            if rows[k][0] != rows[k - 1][0]:
                ax.axhline(k - 0.5, color="0.6", linewidth=0.6)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, shown_span)
        if legend:
            top = ranked[:legend]
            ax.legend([Patch(color=color[n]) for n in top], [_short(n, 40) for n in top], fontsize=7,
                      loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
        if title:
            ax.set_title(title, fontsize=10)
        if memory:
            for device in sorted({s.device for s in self.memory}):
                samples = [s for s in self.memory if s.device == device]
                xs = [0.0] + [s.time * scale for s in samples] + [span]
                ys = [samples[0].allocated] + [s.allocated for s in samples] + [samples[-1].allocated]
                mem_ax.step(xs, [y / 2**20 for y in ys], where="post", label=device)
            mem_ax.set_ylabel("allocated\n(MiB)", fontsize=8)
            mem_ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
            mem_ax.set_xlabel(f"time ({unit})")
        elif not given or ax.get_subplotspec() is None or ax.get_subplotspec().is_last_row():
            ax.set_xlabel(f"time ({unit})")
        if not given:
            fig.tight_layout()
        return fig


def _depths(events: Sequence[Event]) -> list[int]:
    """Nesting depth of each event within its lane (0 = not inside another selected event)."""
    depth = [0] * len(events)
    by_lane: dict[str, list[int]] = {}
    for i, e in enumerate(events):
        by_lane.setdefault(e.lane, []).append(i)
    for idx in by_lane.values():
        idx.sort(key=lambda i: (events[i].start, -events[i].duration))
        stack: list[float] = []  # ends of the open spans
        for i in idx:
            while stack and events[i].start >= stack[-1] - 1e-12:
                stack.pop()
            depth[i] = len(stack)
            stack.append(events[i].end)
    return depth


# Colours by rank of total time in the figure (Tableau 20, dark shades first): the names that matter
# most get the most distinct colours, and the same trace always gets the same figure.
_PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#edc948", "#76b7b2", "#ff9da7",
            "#9c755f", "#bab0ac", "#a0cbe8", "#ffbe7d", "#8cd17d", "#f1ce63", "#86bcb6", "#d37295",
            "#fabfd2", "#d4a6c8", "#d7b5a6", "#79706e"]


def _short(name: str, limit: int = 28) -> str:
    """``aten::add`` -> ``add``; long kernel names cut with an ellipsis."""
    name = name.removeprefix("aten::")
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _time_unit(seconds: float) -> tuple[str, float]:
    for unit, scale in (("s", 1.0), ("ms", 1e3)):
        if seconds >= 1 / scale:
            return unit, scale
    return "µs", 1e6


# -- parsing ----------------------------------------------------------------------------------------
def parse_chrome_trace(data: Mapping[str, Any], main_tid: int | None = None,
                       flops: Mapping[int, int] | None = None) -> Trace:
    """Events, memory samples and lanes of a Chrome trace exported by ``torch.profiler``.

    Complete spans (``"ph": "X"``) become :class:`Event`s, except the profiler's
    own bookkeeping (category ``Trace``); ``[memory]`` instants become
    :class:`MemorySample`s.  Timestamps (microseconds in the file) become seconds
    from the earliest span.  ``main_tid`` names the recording thread's lane
    ``"CPU <tid> (main)"``; ``flops`` maps an operator's ``External id`` to its
    FLOP count (the profiler computes them but does not always export them).
    Raises ``ValueError`` when the trace holds no span.
    """
    raw = data.get("traceEvents") if isinstance(data, Mapping) else None
    if not isinstance(raw, list):
        raise ValueError("not a Chrome trace: expected a JSON object with a 'traceEvents' list")
    spans = [e for e in raw if e.get("ph") == "X" and e.get("cat") not in _SKIPPED and "dur" in e]
    if not spans:
        raise ValueError("the trace holds no event: did the profiled code run any PyTorch operator or "
                         "record_function span (on a thread the profiler watched)?")
    origin = min(float(e["ts"]) for e in spans)
    flops = flops or {}

    def lane_of(e: Mapping[str, Any], start: float) -> tuple[tuple[float, float, float], str]:
        """The lane's name, and its sort key: the main thread, other threads by first event, GPU streams."""
        args = e.get("args", {})
        if e.get("cat") in GPU_CATEGORIES:
            device, stream = int(args.get("device", e["pid"])), int(args.get("stream", e["tid"]))
            return (2, device, stream), f"GPU {device} stream {stream}"
        tid = int(e["tid"])
        if tid == main_tid:
            return (0, 0, 0), f"CPU {tid} (main)"
        return (1, start, tid), f"CPU {tid}"

    events, first_seen = [], {}
    for e in sorted(spans, key=lambda e: (float(e["ts"]), -float(e["dur"]))):
        start = (float(e["ts"]) - origin) / 1e6
        key, lane = lane_of(e, start)
        first_seen.setdefault(lane, key)
        args = e.get("args", {})
        n = args.get("flops", flops.get(args.get("External id", -1)) if e.get("cat") == "cpu_op" else None)
        events.append(Event(str(e.get("name", "")), str(e.get("cat", "")), lane, start,
                            float(e["dur"]) / 1e6, int(n) if n is not None else None, args))
    memory = [MemorySample((float(e["ts"]) - origin) / 1e6,
                           "CPU" if int(e["args"].get("Device Type", 0)) == 0 else f"GPU {e['args'].get('Device Id')}",
                           int(e["args"].get("Total Allocated", 0)))
              for e in raw if e.get("name") == "[memory]" and "args" in e]
    memory.sort(key=lambda s: s.time)
    lanes = sorted(first_seen, key=lambda lane: first_seen[lane])
    duration = max(e.end for e in events)
    return Trace(events, memory, lanes, duration, dict(data))


# -- recording --------------------------------------------------------------------------------------
_KINETO_STATUS = re.compile(rb"^(USDT|INFO):\S+ \S+ \d+:\d+ \S+\.cpp:\d+\] ")


@contextlib.contextmanager
def _without_kineto_status() -> Iterator[None]:
    """Drop Kineto's status lines (``USDT:... profiler_start``), which its C++ code writes to file
    descriptor 2 whatever ``KINETO_LOG_LEVEL`` says and a notebook would show as stderr; every other
    line written meanwhile (warnings, errors) is written back to stderr."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = b"".join(line for line in sink.read().splitlines(keepends=True) if not _KINETO_STATUS.match(line))
            if kept:
                sys.stderr.write(kept.decode(errors="replace"))
                sys.stderr.flush()


def record(fn: Callable[..., Any], *args: Any, steps: int = 1, warmup: int = 1, memory: bool = False,
           flops: bool = False, shapes: bool = False, all_threads: bool = False,
           device: torch.device | str | None = None, annotate_steps: bool = False, **kwargs: Any) -> Trace:
    """Profile ``fn(*args, **kwargs)`` and return its :class:`Trace`.

    ``warmup`` calls run first, unprofiled (first calls allocate, compile and
    fill caches); then ``steps`` calls run under ``torch.profiler.profile``, each
    followed by a device synchronisation so that the kernels they launch finish
    inside the window.  CPU activity is always recorded, CUDA activity when a
    CUDA device is available.  Options:

    * ``memory`` -- allocations and frees (``profile_memory``): :attr:`Trace.memory`;
    * ``flops`` -- the profiler's FLOP estimates (``with_flops``): :attr:`Event.flops`;
    * ``shapes`` -- input shapes in :attr:`Event.args` (``record_shapes``);
    * ``all_threads`` -- also the operators of threads other than the caller's
      (Python threads, pools): PyTorch's ``profile_all_threads``, which at
      the time of writing misses the memory events of other threads;
    * ``annotate_steps`` -- wrap each step in a ``record_function`` span ``"step <i>"``;
    * ``device`` -- the device synchronised after each step (default: every accelerator present).

    Raises ``TypeError`` if ``fn`` is not callable and ``ValueError`` for a
    negative ``warmup``, fewer than one step, or a trace with no event.
    """
    if not callable(fn):
        raise TypeError(f"record() needs a callable to profile, got {type(fn).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1, not {steps!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0, not {warmup!r}")
    from torch.profiler import ProfilerActivity, profile, record_function

    for _ in range(warmup):
        fn(*args, **kwargs)
    synchronize(device)
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    options: dict[str, Any] = {}
    if all_threads:
        try:
            options["experimental_config"] = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
        except (AttributeError, TypeError) as err:
            raise RuntimeError(f"all_threads=True needs torch.profiler's profile_all_threads, which torch "
                               f"{torch.__version__} does not have") from err
    prof = profile(activities=activities, profile_memory=memory, with_flops=flops, record_shapes=shapes, **options)
    with _without_kineto_status():
        prof.start()
    try:
        for i in range(steps):
            if annotate_steps:
                with record_function(f"step {i}"):
                    fn(*args, **kwargs)
            else:
                fn(*args, **kwargs)
            synchronize(device)
    finally:
        with _without_kineto_status():
            prof.stop()
    flop_counts = {ev.id: int(ev.flops) for ev in prof.events() if getattr(ev, "flops", 0)} if flops else {}
    fd, name = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(name)
        data = json.loads(Path(name).read_text())
    finally:
        os.unlink(name)
    if flop_counts:  # write the counts into the file too, so that a saved trace shows them
        for e in data.get("traceEvents", []):
            ext = e.get("args", {}).get("External id") if e.get("cat") == "cpu_op" else None
            if ext in flop_counts and "flops" not in e["args"]:
                e["args"]["flops"] = flop_counts[ext]
    return parse_chrome_trace(data, main_tid=threading.get_native_id(), flops=flop_counts)

