"""The check run's server (``python -m autograder.checks --serve``) ends when its grader is gone.

A grader that dies (killed, or its worker ended) closes both pipes of its check run.  The server must then
stop, not fork job process after job process that each fail at once: a check run whose bubblewrap outlived
its grader did that at 100% of a core for the rest of a test run (seen twice, 2026-11-29).
"""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import ROOT


def _server() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder.checks", "--serve"], cwd=ROOT,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _ends(proc: subprocess.Popen, timeout: float) -> int | None:
    """The exit status, or None (and the process killed) if it still runs after ``timeout`` s."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def test_a_server_whose_grader_left_before_it_was_ready_stops():
    proc = _server()
    proc.stdin.close()               # the grader is gone before the first "ready": both pipes closed
    proc.stdout.close()
    code = _ends(proc, timeout=120)
    assert code == 0, "the check run's server did not stop when nobody could send a job or read a reply"


def test_a_server_whose_grader_leaves_while_a_job_waits_stops():
    proc = _server()
    assert b'"ready": true' in proc.stdout.readline()   # a job process waits for its job
    proc.stdout.close()
    proc.stdin.close()
    code = _ends(proc, timeout=60)
    assert code == 0
