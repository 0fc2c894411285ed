"""The class report's SVG charts, drawn here: no JavaScript, nothing fetched."""

from __future__ import annotations

import html
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .numbers import OUTCOMES, OUTCOME_COLORS, _Sub
from .text import _counts_phrase, _num, _secs


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
