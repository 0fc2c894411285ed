"""The sandboxes a worker grades in: a *slot* per submission, one kept warm for the next.

A slot is a job folder with two sandboxes (:class:`autograder.sandbox.Sandbox`):
one for the student's kernel(s) and, for assignments graded with trusted checks,
one for the **check run** (``python -m autograder.checks``).  Both are started
before the submission arrives: the check run with its imports and its zygote,
and a **warm kernel** (:class:`autograder.kernel.WarmKernel`) that has imported
ipykernel and the assignment's setup imports, so that a submission pays for
neither an interpreter's start nor torch's import.  Each sandboxed process gets
its share of the worker's cores as its compute threads (``OMP_NUM_THREADS``).  Separate sandboxes have separate memory and process limits: a fork bomb
or a memory hog in the kernel cannot starve the hidden checks, and the other
way round.  A worker keeps one spare slot of the kind it last used, started in
the background while the current submission runs.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .kernel import WarmKernel
from .sandbox import Limits, Sandbox

REPO = Path(__file__).resolve().parents[1]

__all__ = ["CheckRun", "Slot", "gpu_devices", "release_spares", "take_slot", "thread_env"]


class CheckRun:
    """``python -m autograder.checks`` started in a sandbox, warm, waiting for its job."""

    def __init__(self, sandbox: Sandbox, env: Mapping[str, str], workdir: Path, preload: tuple[str, ...] = ()):
        self.started = time.monotonic()
        self.log = open(workdir / "checks.log", "wb")  # noqa: SIM115 - closed in finish()
        argv = sandbox.command([sys.executable, "-m", "autograder.checks", *preload], env)
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        cwd=str(workdir), start_new_session=True)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.info: dict[str, Any] | None = None

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def _line(self, timeout: float) -> dict[str, Any] | None:
        """The next JSON line, or None at EOF, after ``timeout`` s, or for a line that is not JSON."""
        try:
            line = self.lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if not line:
            self.lines.put(b"")   # EOF stays EOF
            return None
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def ready(self, timeout: float) -> dict[str, Any]:
        """Wait for the warm-up; the process's report (host, device)."""
        if self.info is None:
            info = self._line(timeout)
            if not info or not info.get("ready"):
                raise RuntimeError(f"the check run did not start (exit code {self.process.poll()}): "
                                   + self.tail())
            self.info = info
        return self.info

    def run(self, job: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Send the job; what came back: ``tests`` (notebook -> grade id -> outputs and seconds, for the
        cells that finished), ``done`` (all ran), ``running`` (the test cell it was in when it stopped),
        ``timed_out``, ``setup_error``, ``isolation``."""
        assert self.process.stdin is not None
        got: dict[str, Any] = {"tests": {}, "done": False, "running": None, "timed_out": False,
                               "setup_error": None, "isolation": []}
        try:
            self.process.stdin.write(json.dumps(job).encode())
            self.process.stdin.close()
        except BrokenPipeError:
            return got
        deadline = time.monotonic() + timeout
        while True:
            line = self._line(deadline - time.monotonic())
            if line is None:
                got["timed_out"] = time.monotonic() >= deadline
                return got
            if "start" in line:
                got["running"] = line["start"]
            elif "test" in line:
                tests = got["tests"].setdefault(str(line.get("notebook", "")), {})
                tests[line["test"]] = {"outputs": line.get("outputs", []), "seconds": line.get("seconds", 0.0)}
                got["running"] = None
            elif line.get("done"):
                got.update(done=True, setup_error=line.get("setup_error"), isolation=line.get("isolation", []))
                return got

    def tail(self) -> str:
        self.log.flush()
        try:
            return Path(self.log.name).read_bytes()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def finish(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.log.close()


# ---------------------------------------------------------------------------------------------
# One submission
# ---------------------------------------------------------------------------------------------


def thread_env(threads: int) -> dict[str, str]:
    """The variables that cap a process's compute threads (OpenMP: torch, MKL, OpenBLAS); none for 0."""
    if threads <= 0:
        return {}
    return {k: str(threads) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


class Slot:
    """The sandboxes of one submission: the kernel's, and (``checks``) the check run's, already warm.

    ``preload``: the modules a warm kernel imports before the submission comes (``None``: no warm
    kernel); ``threads``: the compute threads of each sandboxed process (0: the libraries' default).
    """

    def __init__(self, settings: Any, gpu_devices: str | None, checks: bool = True,
                 preload: tuple[str, ...] | None = None, threads: int = 0):
        self.workdir = Path(tempfile.mkdtemp(prefix=f"dlperf-sub-{os.getpid()}-{next(_numbers)}-"))
        self.settings = settings
        hide = [REPO, Path.home(), *map(Path, settings.hide)]
        expose = [REPO / "dlperf", REPO / "autograder", Path(sys.prefix)]
        limits = Limits(memory_bytes=settings.memory_bytes, processes=settings.processes)
        self.boxes: list[Sandbox] = []
        for part in ("kernel", "checks") if checks else ("kernel",):
            folder = self.workdir / part
            folder.mkdir()
            box = Sandbox(folder, limits=limits, hide=hide, expose=expose, gpu_devices=gpu_devices,
                          enabled=settings.sandbox, name=part)
            box.__enter__()
            self.boxes.append(box)
        self.kernel_box = self.boxes[0]
        # The student's kernel: what nbgrader's autograde sets, in the folder the submission's files go to.
        self.env = {**self.kernel_box.base_env(), "PYTHONPATH": str(REPO), "NBGRADER_EXECUTION": "autograde",
                    **thread_env(threads)}
        self.cwd = self.workdir / "kernel" / "home"
        self.cwd.mkdir()
        self.check_box: Sandbox | None = None
        self.checks: CheckRun | None = None
        self.warm: WarmKernel | None = None
        if checks:
            self.check_box = self.boxes[1]
            check_env = {**self.check_box.base_env(), "PYTHONPATH": str(REPO), **thread_env(threads)}
            self.checks = CheckRun(self.check_box, check_env, self.workdir / "checks", preload or ())
        if preload is not None:
            self.warm = WarmKernel(self.kernel_box, self.workdir / "kernel", self.cwd, self.env, preload)

    def describe(self) -> str:
        return self.kernel_box.describe()

    def stats(self) -> dict[str, Any]:
        stats = {"kernel": self.kernel_box.stats()}
        if self.check_box is not None:
            stats["checks"] = self.check_box.stats()
        return stats

    def close(self) -> None:
        try:
            if self.warm is not None:
                self.warm.close()
            if self.checks is not None:
                self.checks.finish()
        finally:
            for box in self.boxes:
                box.__exit__(None, None, None)
            if not os.environ.get("DLPERF_KEEP_SANDBOX"):
                shutil.rmtree(self.workdir, ignore_errors=True)


_numbers = itertools.count()
_spare: dict[tuple[Any, ...], Slot] = {}
_warming: list[concurrent.futures.Future[None]] = []
_lock = threading.Lock()
_swept = False
# Spare slots are started from this one long-lived thread.  bwrap's --die-with-parent is the kernel's
# parent-death signal, which fires when the *thread* that started bwrap ends: a spare started from a
# thread that exits right afterwards had its check run SIGKILLed whenever that thread ended after bwrap
# had set the signal up (an "infrastructure failure: the check run did not start (exit code -9)").
_launcher = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spare-slots")


def gpu_devices() -> str | None:
    """This worker's GPU (``CUDA_VISIBLE_DEVICES`` as the engine or Slurm pinned it), or None."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or value.strip() in ("", "-1", "none", "NoDevFiles"):
        return None
    return value


def take_slot(settings: Any, gpu: str | None, prewarm: bool, checks: bool = True,
              preload: tuple[str, ...] | None = None, threads: int = 0) -> Slot:
    """The warm slot if one matches, else a new one; then start the next one in the background."""
    global _swept
    if not _swept:
        _swept = True
        from .sandbox import sweep_stale_cgroups, sweep_stale_folders

        sweep_stale_cgroups()   # what a grader killed earlier on this machine left behind
        sweep_stale_folders()
    key = (settings, gpu, checks, preload, threads)
    with _lock:
        slot = _spare.pop(key, None)
    if slot is None:
        slot = Slot(settings, gpu, checks, preload, threads)
    if prewarm:
        def make() -> None:
            spare = Slot(settings, gpu, checks, preload, threads)
            with _lock:
                old = _spare.pop(key, None)
                _spare[key] = spare
            if old is not None:
                old.close()
        with _lock:
            _warming[:] = [f for f in _warming if not f.done()] + [_launcher.submit(make)]
    return slot


def release_spares() -> None:
    """Close the warm slots of this process (at the end of a class), after those still warming up."""
    with _lock:
        warming = list(_warming)
    concurrent.futures.wait(warming, timeout=120)
    with _lock:
        slots = list(_spare.values())
        _spare.clear()
    for slot in slots:
        slot.close()
