"""The grading benchmark's planning figures (``scripts/bench_grading.py --throughput``), on made-up records."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import bench_grading as B  # noqa: E402
from autograder import sample  # noqa: E402


def _sample(student: str, score: float | None) -> sample.Sample:
    return sample.Sample(student, "why", b"{}", ("graded",), score)


def test_a_plan_row_counts_the_rate_the_runs_start_and_a_class_of_100():
    samples = [_sample("reference", 10.0), _sample("stub", 0.0), _sample("off-by-one", 7.0), _sample("x", None)]
    records = [{"outcome": "graded", "seconds": {"total": t}} for t in (2.0, 4.0, 4.0, 6.0)]
    row = B.plan_row("ex", samples, wall=20.0, scores={"reference": 10.0, "stub": 0.0, "off-by-one": 6.0, "x": 3.0},
                     records=records, workers=1)
    assert row["per_hour_per_worker"] == 720                     # 4 submissions in 20 s
    assert row["median_submission_s"] == 4.0
    assert row["start_and_end_s"] == 4.0                         # 20 s less 4 x 4 s
    assert row["class_of_100_minutes"] == round((4.0 + 400.0) / 60, 1)
    assert row["wrong_scores"] == {"off-by-one": [6.0, 7.0]}     # an unscored sample is not compared


def test_two_workers_halve_the_class_and_the_rate_per_worker():
    samples = [_sample(f"s{i}", 1.0) for i in range(4)]
    records = [{"outcome": "graded", "seconds": {"total": 3.0}}] * 4
    row = B.plan_row("ex", samples, wall=8.0, scores={s.student: 1.0 for s in samples}, records=records, workers=2)
    assert row["start_and_end_s"] == 2.0                         # 8 s less 4 x 3 s / 2
    assert row["per_hour_per_worker"] == 900
    assert row["class_of_100_minutes"] == round((2.0 + 150.0) / 60, 1)
    assert row["wrong_scores"] == {}


@pytest.mark.skipif(B.gpu_count() > 0, reason="this machine has a GPU")
def test_the_gpu_throughput_says_so_without_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["bench_grading.py", "--throughput", "--gpu"])
    assert B.main() == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
