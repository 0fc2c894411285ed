"""Pipeline schedules as data: GPipe, 1F1B, interleaved 1F1B (virtual stages) and zero-bubble ZB-H1; their
closed forms, and drawing a run (:func:`svg`, :func:`plot`).

A schedule is a list per rank (a *stage*) of :class:`Action`\\ s, run in order: ``F`` (forward),
``B`` (backward) and, in the zero-bubble family, ``W``, each for a micro-batch ``i`` of ``m`` and a
model *chunk* ``c`` of ``v``.  :func:`dlperf.parallel.pipeline.simulate` runs one.

* **GPipe** (Huang et al., NeurIPS 2019) and **1F1B** (PipeDream-Flush; Narayanan et al., ICML 2021
  and SC 2021): one chunk per rank, ``B`` is the whole backward pass.  Idle share of the makespan
  with equal stages and free transfers: ``(p - 1) / (m + p - 1)`` (:func:`bubble_fraction`).
* **Interleaved 1F1B** (Narayanan et al., "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM", SC 2021, section 2.2.2): the model is cut into ``v p`` chunks and
  rank ``r`` holds chunks ``r, r + p, r + 2p, ...`` (chunk ``c`` of rank ``r`` is virtual stage
  ``c p + r``), each ``1/v`` of a stage.  The fill and the drain then take ``1/v`` as long: the
  bubble's time relative to the ideal compute is ``(p - 1) / (v m)`` instead of ``(p - 1) / m``
  (idle share ``(p - 1) / (v m + p - 1)``, :func:`interleaved_bubble_fraction`), for ``v`` times as
  many messages and more activations held: rank ``r`` holds up to ``2 (p - 1 - r) + (v - 1) p + 1``
  chunk-micro-batches (Megatron's warm-up plus one), ``p + (p - 1) / v`` stage-micro-batches on rank
  0 instead of 1F1B's ``p``.  The order is Megatron-LM's (``forward_backward_pipelining_with_
  interleaving``): micro-batches in groups of ``p``, each group through every chunk; ``m`` must be a
  multiple of ``p``.
* **ZB-H1** (Qi, Wan, Huang & Lin, "Zero Bubble Pipeline Parallelism", ICLR 2024, section 3.1):
  the backward pass is split into ``B``, the gradient with respect to the stage's input (what the
  previous stage waits for), and ``W``, the gradient with respect to the weights (which nobody
  waits for).  Each stage runs 1F1B's ``F`` and ``B`` order, and stage ``s`` defers its ``W`` passes
  by ``s`` micro-batches, running them where 1F1B would wait in the drain.  A micro-batch's
  activations are held until its ``W``: stage ``s`` holds ``p - s`` + ``s`` = ``p`` at most, 1F1B's
  peak.  With times ``T_F``, ``T_B``, ``T_W`` on every stage, ``m >= p`` and ``T_W <= T_F`` (so that
  a deferred ``W`` fits where the stage would wait for a ``B``) the makespan is
  ``m (T_F + T_B + T_W) + (p - 1)(T_F + T_B - T_W)`` (:func:`zb_h1_makespan`; the paper's bubble
  ``(p - 1)(T_F + T_B - T_W)`` against 1F1B's ``(p - 1)(T_F + T_B + T_W)``): with the three equal,
  a third of 1F1B's bubble.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

__all__ = [
    "ALL_SCHEDULES",
    "SCHEDULES",
    "Action",
    "Schedule",
    "bubble_fraction",
    "gpipe",
    "interleaved_1f1b",
    "interleaved_bubble_fraction",
    "interleaved_peak",
    "one_f_one_b",
    "plot",
    "shape",
    "svg",
    "validate",
    "zb_h1",
    "zb_h1_makespan",
]


@dataclass(frozen=True)
class Action:
    """One unit of a stage's work: ``kind`` ``"F"``, ``"B"`` or ``"W"`` of a micro-batch, on model chunk ``chunk``."""

    kind: str
    microbatch: int
    chunk: int = 0

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}" + (f".{self.chunk}" if self.chunk else "")


Schedule = list[list[Action]]


def _check(p: int, m: int) -> None:
    if p < 1 or m < 1:
        raise ValueError(f"a pipeline needs p >= 1 stages and m >= 1 micro-batches, got p={p}, m={m}")


def gpipe(p: int, m: int) -> Schedule:
    """Every stage: ``F_0 .. F_{m-1}``, then ``B_0 .. B_{m-1}`` (the order of PyTorch's ``ScheduleGPipe``)."""
    _check(p, m)
    return [[Action("F", i) for i in range(m)] + [Action("B", i) for i in range(m)] for _ in range(p)]


