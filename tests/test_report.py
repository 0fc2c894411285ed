"""The class report (``autograder.report``): numbers, terminal summary, self-contained HTML.

Sixteen synthetic submissions of two assignments cover every outcome, a
``None`` score, missing cells, a half-point score, an untrusted ``<script>``
reason and student id, a long reason, a CPU-only and an unsandboxed run.
The expected numbers below are worked out by hand from that table.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from autograder.report import OUTCOMES, summarize, summary_text, write_html

SANDBOX = "bwrap, no network, cgroup-v1 memory 4 GiB, 256 pids"
SCRIPT_REASON = "<script>alert(1)</script>"
EVIL_STUDENT = '<img src=x onerror="alert(2)">'
LONG_REASON = "not a notebook: JSON error at line 3: " + "unexpected token " * 20 + "END-OF-LONG-REASON"

AR_CELLS = ("allreduce-sum", 2.0), ("allreduce-ring", 4.0), ("allreduce-time", 4.0)
GS_CELLS = ("scaler-unscale", 3.0), ("scaler-skip", 3.0)


def record(assignment: str, student: str, outcome: str, cell_scores: tuple[float | None, ...] | None,
           total: float, *, reason: str = "", score: float | str | None = "sum", **extra: Any) -> dict[str, Any]:
    """One record; ``score="sum"`` sums the cell scores, ``cell_scores=None`` leaves the cells out."""
    spec = AR_CELLS if assignment == "allreduce" else GS_CELLS
    cells = {} if cell_scores is None else {
        gid: {"score": s, "max_score": top} for (gid, top), s in zip(spec, cell_scores, strict=True)}
    if score == "sum":
        score = sum(s for s in (cell_scores or ()) if s is not None)
    rec = {
        "assignment": assignment, "student": student, "outcome": outcome, "reason": reason,
        "score": score, "max_score": sum(top for _, top in spec), "cells": cells,
        "host": "gpu-01", "device": "cuda:0 (NVIDIA H100 80GB HBM3)", "worker": "w1", "sandbox": SANDBOX,
        "seconds": {"queued": 0.5, "student": round(total * 0.6, 3), "checks": round(total * 0.3, 3), "total": total},
        "attempts": 1, "graded_at": "2026-11-21T21:30:00+00:00", "cpu_only": False,
    }
    rec.update(extra)
    return rec


def class_records() -> list[dict[str, Any]]:
    """Nine allreduce and seven gradscaler submissions."""
    return [
        record("allreduce", "ada", "graded", (2, 4, 4), 10),
        record("allreduce", "bob", "graded", (2, 4, 2), 12, worker="w2", host="gpu-02"),
        record("allreduce", "cy", "graded", (1, 4, 2), 8),
        record("allreduce", "dee", "graded", (2, 3.5, 2), 9),
        record("allreduce", "eve", "timed out", (2, 1, None), 61,
               reason="cell allreduce-time ran past the 60 s cell limit"),
        record("allreduce", "fay", "crashed", (0, 0, 0), 4, reason="kernel died: exit code -11 (segfault)"),
        record("allreduce", "gus", "tampered", (0, 0, 0), 5, reason="edited locked cells: allreduce-sum-check"),
        record("allreduce", "hal", "invalid", None, 0.1, score=None, reason="not a notebook: JSON error at line 3"),
        record("allreduce", "ivy", "graded", (2, 4, 4), 30, cpu_only=True, device="cpu", attempts=2),
        record("gradscaler", "ada", "graded", (3, 3), 6),
        record("gradscaler", "bob", "graded", (3, 0), 7, sandbox="NOT sandboxed"),
        record("gradscaler", "cy", "timed out", (0, None), 62, reason="cell scaler-skip ran past the 60 s cell limit"),
        record("gradscaler", "dee", "crashed", (3, 0), 3, reason=SCRIPT_REASON),
        record("gradscaler", "eve", "invalid", None, 0.1, score=None, reason=LONG_REASON),
        record("gradscaler", "fay", "infrastructure failure", None, 0.0, score=None,
               reason="worker lost 3 times: KilledWorker", attempts=3),
        record("gradscaler", EVIL_STUDENT, "graded", (3, 3), 5),
    ]


@pytest.fixture(scope="module")
def records() -> list[dict[str, Any]]:
    return class_records()


@pytest.fixture(scope="module")
def summary(records) -> dict[str, Any]:
    return summarize(records)


@pytest.fixture(scope="module")
def page(records, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("report") / "report.html"
    assert write_html(records, path, title="Week 3 <grading>", wall_seconds=40.0, workers=2) == path
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# HTML helpers
# ---------------------------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
SVG_LEAVES = {"rect", "line", "circle", "path"}  # written self-closed (<line .../>) or with a <title> child


class TagChecker(HTMLParser):
    """Every element closed, in order (no reliance on the HTML parser's implicit closing)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.attrs: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        self.ids += [v for k, v in attrs if k == "id"]
        self.attrs += [(k, v or "") for k, v in attrs]
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.attrs += [(k, v or "") for k, v in attrs]
        if tag not in VOID and tag not in SVG_LEAVES:
            self.errors.append(f"self-closed <{tag}/>")

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()


def check_html(text: str) -> TagChecker:
    checker = TagChecker()
    checker.feed(text)
    checker.close()
    assert checker.errors == []
    assert checker.stack == []
    assert len(checker.ids) == len(set(checker.ids)), "duplicate ids"
    return checker


def svgs(text: str) -> list[ET.Element]:
    """Every inline SVG, parsed as XML (so each must be well-formed)."""
    return [ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", text, flags=re.DOTALL)]


def chart(text: str, kind: str, index: int = 0) -> ET.Element:
    return [s for s in svgs(text) if s.get("data-chart") == kind][index]


# ---------------------------------------------------------------------------------------------
# summarize
# ---------------------------------------------------------------------------------------------


def test_outcomes_in_order():
    assert OUTCOMES == ("graded", "timed out", "crashed", "tampered", "invalid", "infrastructure failure")


def test_outcome_counts(summary):
    assert summary["n"] == 16
    assert summary["outcomes"] == {"graded": 8, "timed out": 2, "crashed": 2, "tampered": 1, "invalid": 2,
                                   "infrastructure failure": 1}
    assert list(summary["assignments"]) == ["allreduce", "gradscaler"]
    assert summary["assignments"]["allreduce"]["outcomes"] == {
        "graded": 5, "timed out": 1, "crashed": 1, "tampered": 1, "invalid": 1, "infrastructure failure": 0}
    assert summary["assignments"]["gradscaler"]["n"] == 7


def test_score_statistics(summary):
    ar, gs = summary["assignments"]["allreduce"], summary["assignments"]["gradscaler"]
    # allreduce scores 10, 8, 7, 7.5, 3, 0, 0, 10 (hal is invalid: no score)
    assert ar["scored"] == 8 and ar["max_score"] == 10
    assert ar["mean"] == pytest.approx(45.5 / 8)
    assert ar["median"] == pytest.approx(7.25)
    assert (ar["min"], ar["max"]) == (0, 10)
    # gradscaler scores 6, 3, 0, 3, 6
    assert gs["scored"] == 5
    assert gs["mean"] == pytest.approx(3.6)
    assert gs["median"] == 3


def test_histogram_bins(summary):
    assert summary["assignments"]["allreduce"]["histogram"] == [2, 0, 0, 1, 0, 0, 0, 2, 1, 0, 2]
    assert summary["assignments"]["gradscaler"]["histogram"] == [1, 0, 0, 2, 0, 0, 2]


def test_per_question_means_in_notebook_order(summary):
    ar = summary["assignments"]["allreduce"]["questions"]
    assert list(ar) == ["allreduce-sum", "allreduce-ring", "allreduce-time"]
    assert ar["allreduce-sum"] == {"mean": pytest.approx(11 / 8), "max": 2, "n": 8, "full": 5}
    assert ar["allreduce-ring"]["mean"] == pytest.approx(20.5 / 8)
    assert ar["allreduce-time"]["mean"] == pytest.approx(14 / 7)  # eve's unscored cell is left out
    assert ar["allreduce-time"]["n"] == 7
    gs = summary["assignments"]["gradscaler"]["questions"]
    assert gs["scaler-unscale"]["mean"] == pytest.approx(12 / 5)
    assert gs["scaler-skip"]["mean"] == pytest.approx(6 / 4)


def test_full_marks_and_failures(summary):
    ar, gs = summary["assignments"]["allreduce"], summary["assignments"]["gradscaler"]
    assert ar["full_marks"] == ["ada", "ivy"]
    assert sorted(gs["full_marks"]) == sorted(["ada", EVIL_STUDENT])
    assert ar["failures"] == {
        "timed out": [("eve", "cell allreduce-time ran past the 60 s cell limit")],
        "crashed": [("fay", "kernel died: exit code -11 (segfault)")],
        "tampered": [("gus", "edited locked cells: allreduce-sum-check")],
        "invalid": [("hal", "not a notebook: JSON error at line 3")],
    }
    assert list(gs["failures"]) == ["timed out", "crashed", "invalid", "infrastructure failure"]
    assert gs["failures"]["crashed"] == [("dee", SCRIPT_REASON)]


def test_time_statistics_over_submissions_that_ran(summary):
    t = summary["assignments"]["allreduce"]["time"]
    # totals of the eight that ran (hal's invalid notebook did not): 4 5 8 9 10 12 30 61
    assert t["total"] == {"median": pytest.approx(9.5), "p90": pytest.approx(30 + 0.3 * 31), "max": 61}
    assert t["student"]["max"] == pytest.approx(61 * 0.6)
    assert t["checks"]["median"] == pytest.approx(9.5 * 0.3)
    assert summary["time"]["total"]["max"] == 62


def test_flags(summary):
    assert summary["cpu_only"] == 1
    assert summary["assignments"]["allreduce"]["cpu_only"] == 1
    assert summary["not_sandboxed"] == [("gradscaler", "bob")]
    assert summary["reruns"] == [("allreduce", "ivy", 2), ("gradscaler", "fay", 3)]


def test_unknown_outcome_is_refused(records):
    with pytest.raises(ValueError, match="unknown outcome 'passed'"):
        summarize([*records, record("allreduce", "zed", "passed", (2, 4, 4), 1)])


def test_empty_summary():
    s = summarize([])
    assert s["n"] == 0 and s["assignments"] == {} and s["cpu_only"] == 0
    assert set(s["outcomes"].values()) == {0}
    assert s["time"]["total"]["median"] is None


def test_assignment_with_only_invalid_submissions():
    only = [record("allreduce", name, "invalid", None, 0.1, score=None, reason="not a notebook") for name in "xyz"]
    a = summarize(only)["assignments"]["allreduce"]
    assert (a["n"], a["scored"], a["mean"], a["median"], a["min"]) == (3, 0, None, None, None)
    assert a["questions"] == {} and a["full_marks"] == []
    assert a["time"]["total"]["median"] is None
    assert a["failures"]["invalid"] == [("x", "not a notebook"), ("y", "not a notebook"), ("z", "not a notebook")]


# ---------------------------------------------------------------------------------------------
# summary_text
# ---------------------------------------------------------------------------------------------


def test_summary_text_lines(records):
    lines = summary_text(records, wall_seconds=40.0, workers=2).splitlines()
    assert 10 <= len(lines) <= 25
    assert lines[0] == ("allreduce: 9 submissions, 5 graded, 1 timed out, 1 crashed, 1 tampered, 1 invalid; "
                        "mean 5.7/10, median 7.3")
    assert "  per question: allreduce-sum 1.4/2, allreduce-ring 2.6/4, allreduce-time 2/4" in lines
    assert "  full marks: ada, ivy" in lines
    assert "  crashed: fay (kernel died: exit code -11 (segfault))" in lines
    assert "  timed out: eve (cell allreduce-time ran past the 60 s cell limit)" in lines
    assert ("gradscaler: 7 submissions, 3 graded, 1 timed out, 1 crashed, 1 invalid, 1 infrastructure failure; "
            "mean 3.6/6, median 3") in lines
    assert "16 submissions in 40 s on 2 workers: 2.5 s per submission" in lines
    assert any(line.startswith("CPU only: 1 submission graded on CPU") for line in lines)
    assert "WARNING: 1 submission ran NOT sandboxed" in lines


def test_summary_text_groups_students_with_the_same_reason():
    recs = [record("allreduce", n, "crashed", (0, 0, 0), 3, reason="kernel died: out of memory") for n in "ab"]
    assert "  crashed: a, b (kernel died: out of memory)" in summary_text(recs).splitlines()


def test_summary_text_without_wall_time_has_no_throughput(records):
    assert "per submission:" not in summary_text(records).replace("time per submission:", "")
    assert "workers" not in summary_text(records)


def test_summary_text_strips_terminal_control_characters():
    recs = [record("allreduce", "x\x1b[2J", "crashed", (0, 0, 0), 3, reason="boom\x1b]0;pwned\x07\nsecond line")]
    text = summary_text(recs)
    assert "\x1b" not in text and "\x07" not in text
    assert len(text.splitlines()) == len([line for line in text.splitlines() if line])  # no injected newline
    assert "boom ]0;pwned second line" in text


def test_summary_text_empty():
    assert summary_text([]) == "Nothing was graded: no submissions."


# ---------------------------------------------------------------------------------------------
# write_html
# ---------------------------------------------------------------------------------------------


def test_html_is_well_formed(page):
    assert page.startswith("<!DOCTYPE html>")
    check_html(page)
    assert len(svgs(page)) >= 1 + 2 * 3  # the outcome bar; per assignment histogram, questions, time


def test_html_is_self_contained(page):
    lowered = page.lower()
    for banned in ("http://", "https://", "<script", "<link", "<iframe", "<object", "url(", "@import",
                   "javascript:"):
        assert banned not in lowered, banned
    attrs = check_html(page).attrs
    assert not [a for a in attrs if a[0] == "src" or a[0].startswith("on")]
    assert {v[:1] for k, v in attrs if k in ("href", "xlink:href", "action")} <= {"#"}  # links within the page only


def test_untrusted_strings_are_escaped(page):
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=&quot;alert(2)&quot;&gt;" in page
    assert "Week 3 &lt;grading&gt;" in page
    assert "<img" not in page


def test_every_chart_is_an_accessible_image(page):
    charts = svgs(page)
    assert charts
    for svg in charts:
        assert svg.get("role") == "img"
        assert len(svg.get("aria-label", "")) > 20
        assert svg.find("title") is not None and svg.find("title").text == svg.get("aria-label")


def test_histogram_bars_match_the_data(page):
    for index, expected in enumerate(([2, 0, 0, 1, 0, 0, 0, 2, 1, 0, 2], [1, 0, 0, 2, 0, 0, 2])):
        bins = chart(page, "histogram", index).findall(".//g[@class='bin']")
        assert [int(b.get("data-count")) for b in bins] == expected
        assert [int(b.get("data-bin")) for b in bins] == list(range(len(expected)))
        heights = {int(b.get("data-count")): float(b.find("rect").get("height")) for b in bins if b.find("rect")
                   is not None}
        assert 0 not in heights
        per_submission = {round(h / count, 6) for count, h in heights.items()}
        assert len(per_submission) == 1  # bar height is proportional to the count
        labels = [b.find("text").text for b in bins if b.find("text") is not None]
        assert labels == [str(c) for c in expected if c]


def test_outcome_bar_segments(page):
    segments = chart(page, "outcomes").findall(".//g[@class='segment']")
    overall = {g.get("data-outcome"): int(g.get("data-count")) for g in segments
               if g.get("data-row") == "all submissions"}
    assert overall == {"graded": 8, "timed out": 2, "crashed": 2, "tampered": 1, "invalid": 2,
                       "infrastructure failure": 1}
    legend = [t.text for t in chart(page, "outcomes").iter("text")]
    assert "infrastructure failure 1" in legend and "graded 8" in legend


def test_question_bars_are_labelled(page):
    questions = chart(page, "questions", 0).findall(".//g[@class='question']")
    assert [q.get("data-question") for q in questions] == ["allreduce-sum", "allreduce-ring", "allreduce-time"]
    texts = [t.text for q in questions for t in q.iter("text")]
    assert "1.4 / 2" in texts and "2.6 / 4" in texts and "2 / 4" in texts
    track, filled = questions[0].findall("rect")
    assert float(filled.get("width")) / float(track.get("width")) == pytest.approx(11 / 16, abs=1e-3)


def test_time_chart_is_slowest_first_and_leaves_out_unrun(page):
    rows = chart(page, "time", 1).findall(".//g[@class='timing']")
    assert [r.get("data-student") for r in rows][:2] == ["cy", "bob"]
    students = {r.get("data-student") for r in rows}
    assert "eve" not in students and "fay" not in students  # invalid / infrastructure failure never ran


def test_student_table_and_flags(page):
    assert page.count('<table class="students">') == 2
    assert "CPU only" in page and "not sandboxed" in page
    assert "Infrastructure failures:" in page
    ada_row = re.search(r"<tr><td class=student>ada</td>.*?</tr>", page, flags=re.DOTALL).group(0)
    assert ada_row.count("q-full") == 3


def test_long_reason_folds_into_details(page):
    folded = re.search(r"<details><summary>(.*?)</summary>(.*?)</details>", page, flags=re.DOTALL)
    assert folded and len(folded.group(1)) < len(LONG_REASON)
    assert "END-OF-LONG-REASON" in folded.group(2)
    assert "END-OF-LONG-REASON" not in folded.group(1)


def test_failures_grouped_by_cause(page):
    section = page[page.index('id="failures"'):]
    order = [section.index(f">{o}</span>") for o in OUTCOMES[1:]]
    assert order == sorted(order)
    assert "the grading machinery failed" in section


def test_no_cpu_only_flag_when_none(tmp_path):
    path = write_html([record("allreduce", "ada", "graded", (2, 4, 4), 10)], tmp_path / "r.html")
    text = path.read_text()
    check_html(text)
    assert "CPU only" not in text and "not sandboxed" not in text


def test_empty_report(tmp_path):
    text = write_html([], tmp_path / "empty.html").read_text()
    check_html(text)
    assert "Nothing was graded" in text
    assert "<svg" not in text


def test_report_of_only_invalid_submissions(tmp_path):
    only = [record("allreduce", n, "invalid", None, 0.1, score=None, reason="not a notebook") for n in "xy"]
    text = write_html(only, tmp_path / "invalid.html").read_text()
    check_html(text)
    assert "No submission has a score" in text
    assert [s.get("data-chart") for s in svgs(text)] == ["outcomes"]


def test_module_examples():
    """The examples in the module's docstrings (not collected otherwise: ``autograder`` is outside testpaths)."""
    import doctest

    import importlib
    import pkgutil

    import autograder.report

    attempted = failed = 0
    for info in pkgutil.iter_modules(autograder.report.__path__):
        result = doctest.testmod(importlib.import_module(f"autograder.report.{info.name}"))
        attempted, failed = attempted + result.attempted, failed + result.failed
    assert attempted >= 7 and failed == 0


def test_a_mis_scored_submission_is_explained_by_its_cells_output_and_timings(tmp_path: Path) -> None:
    """What ``autograder sample`` and the fixture test print when a record is not as expected."""
    import nbformat
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from autograder import sample

    cells = [new_code_cell("check()", metadata={"nbgrader": {"grade_id": f"ex-{g}", "points": 2}},
                           outputs=[new_output("stream", name="stdout", text=f"{g}: CheckFailed: timed out\n")])
             for g in ("a", "b")]
    folder = tmp_path / "autograded" / "alice" / "ex"
    folder.mkdir(parents=True)
    nbformat.write(new_notebook(cells=cells), folder / "ex.ipynb")
    records = [{"student": "alice", "outcome": "graded", "reason": "", "seconds": {"checks": 61.0},
                "cells": {"ex-a": {"score": 2.0, "max_score": 2.0}, "ex-b": {"score": 0, "max_score": 2.0}}},
               {"student": "bob", "outcome": "graded", "reason": "", "seconds": {}, "cells": {}}]
    lines = sample.explain(tmp_path, "ex", ["alice: score 2.0, expected 4"], records)
    assert lines[0].startswith("--- alice: graded") and '"checks": 61.0' in lines[0]
    assert lines[1:] == ["ex-b: b: CheckFailed: timed out\n"]          # the full-marks cell and bob: not shown
