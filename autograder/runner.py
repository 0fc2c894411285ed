"""Grade one submission on this machine: both runs in one sandbox, results returned (no gradebook here).

This is what a worker executes for each submission (:func:`grade`); it needs no
database and no shared file system: the job carries the submission and the
instructor's notebooks, the result carries the graded notebook and the record.
Scores are not computed here: the coordinator scores the returned notebook
with nbgrader's own rules when it writes the gradebook.

Within one submission's sandbox (:class:`autograder.sandbox.Sandbox`) two
processes run side by side (see :mod:`autograder.notebook` for why two):

1. the **check run** (``python -m autograder.checks``), started before the
   submission arrives so that its imports and fork server are warm;
2. the **student run**: a Jupyter kernel (IPC transport, so it needs no
   network) executing the student's notebook without the hidden test cells,
   with a per-cell time limit and a cap on the output it may produce.

A per-submission deadline kills everything in the sandbox.  The outcome says
what happened: ``graded``, ``timed out``, ``crashed``, ``tampered``, ``invalid``
or ``infrastructure failure`` (the runner could not do its job: no GPU where
the exercise needs one, the check run failed to start; such a submission is
re-run later, never scored).
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from . import notebook as nbtools
from .sandbox import Limits, Sandbox

REPO = Path(__file__).resolve().parents[1]

OUTCOMES = ("graded", "timed out", "crashed", "tampered", "invalid", "infrastructure failure")


@dataclass(frozen=True)
class Settings:
    """How a submission is run; the same for a whole class (documented in ``autograder --help``)."""

    cell_timeout: float = 120.0          # seconds per cell of the student run
    submission_timeout: float = 600.0    # seconds for everything of one submission
    memory_bytes: int = 6 * 2**30        # the sandbox's memory (kernel, checks, their children)
    processes: int = 512                 # processes in the sandbox (a 4-rank check needs ~20)
    output_bytes: int = 2 * 2**20        # output kept from the student run (the rest is dropped)
    sandbox: bool = True                 # False only when the instructor says --no-sandbox
    cpu: bool = False                    # grade on CPU where the exercise wants a GPU (marked in the record)
    hide: tuple[str, ...] = ()           # extra folders the sandbox hides (the course root, the gradebook's)


@dataclass
class Job:
    """One submission and everything needed to grade it (travels to the worker through the engine)."""

    assignment: str
    student: str
    submission: bytes
    source: str                          # the instructor notebook (JSON), hidden tests included
    release: str                         # the student version (JSON)
    digest: str                          # sha256 of the submission: what the gradebook's record refers to
    requires_gpu: bool = False
    others: dict[str, list[str]] = field(default_factory=dict)   # other assignments' grade ids
    settings: Settings = field(default_factory=Settings)
    secret: str = ""                     # seeds the hidden checks' random inputs (autograder.trusted.seeds)


@dataclass
class Result:
    """What the worker sends back."""

    assignment: str
    student: str
    digest: str
    outcome: str
    reason: str
    notebook: str | None                 # the graded notebook (JSON), None when invalid or not run
    host: str
    device: str
    worker: str
    sandbox: str
    cpu_only: bool
    seconds: dict[str, float]
    stats: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# The student run: a kernel in the sandbox
# ---------------------------------------------------------------------------------------------


def _kernel_manager(sandbox: Sandbox, workdir: Path, env: Mapping[str, str]) -> Any:
    from jupyter_client import AsyncKernelManager

    class SandboxedKernelManager(AsyncKernelManager):
        """A kernel started through the sandbox, talking over unix sockets in the job's folder."""

        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            # jupyter_client has just written the connection file (mode 0600): command() hands the
            # workdir, the file included, over to the sandbox's user.
            return sandbox.command(super().format_kernel_cmd(extra_arguments), env)

    ipc = workdir / "ipc"
    ipc.mkdir(exist_ok=True)
    return SandboxedKernelManager(kernel_name="python3", transport="ipc", ip=str(ipc / "k"),
                                  connection_file=str(workdir / "kernel.json"))


