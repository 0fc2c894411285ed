"""The class report of one grading run: a short terminal summary and a self-contained HTML page.

The autograder hands this module one record per submission (the latest
grading attempt)::

    {"assignment": "allreduce", "student": "ada", "outcome": "graded", "reason": "",
     "score": 8.0, "max_score": 10.0,
     "cells": {"allreduce-sum": {"score": 2.0, "max_score": 2.0}, ...},   # notebook order
     "host": "gpu-03", "device": "cuda:0 (NVIDIA H100 80GB HBM3)", "worker": "tcp://...",
     "sandbox": "bwrap, no network, ...", "attempts": 1, "cpu_only": False,
     "seconds": {"queued": 0.4, "student": 6.1, "checks": 1.9, "total": 8.8},
     "graded_at": "2026-11-21T21:30:00+00:00",
     "penalty": 0.0}              # nbgrader's late penalty (optional; the gradebook's records carry it)

and gets back:

* :func:`summarize` -- the numbers (a plain dict: counts, score statistics,
  per-question means, failures by cause, time statistics);
* :func:`summary_text` -- ten to twenty-five lines for the terminal;
* :func:`write_html` -- one HTML file with inline CSS and inline SVG charts
  drawn here (no JavaScript, nothing fetched from anywhere, so it can be
  mailed or opened offline): headline numbers, an outcome bar, per assignment
  a score histogram, per-question means, time per submission and a table of
  every submission, then the failures grouped by cause.

Conventions, the same in all three:

* Score statistics are over the submissions that have a score (``score`` is
  not ``None``): a submission that timed out or crashed keeps the points of
  the cells that passed; ``invalid`` and ``infrastructure failure`` have none.
* A score is the score ``nbgrader export`` gives: the record's (raw) score less
  its late ``penalty``, never below 0; the table shows the raw score beside it.
* Time statistics are over the submissions that ran (:data:`RAN`: every
  outcome but ``invalid`` and ``infrastructure failure``), so that notebooks
  that were never executed do not pull the median down.
* Every string from a record (student ids, reasons, host names) is untrusted:
  it is escaped in the HTML and stripped of control characters in the text.
"""

from __future__ import annotations

import html
import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

__all__ = ["OUTCOMES", "RAN", "summarize", "summary_text", "write_html"]

OUTCOMES: tuple[str, ...] = ("graded", "timed out", "crashed", "tampered", "invalid", "infrastructure failure")
"""Every outcome of grading one submission, best first."""

RAN: tuple[str, ...] = OUTCOMES[:4]
"""The outcomes of submissions whose notebook was executed (they count in the time statistics)."""

TIMES: tuple[str, ...] = ("total", "student", "checks", "queued")
#: Where a submission's time went, as the runner and the gradebook record it (``autograder.runner``).
PHASES: tuple[str, ...] = ("sandbox", "kernel start", "setup", "cells", "tests", "checks", "gradebook")

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
OUTCOME_COLORS: dict[str, str] = {
    "graded": "#009E73",
    "timed out": "#E69F00",
    "crashed": "#D55E00",
    "tampered": "#CC79A7",
    "invalid": "#999999",
    "infrastructure failure": "#0072B2",
}

CAUSES: dict[str, str] = {
    "timed out": "a cell ran past its time limit; the cells before it keep their points",
    "crashed": "the student's kernel died",
    "tampered": "cells that are locked (hidden tests, given code) were edited",
    "invalid": "not a notebook that can be graded; not scored",
    "infrastructure failure": "the grading machinery failed, not the student: grade these again",
}

REASON_CUT = 70  # characters of a reason shown in the table before the rest folds into <details>


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Cell:
    grade_id: str
    score: float | None
    max_score: float


@dataclass(frozen=True)
class _Sub:
    """One record, checked and typed."""

    assignment: str
    student: str
    outcome: str
    reason: str
    score: float | None
    max_score: float
    cells: tuple[_Cell, ...]
    host: str
    device: str
    worker: str
    sandbox: str
    seconds: Mapping[str, float]
    attempts: int
    graded_at: str
    cpu_only: bool
    penalty: float = 0.0                 # nbgrader's late penalty; ``score`` is the raw score less it, >= 0
    raw_score: float | None = None       # the score before the penalty

    @property
    def ran(self) -> bool:
        return self.outcome in RAN

    @property
    def unsandboxed(self) -> bool:
        """Executed without a sandbox (a submission that never ran exposed nothing)."""
        text = self.sandbox.strip().lower()
        return self.ran and (not text or text.startswith("not"))

    @property
    def full_marks(self) -> bool:
        return self.score is not None and self.max_score > 0 and self.score >= self.max_score


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _sub(record: Mapping[str, Any]) -> _Sub:
    """Check one record and convert it; a missing ``cells`` or ``seconds`` entry counts as empty."""
    outcome = str(record["outcome"])
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r} for {record.get('student')!r}: expected one of {OUTCOMES}")
    cells = tuple(
        _Cell(str(gid), _opt_float(c.get("score")), float(c.get("max_score") or 0.0))
        for gid, c in (record.get("cells") or {}).items()
    )
    raw_seconds = record.get("seconds") or {}
    seconds = {k: float(raw_seconds.get(k) or 0.0) for k in (*TIMES, *PHASES)}
    # The score nbgrader exports: the raw score less the late penalty (the gradebook's), never below 0.
    raw = _opt_float(record.get("score"))
    penalty = float(record.get("penalty") or 0.0)
    score = None if raw is None else max(0.0, raw - penalty)
    return _Sub(
        penalty=penalty, raw_score=raw,
        assignment=str(record["assignment"]), student=str(record["student"]), outcome=outcome,
        reason=str(record.get("reason") or ""), score=score,
        max_score=float(record.get("max_score") or 0.0), cells=cells,
        host=str(record.get("host") or ""), device=str(record.get("device") or ""),
        worker=str(record.get("worker") or ""), sandbox=str(record.get("sandbox") or ""),
        seconds=seconds, attempts=int(record.get("attempts") or 1),
        graded_at=str(record.get("graded_at") or ""), cpu_only=bool(record.get("cpu_only")),
    )


def _subs(records: Iterable[Mapping[str, Any]]) -> list[_Sub]:
    """The records, checked, sorted by assignment then student."""
    return sorted((_sub(r) for r in records), key=lambda s: (s.assignment, s.student))


def _by_assignment(subs: Sequence[_Sub]) -> dict[str, list[_Sub]]:
    groups: dict[str, list[_Sub]] = {}
    for s in subs:
        groups.setdefault(s.assignment, []).append(s)
    return groups


