"""The numbers of a class report: outcomes, records, score and time statistics (:func:`summarize`)."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


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