@functools.cache
def _client_class() -> Any:
    from nbclient import NotebookClient

    class CappedClient(NotebookClient):
        """nbclient, keeping at most ``output_limit`` bytes of output for the whole notebook."""

        output_limit: int = 2 * 2**20
        kept = 0
        dropped = 0
        current: int | None = None      # index of the cell being executed

        async def async_execute_cell(self, cell: Any, cell_index: int, *args: Any, **kwargs: Any) -> Any:
            self.current = cell_index
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)

        def output(self, outs: Any, msg: dict[str, Any], display_id: Any, cell_index: int) -> Any:
            size = len(json.dumps(msg.get("content", {})))
            if self.kept + size > self.output_limit:
                if not self.dropped:
                    outs.append(nbformat.v4.new_output(
                        "stream", name="stdout",
                        text=f"\n[output truncated: more than {self.output_limit // 1024} KiB]\n"))
                self.dropped += size
                return None
            self.kept += size
            return super().output(outs, msg, display_id, cell_index)

    return CappedClient


def student_run(prepared: nbtools.Prepared, sandbox: Sandbox, workdir: Path, env: Mapping[str, str],
                settings: Settings, deadline: float) -> tuple[nbformat.NotebookNode | None, str, str]:
    """Execute the student's notebook (hidden tests left out); (notebook, outcome, reason)."""
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    nb = prepared.student_run()
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    client = _client_class()(nb, km=_kernel_manager(sandbox, workdir, env), timeout=int(settings.cell_timeout),
                             allow_errors=True, startup_timeout=120, shutdown_kernel="immediate",
                             resources={"metadata": {"path": str(home)}})
    client.output_limit = settings.output_bytes
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        sandbox.kill()

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
    timer.daemon = True
    timer.start()
    log = open(workdir / "kernel.log", "wb")  # noqa: SIM115 - the kernel's own stdout/stderr, not the student's
    try:
        client.execute(stdout=log, stderr=log)
    except CellTimeoutError:
        return nb, "timed out", f"cell {_cell_name(nb, client.current)} ran past the {settings.cell_timeout:g} s limit"
    except DeadKernelError:
        if fired.is_set():
            return nb, "timed out", f"the submission ran past the {settings.submission_timeout:g} s limit"
        stats = sandbox.stats()
        if stats.get("oom_killed"):
            return nb, "crashed", (f"the kernel was killed in cell {_cell_name(nb, client.current)}: "
                                   "memory limit exceeded")
        return nb, "crashed", f"the kernel died in cell {_cell_name(nb, client.current)}"
    except Exception as exc:  # noqa: BLE001 - a kernel that cannot start is the runner's failure
        if fired.is_set():
            return nb, "timed out", f"the submission ran past the {settings.submission_timeout:g} s limit"
        return None, "infrastructure failure", f"the student's kernel failed: {type(exc).__name__}: {exc}"
    finally:
        timer.cancel()
        log.close()
    return nb, "graded", ""


def _cell_name(nb: nbformat.NotebookNode, index: int | None) -> str:
    """A cell as the student would find it: its grade id, else its position."""
    if index is None:
        return "?"
    return nbtools.grade_id(nb.cells[index]) or f"#{index + 1}"


# ---------------------------------------------------------------------------------------------
# The check run
# ---------------------------------------------------------------------------------------------


class CheckRun:
    """``python -m autograder.checks`` started in a sandbox, warm, waiting for its job."""

    def __init__(self, sandbox: Sandbox, env: Mapping[str, str], workdir: Path):
        self.started = time.monotonic()
        self.log = open(workdir / "checks.log", "wb")  # noqa: SIM115 - closed in finish()
        argv = sandbox.command([sys.executable, "-m", "autograder.checks"], env)
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
        """Send the job; what came back: ``tests`` (those that finished), ``done`` (all ran),
        ``running`` (the test cell it was in when it stopped), ``timed_out``, ``setup_error``, ``isolation``."""
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
                got["tests"][line["test"]] = {"outputs": line.get("outputs", []), "seconds": line.get("seconds", 0.0)}
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


