"""The class report's terminal summary (:func:`summary_text`) and the formatting it shares with the page."""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from .numbers import OUTCOMES, PHASES, _subs, _summarize


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
