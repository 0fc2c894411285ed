"""A worker grades hundreds of notebooks in one process: each run must give back what it held there."""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat

from autograder.kernel import run_notebook
from autograder.sandbox import Sandbox


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_running_notebooks_leaves_no_thread_behind(tmp_path: Path) -> None:
    """nbclient leaves a kernel manager it was handed to its owner; without the runner's release, every
    run left a heartbeat thread and two zmq contexts (four threads) in the worker (measured: 226 contexts
    in a worker after a class)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 6 * 7\nprint(x)")])
    counts = []
    for i in range(3):
        workdir = tmp_path / f"job{i}"
        cwd = workdir / "cwd"
        cwd.mkdir(parents=True)
        with Sandbox(workdir / "box", enabled=False) as box:
            env = {**box.base_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
            ran, outcome, reason = run_notebook(nbformat.from_dict(nb), box, workdir, cwd, env, cell_timeout=60,
                                                output_bytes=10**6, deadline=time.monotonic() + 120,
                                                submission_timeout=120)
        assert outcome == "graded", reason
        assert ran.cells[0].outputs[0]["text"] == "42\n"
        counts.append(_threads())
    assert counts[2] == counts[0], f"threads after each run: {counts}"


def test_a_warm_kernel_preloads_dynamo_only_where_the_hidden_tests_run_in_it() -> None:
    """nbgrader mode runs the hidden tests (which may train: ``optimizer.step()`` imports torch._dynamo)
    in the kernel; trusted mode runs them in the check run, so its kernels do not pay for the import."""
    from autograder.warm_kernel import imports

    assert imports(("torch", "numpy"), trusted=False) == ("torch", "numpy", "torch._dynamo")
    assert imports(("torch", "numpy"), trusted=True) == ("torch", "numpy")
    assert imports(("numpy",), trusted=False) == ("numpy",)
    assert imports(("torch", "torch._dynamo"), trusted=False) == ("torch", "torch._dynamo")