class Slot:
    """Two sandboxes for one submission, the check run already warm in its own; a worker keeps one ready.

    The student's kernel and the check run get separate sandboxes (separate
    memory and process limits): a fork bomb or a memory hog in the kernel
    cannot starve the hidden checks, and the other way round.
    """

    def __init__(self, settings: Settings, gpu_devices: str | None):
        self.workdir = Path(tempfile.mkdtemp(prefix="dlperf-sub-"))
        self.settings = settings
        hide = [REPO, Path.home(), *map(Path, settings.hide)]
        expose = [REPO / "dlperf", REPO / "autograder", Path(sys.prefix)]
        limits = Limits(memory_bytes=settings.memory_bytes, processes=settings.processes)
        self.boxes: list[Sandbox] = []
        for part in ("kernel", "checks"):
            folder = self.workdir / part
            folder.mkdir()
            box = Sandbox(folder, limits=limits, hide=hide, expose=expose, gpu_devices=gpu_devices,
                          enabled=settings.sandbox, name=part)
            box.__enter__()
            self.boxes.append(box)
        self.kernel_box, self.check_box = self.boxes
        self.env = self.kernel_box.base_env()
        self.env["PYTHONPATH"] = str(REPO)
        check_env = self.check_box.base_env()
        check_env["PYTHONPATH"] = str(REPO)
        self.checks = CheckRun(self.check_box, check_env, self.workdir / "checks")

    def describe(self) -> str:
        return self.kernel_box.describe()

    def stats(self) -> dict[str, Any]:
        return {"kernel": self.kernel_box.stats(), "checks": self.check_box.stats()}

    def close(self) -> None:
        try:
            self.checks.finish()
        finally:
            for box in self.boxes:
                box.__exit__(None, None, None)
            if not os.environ.get("DLPERF_KEEP_SANDBOX"):
                shutil.rmtree(self.workdir, ignore_errors=True)


_spare: dict[tuple[Any, ...], Slot] = {}
_warming: list[concurrent.futures.Future[None]] = []
_lock = threading.Lock()
_swept = False
# Spare slots are started from this one long-lived thread.  bwrap's --die-with-parent is the kernel's
# parent-death signal, which fires when the *thread* that started bwrap ends: a spare started from a
# thread that exits right afterwards had its check run SIGKILLed whenever that thread ended after bwrap
# had set the signal up (an "infrastructure failure: the check run did not start (exit code -9)").
_launcher = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="spare-slots")