# ---------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------


def _percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) with linear interpolation between order statistics (numpy's default).

    >>> _percentile([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.9)
    9.1
    """
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _spread(values: Sequence[float]) -> dict[str, float | None]:
    """Median, 90th percentile and maximum (``None`` each when there are no values)."""
    if not values:
        return {"median": None, "p90": None, "max": None}
    return {"median": statistics.median(values), "p90": _percentile(values, 0.9), "max": max(values)}


def _time_stats(subs: Sequence[_Sub]) -> dict[str, dict[str, float | None]]:
    """Median, p90 and max of each time (total, student kernel, checks, queued) over the submissions that ran."""
    ran = [s for s in subs if s.ran]
    return {key: _spread([s.seconds[key] for s in ran]) for key in TIMES}


def _outcome_counts(subs: Sequence[_Sub]) -> dict[str, int]:
    counts = Counter(s.outcome for s in subs)
    return {o: counts[o] for o in OUTCOMES}


def _histogram(scores: Sequence[float], max_score: float) -> list[int]:
    """Counts in 1-point bins: bin ``k`` holds ``k <= score < k + 1``; the last bin holds full marks (and above).

    >>> _histogram([0.0, 2.5, 3.0, 3.0, 4.0], 4.0)
    [1, 0, 1, 2, 1]
    """
    top = max([max_score, *scores], default=0.0) if max_score <= 0 else max_score
    if not scores and top <= 0:
        return []
    bins = [0] * (math.floor(top) + 1)
    for score in scores:
        bins[min(max(math.floor(score), 0), len(bins) - 1)] += 1
    return bins


def _questions(subs: Sequence[_Sub]) -> dict[str, dict[str, Any]]:
    """Per graded cell, in notebook order: mean score, max score, how many scored, how many had full marks."""
    found: dict[str, list[_Cell]] = {}
    for s in subs:
        for cell in s.cells:
            found.setdefault(cell.grade_id, []).append(cell)
    out: dict[str, dict[str, Any]] = {}
    for gid, cells in found.items():
        top = max(c.max_score for c in cells)
        scored = [c.score for c in cells if c.score is not None]
        out[gid] = {
            "mean": statistics.fmean(scored) if scored else None,
            "max": top,
            "n": len(scored),
            "full": sum(1 for v in scored if top > 0 and v >= top),
        }
    return out


def _failures(subs: Sequence[_Sub]) -> dict[str, list[tuple[str, str]]]:
    """Outcome -> ``(student, reason)`` for every outcome other than ``graded`` that occurred."""
    out: dict[str, list[tuple[str, str]]] = {}
    for outcome in OUTCOMES[1:]:
        hits = [(s.student, s.reason) for s in subs if s.outcome == outcome]
        if hits:
            out[outcome] = hits
    return out


def _summarize_assignment(subs: Sequence[_Sub]) -> dict[str, Any]:
    scores = [s.score for s in subs if s.score is not None]
    max_score = max((s.max_score for s in subs), default=0.0)
    return {
        "n": len(subs),
        "outcomes": _outcome_counts(subs),
        "scored": len(scores),
        "max_score": max_score,
        "mean": statistics.fmean(scores) if scores else None,
        "median": statistics.median(scores) if scores else None,
        "min": min(scores) if scores else None,
        "max": max(scores) if scores else None,
        "histogram": _histogram(scores, max_score),
        "questions": _questions(subs),
        "full_marks": [s.student for s in subs if s.full_marks],
        "failures": _failures(subs),
        "time": _time_stats(subs),
        "cpu_only": sum(s.cpu_only for s in subs),
    }


def _summarize(subs: Sequence[_Sub]) -> dict[str, Any]:
    return {
        "n": len(subs),
        "outcomes": _outcome_counts(subs),
        "cpu_only": sum(s.cpu_only for s in subs),
        "not_sandboxed": [(s.assignment, s.student) for s in subs if s.unsandboxed],
        "reruns": [(s.assignment, s.student, s.attempts) for s in subs if s.attempts > 1],
        "time": _time_stats(subs),
        "assignments": {a: _summarize_assignment(group) for a, group in _by_assignment(subs).items()},
    }


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The numbers of a grading run, as a plain dict.

    Top level: ``n``, ``outcomes`` (outcome -> count, all six in :data:`OUTCOMES`
    order), ``cpu_only`` (count), ``not_sandboxed`` (``(assignment, student)``
    that ran without a sandbox), ``reruns`` (``(assignment, student, attempts)``
    run more than once), ``time`` and ``assignments`` (by name, sorted), each::

        {"n", "outcomes", "scored", "max_score", "mean", "median", "min", "max",
         "histogram": [count per 1-point bin from 0],
         "questions": {grade_id: {"mean", "max", "n", "full"}},     # notebook order
         "full_marks": [student, ...],
         "failures": {outcome: [(student, reason), ...]},           # outcomes other than "graded" that occurred
         "time": {"total"|"student"|"checks"|"queued": {"median", "p90", "max"}},
         "cpu_only": count}

    Score statistics are ``None`` where nothing has a score; time statistics are
    over the submissions that ran (see the module docstring).  Students are
    sorted by id everywhere.
    """
    return _summarize(_subs(records))


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def _num(x: float | None) -> str:
    """A score with at most one decimal and no trailing ``.0``.

    >>> _num(7.25), _num(8.0), _num(-0.01), _num(None)
    ('7.3', '8', '0', '-')
    """
    if x is None:
        return "-"
    text = str(Decimal(repr(float(x))).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))
    text = text.removesuffix(".0")
    return "0" if text == "-0" else text


def _secs(x: float | None) -> str:
    """A duration: ``2.7 s``, ``38 s``, ``4 min 5 s``, ``15 min``, ``2 h 3 min``.

    >>> _secs(2.71), _secs(38.2), _secs(245.0), _secs(900.0), _secs(7390.0)
    ('2.7 s', '38 s', '4 min 5 s', '15 min', '2 h 3 min')
    """
    if x is None:
        return "-"
    if x < 10:
        return f"{x:.1f} s"
    if x < 120:
        return f"{x:.0f} s"
    if x >= 3600:
        hours, minutes = divmod(round(x / 60), 60)
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    minutes, rest = divmod(round(x), 60)
    return f"{minutes} min {rest} s" if rest else f"{minutes} min"


def _plain(text: str, width: int | None = None) -> str:
    """Untrusted text for a terminal: control characters (escape sequences, newlines, bidi overrides) become spaces."""
    text = "".join(ch if ch.isprintable() else " " for ch in text)
    text = re.sub(r" {2,}", " ", text).strip()
    if width is not None and len(text) > width:
        text = text[: width - 3].rstrip() + "..."
    return text


def _counts_phrase(counts: Mapping[str, int]) -> str:
    """``11 graded, 1 timed out, 1 crashed`` (outcomes that occurred, in order)."""
    parts = [f"{counts[o]} {o}" for o in OUTCOMES if counts.get(o)]
    return ", ".join(parts) if parts else "none"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _throughput(n: int, wall_seconds: float | None, workers: int | None) -> str | None:
    """``14 submissions in 38 s on 2 workers: 2.7 s per submission``."""
    if wall_seconds is None or n == 0:
        return None
    where = f" on {_plural(workers, 'worker')}" if workers else ""
    return f"{_plural(n, 'submission')} in {_secs(wall_seconds)}{where}: {_secs(wall_seconds / n)} per submission"


def _score_phrase(a: Mapping[str, Any]) -> str:
    if a["mean"] is None:
        return "no scores"
    return f"mean {_num(a['mean'])}/{_num(a['max_score'])}, median {_num(a['median'])}"


def _grouped_reasons(pairs: Sequence[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """``(reason, [students])`` with one entry per distinct reason, most frequent first."""
    groups: dict[str, list[str]] = {}
    for student, reason in pairs:
        groups.setdefault(reason, []).append(student)
    return sorted(groups.items(), key=lambda item: -len(item[1]))


# ---------------------------------------------------------------------------------------------
# Terminal summary
# ---------------------------------------------------------------------------------------------


def _names(students: Sequence[str], limit: int = 6) -> str:
    shown = ", ".join(_plain(s, 24) for s in students[:limit])
    return shown + (f" and {len(students) - limit} more" if len(students) > limit else "")


def _failure_lines(failures: Mapping[str, Sequence[tuple[str, str]]], per_outcome: int = 2) -> list[str]:
    """``  crashed: dan, fay (kernel died: exit code -11 (segfault))``, at most ``per_outcome`` reasons each."""
    lines = []
    for outcome, pairs in failures.items():
        groups = _grouped_reasons(pairs)
        for reason, students in groups[:per_outcome]:
            why = f" ({_plain(reason, 70)})" if reason.strip() else ""
            lines.append(f"  {outcome}: {_names(students)}{why}")
        if len(groups) > per_outcome:
            rest = sum(len(st) for _, st in groups[per_outcome:])
            lines.append(f"  {outcome}: {_plural(rest, 'more submission')} with other reasons (see the HTML report)")
    return lines


def _wrap_items(first: str, items: Sequence[str], width: int = 110, indent: str = "    ") -> list[str]:
    """``first`` then the items joined by commas, wrapped between items (never inside one).

    >>> _wrap_items("  q: ", ["a 1/2", "b 2/2", "c 0/2"], width=16)
    ['  q: a 1/2,', '    b 2/2, c 0/2']
    """
    lines, line = [], first
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else "")
        if line != first and len(line) + 1 + len(piece) > width:
            lines.append(line)
            line = indent + piece
        else:
            line += piece if line == first else " " + piece
    lines.append(line)
    return lines


def _assignment_lines(name: str, a: Mapping[str, Any]) -> list[str]:
    lines = [f"{_plain(name)}: {_plural(a['n'], 'submission')}, {_counts_phrase(a['outcomes'])}; {_score_phrase(a)}"]
    questions = [f"{_plain(g, 30)} {_num(q['mean'])}/{_num(q['max'])}" for g, q in a["questions"].items()]
    if questions:
        lines.extend(_wrap_items("  per question: ", questions))
    if a["full_marks"]:
        lines.append(f"  full marks: {_names(a['full_marks'], 8)}")
    lines.extend(_failure_lines(a["failures"]))
    return lines


def _warning_lines(summary: Mapping[str, Any]) -> list[str]:
    lines = []
    if summary["cpu_only"]:
        lines.append(f"CPU only: {_plural(summary['cpu_only'], 'submission')} graded on CPU "
                     "where the exercise wants a GPU")
    if summary["not_sandboxed"]:
        lines.append(f"WARNING: {_plural(len(summary['not_sandboxed']), 'submission')} ran NOT sandboxed")
    if summary["reruns"]:
        lines.append(f"re-run after worker loss: {_plural(len(summary['reruns']), 'submission')}")
    return lines


def summary_text(records: Sequence[Mapping[str, Any]], *, wall_seconds: float | None = None,
                 workers: int | None = None) -> str:
    """A short summary for the terminal: per assignment counts, mean and median, per-question means,
    failures by cause with student ids; then time per submission, throughput and warnings.

    ::

        allreduce: 14 submissions, 11 graded, 1 timed out, 1 crashed, 1 invalid; mean 7.3/10, median 8
          per question: allreduce-sum 1.6/2, allreduce-time 3.1/4, ...
          timed out: carl (cell allreduce-sum ran past the 60 s cell limit)
        time per submission: median 8.1 s, p90 12 s, max 61 s (kernel median 6.0 s, checks median 1.9 s)
          where it went (medians): sandbox 0.0 s, kernel start 0.6 s, setup 0.1 s, cells 5.2 s, checks 1.9 s, ...
        14 submissions in 38 s on 2 workers: 2.7 s per submission
    """
    subs = _subs(records)
    if not subs:
        return "Nothing was graded: no submissions."
    summary = _summarize(subs)
    lines: list[str] = []
    for name, a in summary["assignments"].items():
        lines.extend(_assignment_lines(name, a))
    t = summary["time"]
    if t["total"]["median"] is not None:
        lines.append(f"time per submission: median {_secs(t['total']['median'])}, p90 {_secs(t['total']['p90'])}, "
                     f"max {_secs(t['total']['max'])} (kernel median {_secs(t['student']['median'])}, "
                     f"checks median {_secs(t['checks']['median'])})")
        ran = [s for s in subs if s.ran]
        phases = [(k, statistics.median(s.seconds[k] for s in ran)) for k in PHASES
                  if any(s.seconds[k] for s in ran)]
        if phases:
            lines.append("  where it went (medians): " + ", ".join(f"{k} {_secs(v)}" for k, v in phases))
    throughput = _throughput(len(subs), wall_seconds, workers)
    if throughput:
        lines.append(throughput)
    lines.extend(_warning_lines(summary))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# SVG charts
# ---------------------------------------------------------------------------------------------


def _e(value: Any) -> str:
    """Escape anything for HTML text or a quoted attribute (also valid XML, for the SVG)."""
    return html.escape(str(value), quote=True)


def _f(x: float) -> str:
    """A coordinate: two decimals at most."""
    return f"{x:.2f}".rstrip("0").rstrip(".")


def _ink(color: str) -> str:
    """Black or white, whichever reads better on ``color`` (``#rrggbb``), by WCAG contrast."""
    channels = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    lin = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    lum = 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"


def _text_width(text: str, size: float = 12) -> float:
    """A rough rendered width of ``text`` in a sans-serif font (for fitting labels)."""
    return 0.58 * size * len(text)


def _clip(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "\u2026"


def _svg(width: float, height: float, label: str, body: Iterable[str], kind: str) -> str:
    """An inline SVG chart: ``role="img"``, an ``aria-label`` and a ``<title>`` saying what it shows."""
    return (f'<svg class="chart" data-chart="{_e(kind)}" role="img" aria-label="{_e(label)}" '
            f'width="{_f(width)}" height="{_f(height)}" viewBox="0 0 {_f(width)} {_f(height)}">'
            f"<title>{_e(label)}</title>{''.join(body)}</svg>")


def _text(x: float, y: float, text: str, anchor: str = "start", cls: str = "", fill: str = "") -> str:
    attrs = f' class="{cls}"' if cls else ""
    attrs += f' fill="{fill}"' if fill else ""
    return f'<text x="{_f(x)}" y="{_f(y)}" text-anchor="{anchor}"{attrs}>{_e(text)}</text>'


def _rect(x: float, y: float, w: float, h: float, fill: str, tip: str = "", extra: str = "") -> str:
    title = f"<title>{_e(tip)}</title>" if tip else ""
    return (f'<rect x="{_f(x)}" y="{_f(y)}" width="{_f(max(w, 0.0))}" height="{_f(max(h, 0.0))}" '
            f'fill="{fill}"{extra}>{title}</rect>')


def _legend(items: Sequence[tuple[str, str]], x: float, y: float) -> list[str]:
    """A row of colour swatches with labels, starting at ``(x, y)``."""
    out = []
    for color, label in items:
        out.append(_rect(x, y - 10, 12, 12, color, extra=' rx="2"'))
        out.append(_text(x + 17, y, label))
        x += 17 + _text_width(label) + 20
    return out


def _outcome_chart(rows: Sequence[tuple[str, Mapping[str, int]]], width: float = 1040) -> str:
    """Stacked horizontal bars, one row per ``(label, counts)``, each bar the full width; counts in the segments."""
    label_w, right_w, row_h, top = 150.0, 50.0, 34.0, 8.0
    bar_w = width - label_w - right_w
    body: list[str] = []
    for i, (label, counts) in enumerate(rows):
        y = top + i * row_h
        n = sum(counts.values())
        body.append(_text(label_w - 10, y + 18, _clip(label, 22), "end", "rowlabel"))
        x = label_w
        for outcome in OUTCOMES:
            k = counts.get(outcome, 0)
            if not k:
                continue
            w = bar_w * k / n
            color = OUTCOME_COLORS[outcome]
            body.append(f'<g class="segment" data-row="{_e(label)}" data-outcome="{_e(outcome)}" data-count="{k}">')
            body.append(_rect(x, y, w, 26, color, f"{label}: {k} {outcome}"))
            if _text_width(str(k)) + 8 <= w:
                body.append(_text(x + w / 2, y + 18, str(k), "middle", "seg", _ink(color)))
            body.append("</g>")
            x += w
        body.append(_text(width - right_w + 8, y + 18, f"n={n}", cls="muted"))
    total = {o: sum(c.get(o, 0) for _, c in rows[:1]) for o in OUTCOMES}
    legend_y = top + len(rows) * row_h + 16
    body.extend(_legend([(OUTCOME_COLORS[o], f"{o} {total[o]}") for o in OUTCOMES], label_w, legend_y))
    describe = "; ".join(f"{label}: {_counts_phrase(c)}" for label, c in rows)
    return _svg(width, legend_y + 8, f"Outcomes of grading. {describe}", body, "outcomes")


def _ticks(top: int, most: int = 5) -> list[int]:
    """Integer tick values from 0 to at least ``top``, at most about ``most`` of them."""
    step = max(1, math.ceil(top / (most - 1)))
    return list(range(0, top + step, step)) if top > 0 else [0]


def _label_step(n: int, most: int = 12) -> int:
    """Label every 1st, 2nd, 5th, 10th, 20th, 25th, 50th ... of ``n`` bins: at most about ``most`` labels.

    >>> _label_step(11), _label_step(21), _label_step(101)
    (1, 2, 10)
    """
    for step in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500):
        if n / step <= most:
            return step
    return math.ceil(n / most)


def _histogram_chart(bins: Sequence[int], max_score: float, width: float = 500, height: float = 230) -> str:
    """Vertical bars, one per 1-point bin, each in a ``<g class="bin" data-bin data-count>``; counts above the bars."""
    left, right, top, bottom = 34.0, 10.0, 18.0, 40.0
    plot_w, plot_h = width - left - right, height - top - bottom
    ticks = _ticks(max(bins, default=0))
    scale = plot_h / ticks[-1] if ticks[-1] else 0.0
    slot = plot_w / len(bins)
    body: list[str] = []
    for t in ticks:
        y = top + plot_h - t * scale
        body.append(f'<line x1="{_f(left)}" x2="{_f(width - right)}" y1="{_f(y)}" y2="{_f(y)}" class="grid"/>')
        body.append(_text(left - 6, y + 4, str(t), "end", "muted"))
    label_every = _label_step(len(bins))
    full = math.floor(max_score) if max_score > 0 and float(max_score).is_integer() else None
    for k, count in enumerate(bins):
        x = left + k * slot
        h = count * scale
        color = "#009E73" if k == full else "#0072B2"
        what = "full marks" if k == full else f"{k} to under {k + 1} points"
        body.append(f'<g class="bin" data-bin="{k}" data-count="{count}">')
        if count:
            body.append(_rect(x + 1, top + plot_h - h, slot - 2, h, color, f"{count} with {what}"))
            if slot >= _text_width(str(count)) + 2:
                body.append(_text(x + slot / 2, top + plot_h - h - 4, str(count), "middle", "val"))
        body.append("</g>")
        last = k == len(bins) - 1  # always labelled; a regular label too close before it is left out
        if last or (k % label_every == 0 and len(bins) - 1 - k >= label_every / 2):
            body.append(_text(x + slot / 2, top + plot_h + 15, str(k), "middle", "muted"))
    base = top + plot_h
    body.append(f'<line x1="{_f(left)}" x2="{_f(width - right)}" y1="{_f(base)}" y2="{_f(base)}" class="axis"/>')
    body.append(_text(left + plot_w / 2, height - 6, f"score (points out of {_num(max_score)})", "middle", "muted"))
    described = ", ".join(f"{k}: {c}" for k, c in enumerate(bins) if c)
    return _svg(width, height, f"Score histogram in 1-point bins (submissions per bin: {described})", body,
                "histogram")


def _question_chart(questions: Mapping[str, Mapping[str, Any]], width: float = 500) -> str:
    """One horizontal bar per question: the mean score as a fraction of the question's points, labelled ``1.6 / 2``."""
    label_w, value_w, row_h, top = 150.0, 78.0, 28.0, 6.0
    bar_w = width - label_w - value_w
    body: list[str] = []
    for i, (gid, q) in enumerate(questions.items()):
        y = top + i * row_h
        frac = (q["mean"] or 0.0) / q["max"] if q["max"] else 0.0
        value = f"{_num(q['mean'])} / {_num(q['max'])}"
        tip = f"{gid}: mean {value} over {q['n']} scored, {q['full']} with full points"
        body.append(f'<g class="question" data-question="{_e(gid)}" data-mean="{q["mean"]}" data-max="{q["max"]}">')
        body.append(f"<title>{_e(tip)}</title>")
        body.append(_text(label_w - 8, y + 15, _clip(gid, 22), "end", "rowlabel"))
        body.append(_rect(label_w, y + 3, bar_w, 16, "#e6eaef", extra=' rx="3"'))
        body.append(_rect(label_w, y + 3, bar_w * min(frac, 1.0), 16, "#0072B2", extra=' rx="3"'))
        body.append(_text(label_w + bar_w + 8, y + 15, value, cls="val"))
        body.append("</g>")
    described = ", ".join(f"{g} {_num(q['mean'])} of {_num(q['max'])}" for g, q in questions.items())
    return _svg(width, top + len(questions) * row_h + 4, f"Mean score per question: {described}", body,
                "questions")


TIME_COLORS = (("student", "#56B4E9", "student kernel"), ("checks", "#E69F00", "hidden checks"),
               ("other", "#c9d1da", "other (start-up, collection)"))


def _time_chart(subs: Sequence[_Sub], width: float = 1040, limit: int = 30) -> str:
    """Stacked horizontal bars of time per submission (kernel, checks, the rest), slowest first, at most ``limit``."""
    label_w, value_w, row_h, top = 150.0, 70.0, 20.0, 30.0
    bar_w = width - label_w - value_w
    shown = sorted(subs, key=lambda s: (-s.seconds["total"], s.student))[:limit]
    longest = max((max(s.seconds["total"], s.seconds["student"], s.seconds["checks"]) for s in shown),
                  default=0.0) or 1.0
    colors = {key: color for key, color, _ in TIME_COLORS}
    body = _legend([(c, label) for key, c, label in TIME_COLORS if key != "other"], label_w, 14)
    for i, s in enumerate(shown):
        y = top + i * row_h
        body.append(f'<g class="timing" data-student="{_e(s.student)}" data-total="{s.seconds["total"]}">')
        body.append(f'<circle cx="{_f(6)}" cy="{_f(y + 8)}" r="4.5" fill="{OUTCOME_COLORS[s.outcome]}">'
                    f"<title>{_e(s.outcome)}</title></circle>")
        body.append(_text(16, y + 12, _clip(s.student, 18), cls="rowlabel"))
        # The student's kernel and the hidden checks run side by side: two parallel bars, not a stack.
        total_w = bar_w * s.seconds["total"] / longest
        body.append(_rect(label_w, y + 1, total_w, 15, "#eef0f3", f"{s.student}: total {_secs(s.seconds['total'])}"))
        for row, key in enumerate(("student", "checks")):
            value = s.seconds[key]
            body.append(_rect(label_w, y + 2 + 7 * row, bar_w * value / longest, 6, colors[key],
                              f"{s.student}: {key} {_secs(value)}"))
        body.append(_text(label_w + max(total_w, bar_w * max(s.seconds["student"], s.seconds["checks"]) / longest)
                          + 6, y + 12, _secs(s.seconds["total"]), cls="val"))
        body.append("</g>")
    totals = [s.seconds["total"] for s in subs]
    if totals:
        xm = label_w + bar_w * statistics.median(totals) / longest
        y1, y2 = top - 4, top + len(shown) * row_h
        body.append(f'<line x1="{_f(xm)}" x2="{_f(xm)}" y1="{_f(y1)}" y2="{_f(y2)}" class="median"/>')
        body.append(_text(xm + 4, y2 + 12, f"median {_secs(statistics.median(totals))}", cls="muted"))
    described = ", ".join(f"{s.student} {_secs(s.seconds['total'])}" for s in shown)
    return _svg(width, top + len(shown) * row_h + 18, f"Time per submission, slowest first: {described}", body,
                "time")


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------


CSS = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d8dee4;--panel:#f6f8fa}
*{box-sizing:border-box}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;
  color:var(--fg);background:#fff}
main{max-width:1120px;margin:0 auto;padding:28px 28px 64px}
h1{font-size:26px;margin:0 0 2px}
h2{font-size:20px;margin:40px 0 10px;padding-bottom:6px;border-bottom:1px solid var(--line)}
h3{font-size:15px;margin:0 0 8px}
a{color:#0969da;text-decoration:none}
.sub,.muted-p{color:var(--muted);margin:0 0 14px}
.muted{color:var(--muted)}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin:18px 0}
.card{flex:1 1 150px;background:var(--panel);border:1px solid var(--line);border-radius:8px;padding:10px 14px}
.card b{display:block;font-size:26px;line-height:1.2;font-variant-numeric:tabular-nums}
.card span{color:var(--muted);font-size:12px}
.flag{border-left:4px solid #E69F00;background:#fff7e6;padding:8px 12px;margin:8px 0;border-radius:4px}
.flag.danger{border-color:#D55E00;background:#fdece8}
.figs{display:flex;flex-wrap:wrap;gap:16px;margin:12px 0 18px}
figure{margin:0;flex:1 1 480px;min-width:0;border:1px solid var(--line);border-radius:8px;padding:12px 14px}
figure.wide{flex-basis:100%}
figcaption{color:var(--muted);font-size:12px;margin-top:6px}
svg.chart{display:block;max-width:100%;height:auto}
svg text{font-size:12px;fill:#1f2328}
svg text.muted{fill:#59636e;font-size:11px}
svg text.val{font-variant-numeric:tabular-nums;paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
svg text.seg{font-weight:600}
svg .grid{stroke:#eaeef2;stroke-width:1}
svg .axis{stroke:#8c959f;stroke-width:1}
svg .median{stroke:#1f2328;stroke-width:1;stroke-dasharray:4 3}
.scroll{overflow-x:auto;border:1px solid var(--line);border-radius:8px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{border-bottom:1px solid var(--line);padding:5px 8px;text-align:left;vertical-align:top}
tr:last-child td{border-bottom:0}
th{background:var(--panel);font-weight:600;white-space:nowrap}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.q{text-align:center;font-variant-numeric:tabular-nums}
.q-full{background:#d3f0e2}.q-part{background:#fdebc6}.q-zero{background:#f8d5cf}.q-none{color:var(--muted)}
td.small{font-size:12px;color:var(--muted)}
.badge{display:inline-block;padding:0 7px;border-radius:10px;font-size:12px;white-space:nowrap;margin:1px 2px 1px 0}
.tag{display:inline-block;padding:0 6px;border-radius:4px;font-size:11px;border:1px solid #E69F00;color:#8a5a00;
  white-space:nowrap;margin:1px 2px}
.tag.danger{border-color:#D55E00;color:#a03800}
.reason{min-width:160px;max-width:300px;overflow-wrap:anywhere}
.student{max-width:160px;overflow-wrap:anywhere}
.nowrap{white-space:nowrap}
.where{max-width:220px;overflow-wrap:anywhere}
ul.fails details{display:inline-block;vertical-align:top}
details summary{cursor:pointer}
ul.fails{margin:6px 0 16px;padding-left:20px}
ul.fails li{margin:4px 0;overflow-wrap:anywhere}
code{background:var(--panel);padding:0 4px;border-radius:4px;font-size:12px}
.cause{color:var(--muted);font-weight:400;margin-left:6px}
footer{margin-top:48px;color:var(--muted);font-size:12px}
"""


def _anchor(index: int, name: str) -> str:
    """A safe, unique ``id`` for an assignment's section."""
    return f"a{index}-" + re.sub(r"[^A-Za-z0-9_-]+", "-", name)[:40]


def _badge(outcome: str) -> str:
    color = OUTCOME_COLORS[outcome]
    return f'<span class="badge" style="background:{color};color:{_ink(color)}">{_e(outcome)}</span>'


def _card(value: str, label: str) -> str:
    return f'<div class="card"><b>{_e(value)}</b><span>{_e(label)}</span></div>'


def _when(subs: Sequence[_Sub]) -> str:
    """``graded 2026-11-21 21:02 to 21:30 UTC`` from the records' timestamps.

    Empty when none parses; a timestamp without a zone is taken as UTC.
    """
    stamps = []
    for s in subs:
        try:
            stamp = datetime.fromisoformat(s.graded_at)
        except ValueError:
            continue
        stamps.append(stamp.astimezone(timezone.utc) if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc))
    if not stamps:
        return ""
    first, last = min(stamps), max(stamps)
    zone = " UTC"
    end = last.strftime("%H:%M") if last.date() == first.date() else last.strftime("%Y-%m-%d %H:%M")
    span = first.strftime("%Y-%m-%d %H:%M") + ("" if end == first.strftime("%H:%M") else f" to {end}")
    return f"graded {span}{zone}"


def _headline(summary: Mapping[str, Any], wall_seconds: float | None, workers: int | None) -> str:
    n, counts = summary["n"], summary["outcomes"]
    full = sum(len(a["full_marks"]) for a in summary["assignments"].values())
    cards = [
        _card(str(n), f"submissions of {_plural(len(summary['assignments']), 'assignment')}"),
        _card(str(counts["graded"]), f"graded cleanly ({counts['graded'] / n:.0%})"),
        _card(str(n - counts["graded"]), "not graded cleanly"),
        _card(str(full), "with full marks"),
        _card(_secs(summary["time"]["total"]["median"]), "median time per submission"),
    ]
    if wall_seconds is not None:
        where = f" on {_plural(workers, 'worker')}" if workers else ""
        cards.append(_card(_secs(wall_seconds), f"wall time{where}, {_secs(wall_seconds / n)} per submission"))
    return f'<div class="cards">{"".join(cards)}</div>' + _flags(summary)


def _flag(danger: bool, head: str, text: str) -> str:
    """One warning paragraph; ``text`` is HTML already escaped."""
    return f'<p class="flag{" danger" if danger else ""}"><b>{_e(head)}:</b> {text}</p>'


def _flags(summary: Mapping[str, Any]) -> str:
    """Warnings the instructor must see: CPU-only grading, no sandbox, re-runs, infrastructure failures."""
    out = []
    unsandboxed = summary["not_sandboxed"]
    if unsandboxed:
        who = ", ".join(f"{a}/{s}" for a, s in unsandboxed[:10]) + (", ..." if len(unsandboxed) > 10 else "")
        out.append(_flag(True, "Not sandboxed",
                         f"{_plural(len(unsandboxed), 'submission')} ran without a sandbox ({_e(who)})."))
    if summary["cpu_only"]:
        out.append(_flag(False, "CPU only",
                         f"{_plural(summary['cpu_only'], 'submission')} graded on CPU where the exercise wants a GPU "
                         "(instructor option); their timings say nothing about GPU speed."))
    failed = summary["outcomes"]["infrastructure failure"]
    if failed:
        out.append(_flag(True, "Infrastructure failures",
                         f"{_plural(failed, 'submission')} not graded because the grading machinery failed; "
                         "grade them again."))
    if summary["reruns"]:
        out.append(_flag(False, "Re-runs",
                         f"{_plural(len(summary['reruns']), 'submission')} run more than once (a worker was lost)."))
    return "".join(out)


def _overview_table(summary: Mapping[str, Any]) -> str:
    head = ("<tr><th>Assignment</th><th class=num>Submissions</th><th class=num>Graded</th><th>Other outcomes</th>"
            "<th class=num>Mean</th><th class=num>Median</th><th class=num>Min - max</th>"
            "<th class=num>Full marks</th></tr>")
    rows = []
    for i, (name, a) in enumerate(summary["assignments"].items()):
        others = " ".join(f"{_badge(o)}&#160;{a['outcomes'][o]}" for o in OUTCOMES[1:] if a["outcomes"][o]) or "-"
        mean = f"{_num(a['mean'])} / {_num(a['max_score'])}" if a["mean"] is not None else "-"
        span = f"{_num(a['min'])} - {_num(a['max'])}" if a["min"] is not None else "-"
        rows.append(f'<tr><td><a href="#{_anchor(i, name)}">{_e(name)}</a></td><td class=num>{a["n"]}</td>'
                    f'<td class=num>{a["outcomes"]["graded"]}</td><td>{others}</td>'
                    f'<td class=num>{_e(mean)}</td><td class=num>{_e(_num(a["median"]))}</td>'
                    f'<td class=num>{_e(span)}</td><td class=num>{len(a["full_marks"])}</td></tr>')
    return f'<div class="scroll"><table>{head}{"".join(rows)}</table></div>'


def _outcome_section(summary: Mapping[str, Any]) -> str:
    rows: list[tuple[str, Mapping[str, int]]] = [("all submissions", summary["outcomes"])]
    if len(summary["assignments"]) > 1:
        rows += [(name, a["outcomes"]) for name, a in summary["assignments"].items()]
    return (f'<h2 id="outcomes">Outcomes</h2><figure class="wide">{_outcome_chart(rows)}'
            "<figcaption>Each bar is all the submissions of its row; the numbers in the segments "
            "and the legend are counts.</figcaption></figure>")


def _short_ids(ids: Sequence[str]) -> dict[str, str]:
    """Column headers for grade ids: the common ``prefix-`` dropped (``allreduce-sum`` -> ``sum``)."""
    if len(ids) < 2:
        return {g: g for g in ids}
    prefix = re.match(r"^(.*[-_])", _common_prefix(ids))
    cut = len(prefix.group(1)) if prefix else 0
    return {g: (g[cut:] or g) for g in ids}


def _common_prefix(words: Sequence[str]) -> str:
    first, last = min(words), max(words)
    i = 0
    while i < min(len(first), len(last)) and first[i] == last[i]:
        i += 1
    return first[:i]


def _cell_td(cell: _Cell | None) -> str:
    if cell is None or cell.score is None:
        return '<td class="q q-none">-</td>'
    frac = cell.score / cell.max_score if cell.max_score else 0.0
    cls = "q-full" if frac >= 1 else ("q-zero" if cell.score <= 0 else "q-part")
    score = _e(_num(cell.score))
    return f'<td class="q {cls}" title="{score} of {_e(_num(cell.max_score))}">{score}</td>'


def _reason_html(reason: str) -> str:
    """The reason; a long one shows its start, the whole text folds out of a ``<details>``."""
    if len(reason) <= REASON_CUT:
        return _e(reason)
    return f"<details><summary>{_e(reason[:REASON_CUT].rstrip())}&#8230;</summary>{_e(reason)}</details>"


def _tags(s: _Sub) -> str:
    tags = []
    if s.cpu_only:
        tags.append('<span class="tag" title="graded on CPU where the exercise wants a GPU">CPU only</span>')
    if s.unsandboxed:
        tags.append(f'<span class="tag danger" title="{_e(s.sandbox)}">not sandboxed</span>')
    return "".join(tags)


def _ran_on(s: _Sub) -> str:
    """The device, then ``host / worker``, in one small cell; the sandbox and the full device in its tooltip."""
    tip = f"{s.device}; sandbox: {s.sandbox or 'not recorded'}"
    return (f'<td class="small where" title="{_e(tip)}"><span class=nowrap>{_e(_short_device(s.device))}</span>'
            f"<br>{_e(s.host)} / {_e(s.worker)}</td>")


def _student_row(s: _Sub, ids: Sequence[str]) -> str:
    cells = {c.grade_id: c for c in s.cells}
    score = f"{_num(s.score)} / {_num(s.max_score)}" if s.score is not None else "-"
    late = (f'<br><span class="muted late">{_e(_num(s.raw_score))} less late penalty {_e(_num(s.penalty))}</span>'
            if s.penalty and s.raw_score is not None else "")
    t = s.seconds
    split = f' <span class="muted">({t["student"]:.1f} + {t["checks"]:.1f})</span>' if s.ran else ""
    timing = f'<td class=num title="queued {_e(_secs(t["queued"]))}">{_e(_secs(t["total"]))}{split}</td>'
    attempts = f"<b>{s.attempts}</b>" if s.attempts > 1 else str(s.attempts)
    return (f"<tr><td class=student>{_e(s.student)}</td><td class=num>{'<b>' if s.full_marks else ''}{_e(score)}"
            f"{'</b>' if s.full_marks else ''}{late}</td>{''.join(_cell_td(cells.get(g)) for g in ids)}"
            f"<td>{_badge(s.outcome)}{_tags(s)}</td><td class=reason>{_reason_html(s.reason)}</td>{timing}"
            f"<td class=num>{attempts}</td>{_ran_on(s)}</tr>")


def _short_device(device: str) -> str:
    """``cuda:0 (NVIDIA H100 80GB HBM3)`` -> ``cuda:0 H100 80GB HBM3`` (the full name is in the cell's title).

    >>> _short_device("cuda:0 (NVIDIA H100 80GB HBM3)"), _short_device("cpu")
    ('cuda:0 H100 80GB HBM3', 'cpu')
    """
    match = re.fullmatch(r"(\S+) \((?:NVIDIA )?(.*)\)", device)
    return f"{match.group(1)} {match.group(2)}" if match else device


def _student_table(subs: Sequence[_Sub], questions: Sequence[str]) -> str:
    short = _short_ids(questions)
    qhead = "".join(f'<th class=num title="{_e(g)}">{_e(short[g])}</th>' for g in questions)
    head = (f"<tr><th>Student</th><th class=num>Score</th>{qhead}<th>Outcome</th><th>Reason</th>"
            "<th class=num>Time <span class=muted>(kernel + checks)</span></th><th class=num>Runs</th>"
            "<th>Ran on <span class=muted>(host / worker)</span></th></tr>")
    rows = "".join(_student_row(s, questions) for s in subs)
    return f'<div class="scroll"><table class="students">{head}{rows}</table></div>'


def _assignment_section(index: int, name: str, subs: Sequence[_Sub], a: Mapping[str, Any]) -> str:
    parts = [f'<h2 id="{_anchor(index, name)}">{_e(name)}</h2>',
             (f'<p class="sub">{_plural(a["n"], "submission")}: {_e(_counts_phrase(a["outcomes"]))}; '
              f"{_e(_score_phrase(a))}</p>"),
             '<div class="figs">']
    unscored = a["n"] - a["scored"]
    note = f" {_plural(unscored, 'submission')} without a score (not in the chart)." if unscored else ""
    if a["histogram"] and a["scored"]:
        parts.append(f'<figure><h3>Scores</h3>{_histogram_chart(a["histogram"], a["max_score"])}'
                     f"<figcaption>Bar k counts the scores from k up to k + 1 points; the green bar is full marks."
                     f"{_e(note)}</figcaption></figure>")
    else:
        parts.append(f'<figure><h3>Scores</h3><p class="muted-p">No submission has a score.{_e(note)}</p></figure>')
    if a["questions"]:
        parts.append(f'<figure><h3>Mean score per question</h3>{_question_chart(a["questions"])}'
                     "<figcaption>Mean over the submissions with a score for that question, "
                     "as a fraction of its points.</figcaption></figure>")
    ran = [s for s in subs if s.ran]
    if ran:
        t = a["time"]
        more = f" The {len(ran) - 30} faster ones are in the table." if len(ran) > 30 else ""
        parts.append(f'<figure class="wide"><h3>Time per submission</h3>{_time_chart(ran)}'
                     f"<figcaption>Submissions that ran, slowest first; the dot is the outcome. The student's kernel "
                     f"(upper bar) and the hidden checks (lower bar) run side by side; the grey bar and the "
                     f"label are the submission's wall time. "
                     f"Median {_e(_secs(t['total']['median']))}, p90 {_e(_secs(t['total']['p90']))}, "
                     f"max {_e(_secs(t['total']['max']))}.{_e(more)}</figcaption></figure>")
    parts.append("</div>")
    parts.append(_student_table(subs, list(a["questions"])))
    return "".join(parts)


def _failure_section(subs: Sequence[_Sub]) -> str:
    failed = [s for s in subs if s.outcome != "graded"]
    if not failed:
        return '<h2 id="failures">Failures</h2><p class="muted-p">None: every submission was graded cleanly.</p>'
    parts = ['<h2 id="failures">Failures by cause</h2>']
    for outcome in OUTCOMES[1:]:
        hits = [s for s in failed if s.outcome == outcome]
        if not hits:
            continue
        parts.append(f'<h3>{_badge(outcome)} {len(hits)} <span class="cause">{_e(CAUSES[outcome])}</span></h3>')
        items = []
        for assignment, group in _by_assignment(hits).items():
            for reason, students in _grouped_reasons([(s.student, s.reason) for s in group]):
                who = ", ".join(f"<code>{_e(st)}</code>" for st in students)
                items.append(f"<li><b>{_e(assignment)}</b>: {who} &#8212; "
                             f"{_reason_html(reason) if reason else '<i>no reason given</i>'}</li>")
        parts.append(f'<ul class="fails">{"".join(items)}</ul>')
    return "".join(parts)


def _worker_section(subs: Sequence[_Sub]) -> str:
    """Per worker: host, devices, submissions, outcomes other than graded, median time (a bad worker shows up here)."""
    rows = []
    workers: dict[str, list[_Sub]] = {}
    for s in subs:
        workers.setdefault(s.worker, []).append(s)
    for worker, group in sorted(workers.items()):
        hosts = ", ".join(sorted({s.host for s in group}))
        devices = ", ".join(sorted({s.device for s in group}))
        counts = _outcome_counts(group)
        bad = " ".join(f"{_badge(o)}&#160;{counts[o]}" for o in OUTCOMES[1:] if counts[o]) or "-"
        median = _spread([s.seconds["total"] for s in group if s.ran])["median"]
        rows.append(f"<tr><td class=reason>{_e(worker)}</td><td>{_e(hosts)}</td><td>{_e(devices)}</td>"
                    f"<td class=num>{len(group)}</td><td>{bad}</td><td class=num>{_e(_secs(median))}</td></tr>")
    sandboxes = Counter(s.sandbox or "(not recorded)" for s in subs if s.ran)
    sandbox = "; ".join(f"<code>{_e(k)}</code> ({v})" for k, v in sandboxes.most_common())
    head = ("<tr><th>Worker</th><th>Host</th><th>Device</th><th class=num>Submissions</th>"
            "<th>Not graded cleanly</th><th class=num>Median time</th></tr>")
    return (f'<h2 id="workers">Where it ran</h2><div class="scroll"><table>{head}{"".join(rows)}</table></div>'
            f'<p class="sub" style="margin-top:8px">Sandbox: {sandbox or "-"}</p>')


def _page(title: str, body: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{_e(title)}</title><style>{CSS}</style></head>"
            f"<body><main>{body}</main></body></html>\n")


def render_html(records: Sequence[Mapping[str, Any]], *, title: str = "Grading report",
                wall_seconds: float | None = None, workers: int | None = None) -> str:
    """The report page as a string (see :func:`write_html`)."""
    subs = _subs(records)
    if not subs:
        return _page(title, f"<h1>{_e(title)}</h1><p class=\"sub\">Nothing was graded: this report has no "
                            "submissions.</p>")
    summary = _summarize(subs)
    groups = _by_assignment(subs)
    when = _when(subs)
    parts = [f"<h1>{_e(title)}</h1>",
             (f'<p class="sub">{_plural(len(subs), "submission")} of {_plural(len(groups), "assignment")}'
              f"{', ' + _e(when) if when else ''}</p>"),
             _headline(summary, wall_seconds, workers), _overview_table(summary), _outcome_section(summary)]
    for i, (name, group) in enumerate(groups.items()):
        parts.append(_assignment_section(i, name, group, summary["assignments"][name]))
    parts.append(_failure_section(subs))
    parts.append(_worker_section(subs))
    parts.append("<footer>Self-contained report: inline CSS and SVG, no scripts, nothing loaded from elsewhere."
                 "</footer>")
    return _page(title, "".join(parts))


def write_html(records: Sequence[Mapping[str, Any]], path: Path, *, title: str = "Grading report",
               wall_seconds: float | None = None, workers: int | None = None) -> Path:
    """Write the report of ``records`` to ``path`` (one self-contained HTML file) and return ``path``.

    Sections: headline numbers and warnings (CPU-only grading, no sandbox,
    infrastructure failures, re-runs); an overview table; the outcome bar;
    per assignment a score histogram, the mean per question, the time per
    submission and a table of every submission; the failures grouped by cause;
    the workers.  Every string from the records is escaped.
    """
    path = Path(path)
    path.write_text(render_html(records, title=title, wall_seconds=wall_seconds, workers=workers), encoding="utf-8")
    return path

