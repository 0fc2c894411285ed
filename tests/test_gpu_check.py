"""``make gpu-check`` (scripts/gpu_check.py): stops and says so without a GPU; its report's shape with one."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
gpu_check = importlib.util.module_from_spec(spec)
sys.modules["gpu_check"] = gpu_check      # its dataclasses look their module up
spec.loader.exec_module(gpu_check)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: make gpu-check runs for real here")
def test_without_a_gpu_it_checks_nothing_and_says_so(tmp_path):
    out = subprocess.run([sys.executable, "scripts/gpu_check.py", "--out", str(tmp_path / "check")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == gpu_check.NO_GPU_EXIT == 2, out.stdout + out.stderr
    assert "no GPU on" in out.stderr and "nothing was checked" in out.stderr
    report = (tmp_path / "check" / "report.md").read_text()
    assert "GPU(s): none" in report and "No GPU on this machine: nothing was checked" in report
    assert f"torch: {torch.__version__}" in report
    assert "| step |" not in report and "passed" not in report
    assert sorted(p.name for p in (tmp_path / "check").iterdir()) == ["report.md"], "no step ran"


def test_the_report_of_a_gpu_run_names_the_machine_and_each_step():
    info = {"host": "gpu7", "cores": 16, "os": "Linux", "commit": "abc", "gpus": ["NVIDIA H100 80GB HBM3"],
            "smi": ["NVIDIA H100 80GB HBM3, 580.95.05, 81559 MiB"], "driver": "580.95.05", "torch": "2.11.0+cu130",
            "cuda": "13.0", "python": "3.12.3"}
    steps = [gpu_check.Step("tests", ["pytest"], 0, 12.3, ROOT / "_build" / "gpu-check" / "tests.log"),
             gpu_check.Step("doctor", ["autograder"], 1, 80.0, ROOT / "_build" / "gpu-check" / "doctor.log"),
             gpu_check.Step("sample", ["autograder"])]
    text = gpu_check.report_text(info, steps, (["async.json: launch (...)"], "1 chapter(s) recorded"), "2026-11-24")
    assert "GPU(s): NVIDIA H100 80GB HBM3" in text and "driver: 580.95.05" in text and "CUDA 13.0" in text
    assert "| tests | passed | 12 | _build/gpu-check/tests.log |" in text
    assert "| doctor | FAILED (exit 1) | 80 |" in text and "| sample | not run |" in text
    assert "**Result: FAILED (doctor).**" in text and "- async.json: launch (...)" in text


def test_unknown_steps_are_refused():
    out = subprocess.run([sys.executable, "scripts/gpu_check.py", "--steps", "tests,fly"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 2 and "unknown step(s) ['fly']" in out.stderr


def test_the_chapters_that_failed_are_copied_and_named_with_their_error(tmp_path):
    # The first GPU run (an H200) lost them: the report named no failing chapter and the logs stayed behind.
    reports = tmp_path / "html" / "reports" / "book"
    reports.mkdir(parents=True)
    (reports / "memory.err.log").write_text("Traceback (most recent call last):\n  File ...\n"
                                            "RuntimeError: Found dtype Float but expected BFloat16\n")
    out = tmp_path / "check"
    out.mkdir()
    errors = gpu_check.chapter_errors(tmp_path / "html" / "reports", out)
    assert errors == ["memory: RuntimeError: Found dtype Float but expected BFloat16 (book-errors/memory.err.log)"]
    assert (out / "book-errors" / "memory.err.log").is_file()
    text = gpu_check.report_text({"gpus": ["H200"]}, [gpu_check.Step("book", ["b"], 1, 250.0)], ([], "none"),
                                 "now", errors, finished=False)
    assert "## Chapters that failed to execute" in text and "- memory: RuntimeError" in text
    assert "In progress" in text and "Result:" not in text


def test_a_step_past_the_time_limit_is_stopped_and_reported_so(tmp_path):
    step = gpu_check.Step("tests", [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(60)"])
    gpu_check.run_step(step, tmp_path, seconds_left=2)
    assert step.stopped and step.result == "STOPPED at the time limit" and step.seconds < 30
    assert "started" in step.log.read_text()
