"""The class report's self-contained HTML page (:func:`write_html`)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .charts import _e, _histogram_chart, _ink, _outcome_chart, _question_chart, _time_chart
from .numbers import (
    CAUSES, OUTCOMES, OUTCOME_COLORS, REASON_CUT, _Cell, _Sub, _by_assignment, _outcome_counts,
    _spread, _subs, _summarize,
)
from .text import _counts_phrase, _grouped_reasons, _num, _plural, _score_phrase, _secs


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