def one_f_one_b(p: int, m: int) -> Schedule:
    """1F1B: stage ``s`` warms up with ``w = min(p-1-s, m)`` forwards, alternates F and B, then drains.

    >>> [" ".join(map(str, actions)) for actions in one_f_one_b(2, 3)]
    ['F0 F1 B0 F2 B1 B2', 'F0 B0 F1 B1 F2 B2']
    """
    _check(p, m)
    schedule = []
    for s in range(p):
        warmup = min(p - 1 - s, m)
        actions = [Action("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            actions += [Action("F", warmup + i), Action("B", i)]
        actions += [Action("B", i) for i in range(m - warmup, m)]
        schedule.append(actions)
    return schedule


def interleaved_1f1b(p: int, m: int, v: int = 2) -> Schedule:
    """Megatron-LM's interleaved 1F1B: ``v`` chunks per rank, ``m`` a multiple of ``p``.

    The ``k``-th forward of a rank is micro-batch ``(k // (p v)) p + k % p`` on chunk
    ``(k // p) % v``; its ``k``-th backward the same micro-batch on chunk ``v - 1 - (k // p) % v``.
    Rank ``r`` warms up with ``min(m v, 2 (p - 1 - r) + (v - 1) p)`` forwards, alternates, drains.

    >>> " ".join(map(str, interleaved_1f1b(2, 2, 2)[1]))
    'F0 F1 F0.1 B0.1 F1.1 B1.1 B0 B1'
    """
    _check(p, m)
    if v == 1:                 # no virtual stages: Megatron runs its plain 1F1B
        return one_f_one_b(p, m)
    if v < 1 or m % p:
        raise ValueError(f"interleaved 1F1B needs v >= 1 chunks and m a multiple of p = {p}, got v={v}, m={m}")

    def action(kind: str, k: int) -> Action:
        chunk = (k // p) % v
        return Action(kind, (k // (p * v)) * p + k % p, chunk if kind == "F" else v - 1 - chunk)

    total, schedule = m * v, []
    for r in range(p):
        warmup = min(total, 2 * (p - 1 - r) + (v - 1) * p)
        actions = [action("F", k) for k in range(warmup)]
        for k in range(total - warmup):
            actions += [action("F", warmup + k), action("B", k)]
        actions += [action("B", k) for k in range(total - warmup, total)]
        schedule.append(actions)
    return schedule


def zb_h1(p: int, m: int) -> Schedule:
    """ZB-H1: 1F1B's ``F`` and ``B`` order, each ``B`` followed by the ``W`` of ``s`` micro-batches earlier.

    >>> [" ".join(map(str, actions)) for actions in zb_h1(2, 3)]
    ['F0 F1 B0 W0 F2 B1 W1 B2 W2', 'F0 B0 F1 B1 W0 F2 B2 W1 W2']
    """
    schedule = []
    for s, actions in enumerate(one_f_one_b(p, m)):
        row = []
        for a in actions:
            row.append(a)
            if a.kind == "B" and a.microbatch >= s:
                row.append(Action("W", a.microbatch - s))
        row += [Action("W", i) for i in range(max(0, m - s), m)]
        schedule.append(row)
    return schedule


#: The classic schedules, ``name -> f(p, m)``: one chunk per rank, a whole backward pass.
SCHEDULES: dict[str, Callable[[int, int], Schedule]] = {"GPipe": gpipe, "1F1B": one_f_one_b}

#: Every schedule the simulator knows by name (interleaved with ``v = 2`` chunks per rank).
ALL_SCHEDULES: dict[str, Callable[[int, int], Schedule]] = {
    **SCHEDULES, "interleaved 1F1B": partial(interleaved_1f1b, v=2), "ZB-H1": zb_h1}


def bubble_fraction(p: int, m: int) -> float:
    """``(p - 1) / (m + p - 1)``: the idle fraction of GPipe and 1F1B with equal stages and free transfers.

    >>> bubble_fraction(4, 8) == 3 / 11
    True
    """
    _check(p, m)
    return (p - 1) / (m + p - 1)


def interleaved_bubble_fraction(p: int, m: int, v: int) -> float:
    """``(p - 1) / (v m + p - 1)``: the idle share of interleaved 1F1B; Megatron's ratio to the ideal compute,
    ``(p - 1) / (v m)``, is ``x`` where the idle share is ``x / (1 + x)``."""
    _check(p, m)
    return (p - 1) / (v * m + p - 1)


def interleaved_peak(p: int, m: int, v: int, stage: int) -> int:
    """Chunk-micro-batches whose activations rank ``stage`` holds at most under interleaved 1F1B."""
    if v == 1:
        return min(m, p - stage)
    return min(m * v, 2 * (p - 1 - stage) + (v - 1) * p + 1)


def zb_h1_makespan(p: int, m: int, forward: float, backward: float, weight: float) -> float:
    """``m (T_F + T_B + T_W) + (p - 1)(T_F + T_B - T_W)``, ``T_B = backward - weight``, ``T_W = weight``
    (Qi et al. 2024, section 3.1), what :func:`zb_h1` takes when ``m >= p`` and ``T_W <= T_F``."""
    tb, tw = backward - weight, weight
    return m * (forward + tb + tw) + (p - 1) * (forward + tb - tw)


def shape(schedule: Schedule) -> tuple[int, int, int, bool]:
    """``(p, m, v, split)``: stages, micro-batches, chunks per stage, and whether it has ``W`` actions."""
    p = len(schedule)
    first = schedule[0] if schedule else []
    v = len({a.chunk for a in first}) or 1
    m = sum(a.kind == "F" for a in first) // v
    return p, m, v, any(a.kind == "W" for a in first)


def validate(schedule: Schedule, m: int | None = None) -> None:
    """Each stage runs ``F`` and ``B`` (and ``W``, if any stage has one) of every micro-batch on each of its
    chunks exactly once, ``F`` before ``B`` before ``W``."""
    p, m_seen, v, split = shape(schedule)
    m = m_seen if m is None else m
    kinds = ("F", "B", "W") if split else ("F", "B")
    expected = sorted((k, i, c) for k in kinds for i in range(m) for c in range(v))
    for s, actions in enumerate(schedule):
        got = sorted((a.kind, a.microbatch, a.chunk) for a in actions)
        if got != expected:
            what = "F, B and W" if split else "F and B"
            chunks = f" on chunks 0..{v - 1}" if v > 1 else ""
            raise ValueError(f"stage {s} does not run {what} of micro-batches 0..{m - 1}{chunks} once each: "
                             f"{[str(a) for a in actions]}")
        order = {(a.kind, a.microbatch, a.chunk): k for k, a in enumerate(actions)}
        for first, then in (("F", "B"), ("B", "W")) if split else (("F", "B"),):
            late = [(i, c) for i in range(m) for c in range(v) if order[(then, i, c)] < order[(first, i, c)]]
            if late:
                i, c = late[0]
                tag = f".{c}" if c else ""
                raise ValueError(f"stage {s} runs {then}{i}{tag} before {first}{i}{tag}")


# --------------------------------------------------------------------------------------------
# Drawing a run (SVG: light enough for a widget with dozens of states)
# --------------------------------------------------------------------------------------------

_COLORS = {"F": ("#9ecae1", "#08306b"), "B": ("#fdae6b", "#7f2704"), "W": ("#a1d99b", "#00441b")}
_DARKER = {"F": "#4292c6", "B": "#f16913", "W": "#41ab5d"}     # odd chunks of an interleaved schedule


def _color(label: str) -> tuple[str, str]:
    """Fill and ink of an action's label (``F3``, ``B0.1``: chunk 1 drawn darker, ``W2``)."""
    fill, ink = _COLORS[label[0]]
    chunk = int(label.split(".")[1]) if "." in label else 0
    return (_DARKER[label[0]], "white") if chunk % 2 else (fill, ink)


def svg(run: Any, width: int = 640, row: int = 26, title: str | None = None) -> str:
    """The timeline of ``run``: one row per stage, ``F_i`` blue, ``B_i`` orange, ``W_i`` green (odd chunks darker),
    idle time blank."""
    left, top = 64, 22 if title else 6
    scale = (width - left - 10) / run.makespan
    height = top + run.p * row + 24
    label = title or f"{run.name}: p={run.p}, m={run.m}"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(label)}"><title>{html.escape(label)}</title>']
    if title:
        parts.append(f'<text x="{left}" y="14" font-size="12">{html.escape(title)}</text>')
    for s in range(run.p):
        y = top + s * row
        parts.append(f'<text x="{left - 6}" y="{y + row * 0.65:.1f}" font-size="11" text-anchor="end">stage {s}</text>')
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{run.makespan * scale:.1f}" height="{row - 4}" '
                     'fill="#f4f4f4"/>')
    small = max(6, min(11, int(scale * min(t.end - t.start for t in run.tasks) / 2.2)))
    for t in run.tasks:
        fill, ink = _color(t.label)
        x, w, y = left + t.start * scale, (t.end - t.start) * scale, top + t.stage * row
        parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row - 4}" fill="{fill}" stroke="white"/>')
        if w >= 10:
            parts.append(f'<text x="{x + w / 2:.1f}" y="{y + row * 0.65:.1f}" font-size="{small}" text-anchor="middle" '
                         f'fill="{ink}">{t.label}</text>')
    axis_y = top + run.p * row + 14
    parts.append(f'<text x="{left}" y="{axis_y}" font-size="10">0</text>'
                 f'<text x="{width - 10}" y="{axis_y}" font-size="10" text-anchor="end">{run.makespan:g} '
                 'time units</text></svg>')
    return "".join(parts)


def plot(ax: Any, spans: Sequence[Sequence[tuple[str, float, float]]], title: str = "", unit: str = "") -> None:
    """Draw per-stage spans ``(action, start, end)`` on a matplotlib axis: forwards blue, backwards orange,
    weight gradients green, odd chunks darker."""
    for s, row in enumerate(spans):
        for label, start, end in row:
            fill, ink = _color(label)
            ax.barh(s, end - start, left=start, height=0.8, color=fill, edgecolor="white")
            ax.text((start + end) / 2, s, label, ha="center", va="center", fontsize=7, color=ink, clip_on=True)
    ax.set_yticks(range(len(spans)), [f"stage {s}" for s in range(len(spans))])
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
