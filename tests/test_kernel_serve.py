"""Served kernels (``autograder.kernel_serve``): one warm process per worker forks each submission's kernel.

Real bubblewrap sandboxes, real kernels run by nbclient as the runner runs them: the second submission
on the same server must find nothing the first left (files in ``/tmp``, ``/dev/shm``, the sandbox's
folder or its home, a System V segment, a process running in a session of its own), must not read the
server's memory, and a server whose kernel ran past the time limit (its whole sandbox killed) is not used
again.  The CPU it saves is measured by ``scripts/cpu_by_process.py`` (see ``book/grading.md``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from autograder import slots
from autograder.kernel import run_notebook
from autograder.runner import Settings

pytestmark = pytest.mark.usefixtures("bubblewrap")

SETTINGS = Settings(memory_bytes=2 * 2**30, processes=256)

LEAVE = r"""
import ctypes, os, subprocess
open("/tmp/left-in-tmp", "w").write("first")
open("/dev/shm/left-in-shm", "w").write("first")
open(os.path.expanduser("~/left-in-home"), "w").write("first")
open("../../../left-in-box", "w").write("first")              # the sandbox's folder, beside the submission's
libc = ctypes.CDLL(None, use_errno=True)
segment = libc.shmget(0x5eed, 4096, 0o1666)                   # IPC_CREAT | 0666: outlives its process
subprocess.Popen(["sleep", "300"], start_new_session=True)    # a process left behind, in a session of its own
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "segment": segment}))
"""

LOOK = r"""
import ctypes, glob, os
libc = ctypes.CDLL(None, use_errno=True)
found = [p for p in ("/tmp/left-in-tmp", "/dev/shm/left-in-shm", os.path.expanduser("~/left-in-home"),
                     "../../../left-in-box") if os.path.exists(p)]
found += [p for p in glob.glob("../../../*/kernel/home/*.ipynb")   # another submission's folder
          if not os.path.samefile(os.path.dirname(p), ".")]
sleeping = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        if open(f"/proc/{pid}/comm").read().strip() == "sleep":
            sleeping.append(pid)
    except OSError:
        pass
try:
    open(f"/proc/{os.getppid()}/mem", "rb").read(1)
    server_memory = "read"
except OSError as exc:
    server_memory = type(exc).__name__
print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "found": found, "sleeping": sleeping,
                  "segment": libc.shmget(0x5eed, 4096, 0o666), "server_memory": server_memory}))
"""


def _notebook(*sources: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import json"), *map(nbformat.v4.new_code_cell, sources)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def _run(nb: nbformat.NotebookNode, limit: float = 60.0) -> tuple[str, str, dict, slots.Slot]:
    """Run ``nb`` as the runner does, on a slot taken from the pool; (outcome, reason, last JSON printed, slot)."""
    slot = slots.take_slot(SETTINGS, None, prewarm=False, checks=False, preload=("json",), threads=1)
    try:
        (slot.cwd / "submission.ipynb").write_text(nbformat.writes(nb))
        slot.kernel_box.hand_over()
        ran, outcome, reason = run_notebook(nb, slot.kernel_box, slot.workdir / "kernel", slot.cwd, slot.env,
                                            cell_timeout=limit, output_bytes=2**20,
                                            deadline=time.monotonic() + limit, submission_timeout=limit,
                                            warm=slot.warm)
        printed = [o.get("text", "") for c in (ran.cells if ran else []) for o in c.get("outputs", [])
                   if o.get("name") == "stdout"]
        return outcome, reason, json.loads(printed[-1]) if printed else {}, slot
    finally:
        slot.close()


@pytest.fixture()
def pool():
    slots.release_spares()
    yield
    slots.release_spares()


@pytest.fixture(params=["tmp", "elsewhere"])
def folders(request, monkeypatch):
    """The grader's temporary folder: under /tmp (which each kernel covers with its own), or elsewhere
    (where the sandbox's folder is emptied between two submissions)."""
    if request.param == "tmp":
        yield
        return
    where = Path(tempfile.mkdtemp(prefix="dlperf-t-", dir="/var/cache"
                                  if Path("/var/cache").is_dir() else None))
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    yield
    shutil.rmtree(where, ignore_errors=True)


def test_the_next_submission_on_a_kept_server_finds_nothing_of_the_last(pool, folders) -> None:
    outcome, reason, first, slot = _run(_notebook(LEAVE))
    assert outcome == "graded", reason
    assert slot.kernels is not None, "the kernel was not served (no namespaces here?)"
    server = slot.kernels
    assert first["segment"] >= 0
    outcome, reason, second, slot = _run(_notebook(LOOK))
    assert outcome == "graded", reason
    assert slot.kernels is server, "the kept server was not used again"
    assert second["ppid"] == first["ppid"]                 # the same warm server forked both kernels
    assert second["found"] == [] and second["sleeping"] == [], second
    assert second["segment"] == -1, "a System V segment of the first submission is visible to the second"
    assert second["server_memory"] != "read", "a kernel can read its server's memory"


def test_a_kernel_past_its_time_limit_takes_its_server_with_it(pool) -> None:
    outcome, _, _, slot = _run(_notebook("import time; time.sleep(60)"), limit=5.0)
    assert outcome == "timed out"
    first = slot.kernels
    assert first is not None and not first.reusable()
    outcome, reason, seen, slot = _run(_notebook("import os; print(json.dumps({'ppid': os.getppid()}))"))
    assert outcome == "graded", reason
    assert slot.kernels is not first and seen["ppid"] > 0


def test_a_kernel_that_dies_is_reported_and_the_server_serves_the_next(pool) -> None:
    outcome, reason, _, slot = _run(_notebook("import os; os._exit(3)"))
    assert outcome == "crashed", (outcome, reason)
    server = slot.kernels
    assert server is not None and server.reusable()
    outcome, reason, _, slot = _run(_notebook("print(json.dumps({'ok': 1}))"))
    assert outcome == "graded" and slot.kernels is server, reason


def test_without_a_server_each_submission_gets_a_warm_kernel_of_its_own(pool, monkeypatch) -> None:
    monkeypatch.setenv("DLPERF_KERNEL_SERVER", "0")
    outcome, reason, first, slot = _run(_notebook(LEAVE))
    assert outcome == "graded" and slot.kernels is None, reason
    outcome, reason, second, _ = _run(_notebook(LOOK))
    assert outcome == "graded", reason
    assert second["found"] == [] and second["sleeping"] == [] and second["segment"] == -1, second
