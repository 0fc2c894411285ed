"""The one benchmark helper: warm up, synchronise, repeat, report robust statistics.

Every timing in the book, the exercises and the autograder goes through
:func:`benchmark` (many calls of a function) or :class:`Stopwatch` (one long
piece of work, such as a compilation).  Both wait for the device, because
PyTorch queues GPU work asynchronously: without waiting a timer measures how
long it took to *launch* the work, not to do it.

What exactly is waited for: before starting, the whole device is synchronised
(``torch.cuda.synchronize(device)``: nothing queued earlier is counted).  On
CUDA the interval is then timed with two CUDA events recorded on the device's
*current stream*, and stopping waits for the second event only: work queued on
another stream, or on another device, is included only if it was joined back
into the current stream (``wait_stream`` or an event) before the timer stops.
On a CPU both ends synchronise and read the host clock.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .devices import synchronize

__all__ = [
    "Measurement",
    "Stopwatch",
    "Timeline",
    "benchmark",
    "benchmark_interleaved",
    "compare",
    "format_bytes",
    "format_seconds",
    "load_average",
]


def format_seconds(seconds: float) -> str:
    """Seconds in human units, three significant digits: ``0.000123`` -> ``'123 µs'``."""
    if seconds != seconds:  # NaN
        return "nan"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(seconds) >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_bytes(nbytes: float, binary: bool = False) -> str:
    """Bytes in human units, three significant digits.

    Decimal units by default (kB, MB, GB, TB: 1 GB = 10^9 bytes, as bandwidths
    and disks are quoted); ``binary=True`` gives KiB, MiB, GiB, TiB (powers of
    1024, as memory and caches are sized).

    >>> format_bytes(1.6e8), format_bytes(3 * 2**20, binary=True), format_bytes(512)
    ('160 MB', '3 MiB', '512 B')
    """
    base, units = (1024, ("KiB", "MiB", "GiB", "TiB")) if binary else (1000, ("kB", "MB", "GB", "TB"))
    for power in range(len(units), 0, -1):
        scale = base**power
        if abs(nbytes) >= scale:
            return f"{nbytes / scale:.3g} {units[power - 1]}"
    return f"{nbytes:.0f} B"


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default method) of sorted data."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Measurement:
    """Seconds per call, one value per timed repeat.

    Robust statistics: report the :attr:`median` and the interquartile range
    (:attr:`iqr`), which a single interruption by the operating system cannot
    move far, rather than the mean and standard deviation, which it can.
    """

    times: tuple[float, ...]
    label: str = ""
    device: str = "cpu"
    number: int = 1
    warmup: int = 0

    def __post_init__(self) -> None:
        if not self.times:
            raise ValueError("a Measurement needs at least one time")

    @property
    def _sorted(self) -> list[float]:
        return sorted(self.times)

    @property
    def repeats(self) -> int:
        return len(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.times)

    @property
    def min(self) -> float:
        return min(self.times)

    @property
    def max(self) -> float:
        return max(self.times)

    @property
    def stdev(self) -> float:
        return statistics.stdev(self.times) if len(self.times) > 1 else 0.0

    @property
    def q1(self) -> float:
        return _quantile(self._sorted, 0.25)

    @property
    def q3(self) -> float:
        return _quantile(self._sorted, 0.75)

    @property
    def iqr(self) -> float:
        """Interquartile range ``q3 - q1``: the spread of the middle half."""
        return self.q3 - self.q1

    def per_second(self, amount: float) -> float:
        """Throughput of ``amount`` units of work per call, at the median time."""
        return amount / self.median

    def ratio(self, other: "Measurement") -> float:
        """How many times slower this is than ``other`` (median over median)."""
        return self.median / other.median

    def clearly_differs(self, other: "Measurement") -> bool:
        """True when the middle halves (first to third quartile) of the two do not overlap.

        A deliberately conservative test: on a shared or busy machine two
        medians always differ a little; only a gap between the interquartile
        ranges counts as a difference worth a sentence.
        """
        return self.q3 < other.q1 or other.q3 < self.q1

    def __str__(self) -> str:
        name = f"{self.label}: " if self.label else ""
        return (
            f"{name}{format_seconds(self.median)} per call "
            f"(median of {self.repeats} x {self.number} calls, IQR {format_seconds(self.iqr)}, on {self.device})"
        )

    def _repr_html_(self) -> str:
        return f"<code>{self}</code>"


def _device_of(device: torch.device | str | None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cpu")


class _Clock:
    """Times a block of device work between two synchronisation points."""

    def __init__(self, device: torch.device, timer: Callable[[], float]):
        self.device = device
        self.timer = timer
        self.use_events = device.type == "cuda"

    def start(self) -> None:
        synchronize(self.device)  # do not count work queued before us
        if self.use_events:
            # Events go on the stream that work for *this* device is queued on,
            # which is not the current device's stream when device is cuda:1.
            self._stream = torch.cuda.current_stream(self.device)
            self._start_event = torch.cuda.Event(enable_timing=True)
            self._end_event = torch.cuda.Event(enable_timing=True)
            self._start_event.record(self._stream)
        else:
            self._t0 = self.timer()

    def stop(self) -> float:
        if self.use_events:
            self._end_event.record(self._stream)
            self._end_event.synchronize()
            return self._start_event.elapsed_time(self._end_event) / 1e3
        synchronize(self.device)  # the work we launched must be finished
        return self.timer() - self._t0


def benchmark(
    fn: Callable[..., Any],
    *args: Any,
    device: torch.device | str | None = None,
    warmup: int = 2,
    number: int | None = None,
    repeat: int | None = None,
    min_run_time: float = 0.2,
    max_repeat: int = 200,
    label: str = "",
    timer: Callable[[], float] = time.perf_counter,
    **kwargs: Any,
) -> Measurement:
    """Time ``fn(*args, **kwargs)`` on ``device`` and return a :class:`Measurement`.

    1. **Warm up**: call ``fn`` ``warmup`` times untimed (caches, allocator,
       lazy initialisation, compilation all happen here).
    2. **Calibrate**: unless ``number`` is given, choose how many calls to put
       in one timed block so that a block lasts at least about 5 ms; this keeps
       the timer's resolution and the synchronisation cost out of the result.
    3. **Repeat**: time ``repeat`` blocks (by default as many as fit in
       ``min_run_time`` seconds, at least 5, at most ``max_repeat``), each
       bracketed by device synchronisation, and divide by ``number``.

    ``device`` is where ``fn`` queues its work; ``None`` means the CPU.  On
    CUDA the blocks are timed with CUDA events.  ``timer`` is the host clock
    (replaceable for tests).
    """
    dev = _device_of(device)
    call = (lambda: fn(*args, **kwargs)) if (args or kwargs) else fn
    clock = _Clock(dev, timer)

    for _ in range(warmup):
        call()
    synchronize(dev)

    if number is None:
        clock.start()
        call()
        first = max(clock.stop(), 1e-9)
        number = max(1, min(10_000, math.ceil(5e-3 / first)))
    if number < 1:
        raise ValueError("number must be at least 1")

    times: list[float] = []
    started = timer()
    while True:
        clock.start()
        for _ in range(number):
            call()
        times.append(clock.stop() / number)
        if repeat is not None:
            if len(times) >= repeat:
                break
        elif len(times) >= max_repeat or (len(times) >= 5 and timer() - started >= min_run_time):
            break
    return Measurement(tuple(times), label=label, device=str(dev), number=number, warmup=warmup)


def benchmark_interleaved(
    fns: Mapping[str, Callable[[], Any]],
    *,
    rounds: int = 3,
    repeat: int = 3,
    device: torch.device | str | None = None,
    **kwargs: Any,
) -> list[Measurement]:
    """:func:`benchmark` several functions in alternating rounds; one Measurement each.

    Measuring A completely and then B completely lets a change in the
    machine's load (another program starting) fall on one of them only.
    Alternating A, B, A, B, ... gives both the same conditions.  Each round
    times ``repeat`` blocks of each function (the first round warms up with
    ``warmup`` calls, later rounds with one), and the times of all rounds are
    pooled, so each result has ``rounds * repeat`` times.
    """
    if rounds < 1 or repeat < 1:
        raise ValueError("rounds and repeat must be at least 1")
    warmup = kwargs.pop("warmup", 2)
    number = kwargs.pop("number", None)
    times: dict[str, list[float]] = {label: [] for label in fns}
    numbers: dict[str, int] = {}
    for r in range(rounds):
        for label, fn in fns.items():
            m = benchmark(fn, device=device, warmup=warmup if r == 0 else 1, repeat=repeat, label=label,
                          number=numbers.get(label, number), **kwargs)
            times[label].extend(m.times)
            numbers[label] = m.number  # keep one block size per function across rounds
    dev = str(_device_of(device))
    return [Measurement(tuple(t), label=label, device=dev, number=numbers[label], warmup=warmup) for label, t in times.items()]


def load_average() -> float:
    """The 1-minute load average: how many threads wanted a core, on average.

    Print it beside measurements: a load above the number of cores means
    other programs competed for them, and timings are noisier.  NaN where the
    operating system does not report it.
    """
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return float("nan")


@dataclass
class Stopwatch:
    """Time one long piece of work, synchronising the device at both ends.

    >>> with Stopwatch() as sw:
    ...     _ = sum(range(1000))
    >>> sw.seconds >= 0
    True

    Use it for work that runs once (a compilation, an epoch); use
    :func:`benchmark` for anything that can be repeated.
    """

    device: torch.device | str | None = None
    timer: Callable[[], float] = time.perf_counter
    seconds: float = field(default=float("nan"), init=False)

    def __enter__(self) -> "Stopwatch":
        self._clock = _Clock(_device_of(self.device), self.timer)
        self._clock.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = self._clock.stop()

    def __str__(self) -> str:
        return format_seconds(self.seconds)


class Timeline:
    """Timestamps of device work on one time origin, for timelines (Gantt charts).

    :func:`benchmark` answers "how long"; a timeline answers "when", for
    pictures of what overlapped with what.  On CUDA a mark is an event
    recorded on the current stream, so it stamps the moment the *device*
    reaches that point of the queue; on a CPU it is the host clock, which is
    exact there because CPU operators run synchronously.  Marks are resolved
    to seconds only after synchronising (:meth:`seconds`, :meth:`spans`).

    >>> tl = Timeline("cpu")
    >>> with tl.span("work"):
    ...     _ = sum(range(100))
    >>> [(lane, start <= end) for lane, start, end in tl.spans()]
    [('work', True)]
    """

    def __init__(self, device: torch.device | str | None = None, timer: Callable[[], float] = time.perf_counter):
        self.device = _device_of(device)
        self.cuda = self.device.type == "cuda"
        self.timer = timer
        self.records: list[tuple[str, Any, Any]] = []
        synchronize(self.device)
        self.origin = self.mark()

    def mark(self) -> Any:
        """A timestamp token: a recorded CUDA event, or a host-clock reading."""
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()  # on the current stream: the one running the work being stamped
            return event
        return self.timer()

    def seconds(self, start: Any, end: Any) -> float:
        """Seconds from mark ``start`` to mark ``end`` (CUDA: both must have completed)."""
        if self.cuda:
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return end - start

    @contextlib.contextmanager
    def span(self, lane: str) -> Iterator[None]:
        """Record the block as one span of ``lane`` (safe to use from several threads)."""
        start = self.mark()
        yield
        self.records.append((lane, start, self.mark()))

    def spans(self) -> list[tuple[str, float, float]]:
        """``(lane, start, end)`` of every span, in seconds since the timeline began."""
        synchronize(self.device)
        return [(lane, self.seconds(self.origin, a), self.seconds(self.origin, b)) for lane, a, b in self.records]


def speed_phrase(before: Measurement, after: Measurement, than: str = "") -> str:
    """How ``after`` compares with ``before``, in the words the measurements justify.

    A verb phrase: ``"ran 1.32 times as fast as eager"`` or ``"took 1.15 times as long as
    eager"`` only when :meth:`Measurement.clearly_differs` says the two differ; otherwise ``"was
    not clearly faster or slower than eager (median ratio 0.98)"``.  ``than`` names ``before`` (``"eager"``);
    empty, the comparison is left implicit.  The ratio is ``before.median / after.median``.
    For the sentences of a page, so that a verdict is never stronger than its data.
    """
    ratio = before.median / after.median
    than = f" {than}" if than else ""
    if not before.clearly_differs(after):
        return f"was not clearly faster or slower{' than' + than if than else ''} (median ratio {ratio:.2f})"
    if ratio >= 1:
        return f"ran {ratio:.2f} times as fast{' as' + than if than else ''}"
    return f"took {1 / ratio:.2f} times as long{' as' + than if than else ''}"


def compare(measurements: Iterable[Measurement], baseline: int | str = 0) -> str:
    """A plain-text table of measurements with their ratio to a baseline.

    ``baseline`` is the index or label of the row that the ratios divide by.
    The ratios are what a reader should take away: absolute times depend on
    the machine, ratios measured side by side in one run much less so.
    """
    rows = list(measurements)
    if not rows:
        return ""
    if isinstance(baseline, str):
        labels = [m.label for m in rows]
        if baseline not in labels:
            raise KeyError(f"no measurement labelled {baseline!r}; have {labels}")
        base = rows[labels.index(baseline)]
    else:
        base = rows[baseline]
    width = max(len(m.label) for m in rows + [Measurement((1.0,), label="what")])
    lines = [f"{'what':<{width}}  {'median':>10}  {'IQR':>10}  {'vs ' + (base.label or 'baseline'):>14}"]
    for m in rows:
        lines.append(
            f"{m.label:<{width}}  {format_seconds(m.median):>10}  {format_seconds(m.iqr):>10}  {m.ratio(base):>13.2f}x"
        )
    return "\n".join(lines)
