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

from .numbers import OUTCOMES, RAN, summarize
from .page import write_html
from .text import summary_text

__all__ = ["OUTCOMES", "RAN", "summarize", "summary_text", "write_html"]
