"""``autograder doctor`` (autograder/doctor.py) on this machine, for real, and with one thing broken at a time."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder import course
from autograder.doctor import FAIL, NA, NO_GPU, OK, WARN, Line, Report
from conftest import ROOT

HAS_GPU = torch.cuda.is_available()
CHECKS = ["python stack", "sandbox (bubblewrap)", "limits in force", "student processes", "GPUs",
          "CUDA in the sandbox", "worker GPU pinning", "NCCL (2 GPUs)", "gradebook"]


def doctor(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def rows(output: str) -> dict[str, tuple[str, str]]:
    """``{check: (verdict, detail)}`` from the printed table (wrapped detail lines joined)."""
    table = output.split("-" * 20, 1)[1].split("\nverdict:", 1)[0]
    found: dict[str, list[str]] = {}
    last = None
    for line in table.splitlines():
        match = re.match(r"^(\S.*?)\s{2,}(OK|WARN|FAIL|NO GPU|N/A)\s+([\d.]+)\s+(.*)$", line)
        if match:
            last = match.group(1)
            found[last] = [match.group(2), match.group(4)]
        elif last and line.startswith(" ") and line.strip():
            found[last][1] += " " + line.strip()
    return {k: (v[0], v[1]) for k, v in found.items()}


# The doctor grades every exercise's reference unless told otherwise; here two of them, one that wants a GPU
# and one that does not (every reference gets full marks from the class autograder in test_autograder.py).
GRADED = ["gradscaler", "pipeline_schedule"]


@pytest.mark.slow
def test_the_doctor_grades_the_references_with_full_marks_here(tmp_path):
    (tmp_path / "course").mkdir()
    out = doctor("--course", str(tmp_path / "course"), "doctor", "--json", str(tmp_path / "doctor.json"),
                 "--exercises", ",".join(GRADED))
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-3000:]
    table = rows(out.stdout)
    assert list(table)[:len(CHECKS)] == CHECKS
    assert [f"grade {a}" for a in GRADED] == list(table)[len(CHECKS):]
    for check in ("python stack", "sandbox (bubblewrap)", "gradebook"):
        assert table[check][0] == OK, (check, table[check])
    assert table["limits in force"][0] in (OK, WARN)
    assert table["student processes"][0] in (OK, WARN)
    data = json.loads((tmp_path / "doctor.json").read_text())
    assert data["can_grade"] is True and data["gpus"] == torch.cuda.device_count()
    for line in data["lines"]:
        if line["check"].startswith("grade "):
            assert line["verdict"] == OK, line
            assert line["data"]["score"] == line["data"]["max_score"] > 0
            assert line["data"]["outcome"] == "graded" and line["seconds"] > 0
            assert "full marks" in line["detail"]
    verdict = out.stdout.split("\nverdict:", 1)[1]
    if HAS_GPU:
        assert "CAN GRADE" in verdict and "GPU exercises included" in verdict
    else:
        for check in ("GPUs", "CUDA in the sandbox", "worker GPU pinning", "NCCL (2 GPUs)"):
            assert table[check][0] == NO_GPU and table[check][1].startswith("no GPU"), (check, table[check])
        flat = " ".join(verdict.split())
        assert "CAN GRADE" in flat and "on CPU only" in flat and "--cpu" in flat and "GPU runner" in flat
        gpu_ids = [line["data"]["assignment"] for line in data["lines"] if line["data"].get("requires_gpu")]
        assert gpu_ids and all(a in flat for a in gpu_ids)
        details = {line["check"]: line["detail"] for line in data["lines"]}
        assert all("graded on CPU here" in details[f"grade {a}"] for a in gpu_ids)


@pytest.mark.skipif(HAS_GPU, reason="this machine has a GPU: --gpu is satisfied here")
def test_with_gpu_asked_for_and_none_here_the_node_cannot_grade(tmp_path):
    out = doctor("--course", str(tmp_path), "doctor", "--gpu", "--exercises", "")
    assert out.returncode == 1, out.stdout[-4000:]
    table = rows(out.stdout)
    assert table["GPUs"][0] == FAIL and "--gpu asks for one" in table["GPUs"][1]
    assert table["CUDA in the sandbox"][0] == FAIL
    assert "CANNOT GRADE" in out.stdout and "GPUs" in out.stdout.split("\nverdict:", 1)[1]


def test_without_bubblewrap_the_node_cannot_grade_and_says_why(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    out = doctor("--course", str(tmp_path), "doctor", "--exercises", "allreduce", env={"PATH": str(empty)})
    assert out.returncode == 1, out.stdout[-4000:]
    table = rows(out.stdout)
    assert table["sandbox (bubblewrap)"] == (FAIL, table["sandbox (bubblewrap)"][1])
    assert "bwrap is not installed" in out.stdout and "apt-get install bubblewrap" in out.stdout
    assert table["limits in force"][0] == NA and table["grade allreduce"][0] == NA
    assert "not graded: no sandbox" in table["grade allreduce"][1]
    assert "CANNOT GRADE" in out.stdout


def test_an_unreachable_postgresql_gradebook_fails_with_its_url_and_no_password(tmp_path):
    url = "postgresql+psycopg2://grader:s3cret-word@127.0.0.1:9/gradebook"
    out = doctor("--course", str(tmp_path), "--db-url", url, "doctor", "--exercises", "")
    assert out.returncode == 1, out.stdout[-4000:]
    verdict, detail = rows(out.stdout)["gradebook"]
    assert verdict == FAIL and detail.startswith("cannot connect to postgresql+psycopg2://grader:***@127.0.0.1:9/")
    assert "s3cret-word" not in out.stdout + out.stderr
    assert "CANNOT GRADE" in out.stdout and "gradebook" in out.stdout.split("\nverdict:", 1)[1]


@pytest.mark.parametrize("url, words", [
    ("postgresql://grader:pw@127.0.0.1:9/gradebook", "write postgresql+psycopg2://"),
    ("sqlite:////nonexistent-folder/gradebook.db", "is missing or not writable"),
])
def test_gradebook_problems_are_said_in_their_line(url, words):
    from autograder.doctor import check_gradebook

    slot: dict = {}
    check_gradebook(slot, url)
    assert slot["verdict"] == FAIL and words in slot["detail"] and ":pw@" not in slot["detail"]


def test_a_sqlite_gradebook_is_checked_without_being_created(tmp_path):
    from autograder.doctor import check_gradebook

    slot: dict = {}
    check_gradebook(slot, f"sqlite:///{tmp_path / 'gradebook.db'}")
    assert slot["verdict"] == OK and "will be created" in slot["detail"]
    assert not (tmp_path / "gradebook.db").exists()


def test_a_reference_that_does_not_get_full_marks_fails_the_node(tmp_path):
    # Too short a limit for anything to finish (the kernel's start alone takes longer; 2 s no longer was:
    # the reference's checks take 2.0 s here): the runner records a timeout, which the doctor must not pass.
    out = doctor("--course", str(tmp_path), "doctor", "--exercises", "ring_allreduce", "--timeout", "0.2")
    assert out.returncode == 1, out.stdout[-4000:]
    verdict, detail = rows(out.stdout)["grade ring_allreduce"]
    assert verdict == FAIL and "reference solution timed out" in detail and "10/10" not in detail
    assert "ran past the 0.2 s limit" in detail


def test_the_verdict_follows_the_lines():
    def report(*verdicts: str, gpus: int = 0, required: bool = False) -> Report:
        lines = [Line(f"check {i}", v, "detail") for i, v in enumerate(verdicts)]
        lines.append(Line("grade gradscaler", OK, "full marks", data={"assignment": "gradscaler",
                                                                       "requires_gpu": True}))
        return Report(lines, gpus, required, host="node7")

    assert report(OK, NO_GPU, NA).can_grade
    assert "on CPU only" in report(OK, NO_GPU).verdict() and "gradscaler" in report(OK, NO_GPU).verdict()
    assert "GPU exercises included: 2 GPU(s)" in report(OK, OK, gpus=2).verdict()
    warned = report(OK, WARN)
    assert warned.can_grade and "With warnings: check 1" in warned.verdict()
    failed = report(OK, FAIL, WARN)
    assert not failed.can_grade and failed.verdict().startswith("CANNOT GRADE on node7: check 1 failed")
    text = failed.table(width=80)
    assert "check 1" in text and "FAIL" in text and text.rstrip().splitlines()[-1].strip()


def test_the_doctor_is_a_subcommand_with_its_options():
    out = doctor("doctor", "--help")
    assert out.returncode == 0
    for option in ("--gpu", "--exercises", "--json"):
        assert option in out.stdout
    bad = doctor("doctor", "--exercises", "nosuch")
    assert bad.returncode == 1 and "no exercise nosuch" in bad.stderr


def test_make_doctor_and_gpu_check_are_in_the_makefile():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^doctor: setup\n\t@\$\(BIN\)/python -m autograder doctor", makefile, flags=re.M)
    assert re.search(r"^gpu-check: setup\n\t@\$\(BIN\)/python scripts/gpu_check.py", makefile, flags=re.M)
    assert Path(ROOT / "scripts" / "gpu_check.py").is_file()


def test_a_lost_point_says_why_on_its_own_line():
    """A reference that loses points on a GPU runner (2026-11-27: four did) must say why, not only '8/10'."""
    import nbformat

    from autograder.doctor import why_lost

    cell = nbformat.v4.new_code_cell("hidden tests")
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="checking\n"),
                    nbformat.v4.new_output("error", ename="CheckFailed", evalue="k=2 on cuda:0: wrong sum",
                                           traceback=[])]
    assert why_lost(cell) == "CheckFailed: k=2 on cuda:0: wrong sum"
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="a\nthe last line\n")]
    assert why_lost(cell) == "the last line"
    line = Line("grade allreduce", FAIL, "reference solution graded: 8/10 (...)\nallreduce-sum-test-values: "
                "CheckFailed: k=2 on cuda:0: wrong sum")
    text = Report([line], 1, True, host="gpu1").table(width=100)
    assert any(row.strip().startswith("allreduce-sum-test-values: CheckFailed") for row in text.splitlines())