def _gpu_devices() -> str | None:
    """This worker's GPU (``CUDA_VISIBLE_DEVICES`` as the engine or Slurm pinned it), or None."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None or value.strip() in ("", "-1", "none", "NoDevFiles"):
        return None
    return value


def _take_slot(settings: Settings, gpu: str | None, prewarm: bool) -> Slot:
    """The warm slot if one matches, else a new one; then start the next one in the background."""
    global _swept
    if not _swept:
        _swept = True
        from .sandbox import sweep_stale_cgroups

        sweep_stale_cgroups()   # what a grader killed earlier on this machine left behind
    key = (settings, gpu)
    with _lock:
        slot = _spare.pop(key, None)
    if slot is None:
        slot = Slot(settings, gpu)
    if prewarm:
        def make() -> None:
            spare = Slot(settings, gpu)
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


def grade(job: Job, *, worker: str = "", queued: float = 0.0, prewarm: bool = False) -> Result:
    """Grade one submission; never raises for anything the submission does."""
    start = time.monotonic()
    settings = job.settings
    gpu = _gpu_devices()
    host = socket.gethostname()

    def result(outcome: str, reason: str, nb: Any = None, device: str = "", sandbox: str = "",
               seconds: dict[str, float] | None = None, stats: dict[str, Any] | None = None,
               cpu_only: bool | None = None) -> Result:
        secs = {"queued": queued, "student": 0.0, "checks": 0.0, **(seconds or {}),
                "total": time.monotonic() - start}
        return Result(job.assignment, job.student, job.digest, outcome, reason,
                      nbformat.writes(nb) if nb is not None else None, host, device or ("gpu " + gpu if gpu else "cpu"),
                      worker, sandbox, bool(job.requires_gpu and gpu is None and settings.cpu) if cpu_only is None
                      else cpu_only, secs, stats or {})

    try:
        source = nbformat.reads(job.source, as_version=4)
        release = nbformat.reads(job.release, as_version=4)
        prepared = nbtools.prepare(job.submission, source, release, job.assignment,
                                   {k: set(v) for k, v in job.others.items()})
    except nbtools.InvalidSubmission as exc:
        return result("invalid", str(exc))
    if job.requires_gpu and gpu is None and not settings.cpu:
        return result("infrastructure failure",
                      f"{job.assignment} needs a GPU and this runner ({host}) has none: re-run it on a GPU "
                      "runner, or grade on CPU explicitly (--cpu)")

    try:
        slot = _take_slot(settings, gpu, prewarm)
    except Exception as exc:  # noqa: BLE001 - the runner's own failure, not the student's
        return result("infrastructure failure", f"could not start the sandbox: {type(exc).__name__}: {exc}")
    deadline = start + settings.submission_timeout
    try:
        try:
            info = slot.checks.ready(timeout=max(1.0, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001
            return result("infrastructure failure", f"the check run did not start: {exc}",
                          sandbox=slot.describe())
        cuda = bool(info.get("cuda"))
        device = info.get("device", "cpu") + (f" [CUDA_VISIBLE_DEVICES={gpu}]" if gpu is not None else "")
        if job.requires_gpu and not cuda and not settings.cpu:
            return result("infrastructure failure", f"CUDA_VISIBLE_DEVICES={gpu} but torch sees no GPU in the "
                          f"sandbox ({info.get('cuda_error', 'no error')}): re-run it on a GPU runner, or grade on "
                          "CPU explicitly (--cpu)", device=device, sandbox=slot.describe(), cpu_only=False)
        timings: dict[str, float] = {}
        replies: dict[str, Any] = {}

        def checks() -> None:
            t = time.monotonic()
            job_for_checks = {**prepared.check_job(), "budget": max(1.0, deadline - time.monotonic() - 5.0),
                              "secret": job.secret}
            replies["checks"] = slot.checks.run(job_for_checks, timeout=deadline - time.monotonic())
            timings["checks"] = time.monotonic() - t

        thread = threading.Thread(target=checks, daemon=True)
        thread.start()
        t = time.monotonic()
        executed, outcome, reason = student_run(prepared, slot.kernel_box, slot.workdir / "kernel", slot.env,
                                                 settings, deadline)
        timings["student"] = time.monotonic() - t
        thread.join(max(0.0, deadline - time.monotonic()))
        reply = replies.get("checks") or {"tests": {}, "done": False, "running": None, "timed_out": True,
                                          "setup_error": None, "isolation": []}
        stats = slot.stats()
        stats["isolation"] = reply.get("isolation", [])
        checks_out = {gid: r["outputs"] for gid, r in reply["tests"].items()}
        if not reply["done"]:
            slot.check_box.kill()
            where = f" (in {reply['running']})" if reply.get("running") else ""
            if reply["timed_out"] or thread.is_alive() or time.monotonic() >= deadline:
                outcome, reason = "timed out", f"the hidden tests ran past the {settings.submission_timeout:g} s limit{where}"
            elif not reply["tests"] and not reply.get("running"):
                return result("infrastructure failure", "the check run died before its first test: "
                              + slot.checks.tail()[-500:], sandbox=slot.describe(), seconds=timings, stats=stats)
            else:
                memory = " (memory limit exceeded)" if stats.get("checks", {}).get("oom_killed") else ""
                outcome, reason = "crashed", f"the hidden tests stopped{where}: the check run was killed{memory}"
        elif reply.get("setup_error"):
            return result("infrastructure failure", "the instructor's setup failed in the check run: "
                          + reply["setup_error"], sandbox=slot.describe(), seconds=timings, stats=stats)
        if outcome == "graded" and prepared.tampered:
            outcome, reason = "tampered", "; ".join(prepared.tampered)
        elif prepared.tampered:
            reason += "; also " + "; ".join(prepared.tampered)
        graded = nbtools.merge(prepared, executed, checks_out)
        return result(outcome, reason, graded, device=device, sandbox=slot.describe(), seconds=timings,
                      stats=stats, cpu_only=job.requires_gpu and not cuda)
    finally:
        slot.close()
