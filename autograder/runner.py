"""Grade one submission on this machine: its notebooks run in sandboxes, results returned (no gradebook here).

This is what a worker executes for each submission (:func:`grade`); it needs no
database and no shared file system: the job carries the submission's files and
the assignment (:class:`autograder.assignment.Assignment`: the instructor's
notebooks, nbgrader's stored cells, the other files, the grading mode), the
result carries the graded notebooks, the files the run wrote, and the record.
Scores are not computed here: the coordinator scores the returned notebooks
with nbgrader's own rules when it writes the gradebook.

Each notebook of the submission is restored against the instructor's
(:mod:`autograder.notebook`) and run in a sandboxed kernel (:mod:`autograder.kernel`)
whose working folder holds the submission's files with the assignment's files
copied over them, as ``nbgrader autograde`` does, with
``NBGRADER_EXECUTION=autograde``.  Then, by the assignment's mode:

* ``nbgrader``: the kernel runs the test cells too, after the student's cells,
  as nbgrader does (its scores come from that run);
* ``trusted``: the kernel runs the notebook *without* the hidden test cells (what
  the student sees), while the **check run** (:mod:`autograder.checks`), warm in
  its own sandbox, runs them where no student code runs; the scores come from it.

The outcome says what happened: ``graded``, ``timed out``, ``crashed``,
``tampered``, ``invalid`` or ``infrastructure failure`` (the runner could not do
its job: no GPU where the exercise needs one, the check run failed to start;
such a submission is re-run later, never scored).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import nbformat

from . import notebook as nbtools
from .assignment import Assignment
from .kernel import run_notebook
from .slots import REPO, gpu_devices, release_spares, take_slot, warm

__all__ = ["OUTCOMES", "REPO", "Job", "Result", "Settings", "check_preload", "grade", "kernel_preload", "release_spares",
           "warm_up"]

OUTCOMES = ("graded", "timed out", "crashed", "tampered", "invalid", "infrastructure failure")
SEVERITY = {o: i for i, o in enumerate(("graded", "tampered", "timed out", "crashed"))}
SIDE_EFFECT_BYTES = 16 * 2**20      # files the notebooks wrote, kept for the autograded folder (as nbgrader does)
SIDE_EFFECT_FILES = 200


@dataclass(frozen=True)
class Settings:
    """How a submission is run; the same for a whole class (documented in ``autograder --help``)."""

    cell_timeout: float = 120.0          # seconds per cell of the student run
    submission_timeout: float = 600.0    # seconds for one submission once its sandboxes are ready
    memory_bytes: int = 6 * 2**30        # the sandbox's memory (kernel, checks, their children)
    processes: int = 512                 # processes in the sandbox (a 4-rank check needs ~20)
    output_bytes: int = 2 * 2**20        # output kept from the student run (the rest is dropped)
    sandbox: bool = True                 # False only when the instructor says --no-sandbox
    cpu: bool = False                    # grade on CPU where the exercise wants a GPU (marked in the record)
    hide: tuple[str, ...] = ()           # extra folders the sandbox hides (the course root, the gradebook's)
    threads: int | None = None           # compute threads per sandboxed process (None: the worker's share)


@dataclass
class Job:
    """One submission and everything needed to grade it (travels to the worker through the engine)."""

    assignment: str
    student: str
    files: dict[str, bytes]              # the submission folder: notebooks and other files (relative paths)
    spec: Assignment
    digest: str                          # sha256 of the submission: what the gradebook's record refers to
    settings: Settings = field(default_factory=Settings)
    secret: str = ""                     # seeds the hidden checks' random inputs (autograder.trusted.seeds)
    # A run over several assignments (engine.grade_term): what the worker's warm processes import.
    check_preload: tuple[str, ...] | None = None   # the check run's imports (the union of the run's; None: own)
    next_preload: tuple[str, ...] | None = None    # the spare kernel's: the worker's likely next job (None: own)
    spare: bool = True                   # start a spare slot for the worker's next submission (none after the last)

    @property
    def requires_gpu(self) -> bool:
        return self.spec.requires_gpu


@dataclass
class Result:
    """What the worker sends back."""

    assignment: str
    student: str
    digest: str
    outcome: str
    reason: str
    notebooks: dict[str, str | None]     # notebook name -> graded notebook (JSON); None: missing or not run
    host: str
    device: str
    worker: str
    sandbox: str
    cpu_only: bool
    seconds: dict[str, float]
    stats: dict[str, Any] = field(default_factory=dict)
    mode: str = ""                       # how it was graded: "trusted" or "nbgrader"
    files: dict[str, bytes] = field(default_factory=dict)   # what the notebooks wrote in their folder

    @property
    def notebook(self) -> str | None:
        """The graded notebook of a one-notebook assignment (the first one otherwise)."""
        return next(iter(self.notebooks.values()), None) if self.notebooks else None


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def _safe(relative: str) -> bool:
    path = PurePosixPath(relative)
    return bool(relative) and not path.is_absolute() and ".." not in path.parts and "\0" not in relative


def _write_files(folder: Path, files: dict[str, bytes]) -> None:
    for relative, data in files.items():
        if not _safe(relative):
            continue
        target = folder / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        target.write_bytes(data)


def _working_files(job: Job) -> dict[str, bytes]:
    """The kernel's folder, as ``nbgrader autograde`` makes it: the student's files, then the assignment's
    files over them (except those ``Autograde.exclude_overwriting`` leaves to the student); no notebook."""
    files = {k: v for k, v in job.files.items() if not k.endswith(".ipynb") and k not in
             ("timestamp.txt", "submission_secret.txt")}
    for relative, data in job.spec.files.items():
        if relative not in job.spec.exclude_overwriting or relative not in files:
            files[relative] = data
    return files


def _side_effects(folder: Path, before: dict[str, bytes]) -> dict[str, bytes]:
    """Regular files the run wrote or changed in ``folder`` (never following a link), capped."""
    out: dict[str, bytes] = {}
    total = 0
    for root, _, names in os.walk(folder, followlinks=False):
        for name in sorted(names):
            path = Path(root) / name
            relative = path.relative_to(folder).as_posix()
            if path.is_symlink() or not path.is_file() or relative.endswith(".ipynb") or \
                    any(part.startswith(".") for part in PurePosixPath(relative).parts):
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                with os.fdopen(fd, "rb") as f:
                    data = f.read(SIDE_EFFECT_BYTES + 1)
            except OSError:
                continue
            if before.get(relative) == data or total + len(data) > SIDE_EFFECT_BYTES or len(out) >= SIDE_EFFECT_FILES:
                continue
            out[relative] = data
            total += len(data)
    return out


# ---------------------------------------------------------------------------------------------
# One submission
# ---------------------------------------------------------------------------------------------


def _add_cell_times(timings: dict[str, float], nb: nbformat.NotebookNode, clock: dict[str, Any]) -> None:
    """Split one notebook's run into kernel start, setup cells, the student's cells and test cells."""
    first_solution = next((i for i, c in enumerate(nb.cells) if nbtools.is_solution(c)), len(nb.cells))
    timings["kernel start"] = timings.get("kernel start", 0.0) + clock.get("kernel start", 0.0)
    for index, seconds in clock.get("cells", {}).items():
        cell = nb.cells[index]
        key = "setup" if index < first_solution else "tests" if nbtools.is_test(cell) else "cells"
        timings[key] = timings.get(key, 0.0) + seconds


def worker_cores() -> int:
    """The cores this worker may use: its share of the machine (``DLPERF_GRADING_CORES``, set by the
    engine for local workers), else the CPUs this process may run on (a Slurm job's allocation)."""
    share = os.environ.get("DLPERF_GRADING_CORES", "")
    if share.isdigit() and int(share) > 0:
        return int(share)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _threads(settings: Settings, trusted: bool) -> int:
    """Compute threads per sandboxed process: the worker's cores, split between the kernel and the
    check run where both run at once -- more threads than cores only make OpenMP's threads wait."""
    if settings.threads is not None:
        return settings.threads
    return max(1, worker_cores() // (2 if trusted else 1))


def kernel_preload(spec: Assignment) -> tuple[str, ...]:
    """The modules a warm kernel imports for ``spec``: its setup cells' imports and submodules
    (:func:`autograder.warm_kernel.imports`)."""
    from .warm_kernel import imports

    return imports(_setup_imports(spec, submodules=True), trusted=spec.mode == "trusted")


def check_preload(spec: Assignment) -> tuple[str, ...]:
    """The modules the check run imports for ``spec`` before it forks: its setup cells' imports."""
    return _setup_imports(spec, submodules=False)


def _setup_imports(spec: Assignment, submodules: bool) -> tuple[str, ...]:
    return tuple(dict.fromkeys(m for nb_spec in spec.notebooks for m in nbtools.setup_imports(
        nbformat.reads(nb_spec.source, as_version=4), submodules=submodules)))


def warm_up(settings: Settings, trusted: bool, preload: tuple[str, ...], requires_gpu: bool = False,
            check_preload: tuple[str, ...] | None = None) -> None:
    """Start this worker's sandboxes for a first submission of this kind before it comes (the engine
    calls it on every worker while it still reads the assignments); returns at once."""
    gpu = gpu_devices()
    if requires_gpu and gpu is None and not settings.cpu:
        return      # such a submission is an infrastructure failure here: it takes no sandbox
    warm(settings, gpu, trusted, preload, _threads(settings, trusted), check_preload=check_preload)


def _worst(outcomes: list[tuple[str, str]]) -> tuple[str, str]:
    """The outcome of a submission from its notebooks' (the most serious one), with every reason."""
    worst = max(outcomes, key=lambda o: SEVERITY.get(o[0], 0))[0]
    reasons = "; ".join(r for o, r in outcomes if r)
    return worst, reasons


def grade(job: Job, *, worker: str = "", queued: float = 0.0, prewarm: bool = False) -> Result:
    """Grade one submission; never raises for anything the submission does."""
    start = time.monotonic()
    settings = job.settings
    spec = job.spec
    gpu = gpu_devices()
    host = socket.gethostname()
    trusted = spec.mode == "trusted"

    def result(outcome: str, reason: str, notebooks: dict[str, str | None] | None = None, device: str = "",
               sandbox: str = "", seconds: dict[str, float] | None = None, stats: dict[str, Any] | None = None,
               cpu_only: bool | None = None, files: dict[str, bytes] | None = None) -> Result:
        secs = {"queued": queued, "student": 0.0, "checks": 0.0, **(seconds or {}),
                "total": time.monotonic() - start}
        return Result(job.assignment, job.student, job.digest, outcome, reason, notebooks or {}, host,
                      device or ("gpu " + gpu if gpu else "cpu"), worker, sandbox,
                      bool(job.requires_gpu and gpu is None and settings.cpu) if cpu_only is None else cpu_only,
                      secs, stats or {}, spec.mode, files or {})

    # Which notebooks were submitted, and are they this assignment's?
    others = {k: set(v) for k, v in spec.others.items()}
    prepared: dict[str, nbtools.Prepared] = {}
    missing: list[str] = []
    for nb_spec in spec.notebooks:
        data = job.files.get(f"{nb_spec.name}.ipynb")
        if data is None:
            missing.append(nb_spec.name)
            continue
        try:
            prepared[nb_spec.name] = nbtools.prepare(data, nbformat.reads(nb_spec.source, as_version=4),
                                                     nbformat.reads(nb_spec.release, as_version=4), job.assignment,
                                                     others, keep_tests=not trusted)
        except nbtools.InvalidSubmission as exc:
            where = "" if len(spec.notebooks) == 1 else f"{nb_spec.name}.ipynb: "
            return result("invalid", where + str(exc))
    if not prepared:
        names = ", ".join(f"{n}.ipynb" for n in spec.names)
        return result("invalid", f"the submission holds none of the assignment's notebooks ({names})")
    if job.requires_gpu and gpu is None and not settings.cpu:
        return result("infrastructure failure",
                      f"{job.assignment} needs a GPU and this runner ({host}) has none: re-run it on a GPU "
                      "runner, or grade on CPU explicitly (--cpu)")
    t_slot = time.monotonic()
    try:
        slot = take_slot(settings, gpu, prewarm and job.spare, checks=trusted, preload=kernel_preload(spec),
                         threads=_threads(settings, trusted), check_preload=job.check_preload if job.check_preload is not None else check_preload(spec),
                         next_preload=job.next_preload)
    except Exception as exc:  # noqa: BLE001 - the runner's own failure, not the student's
        return result("infrastructure failure", f"could not start the sandbox: {type(exc).__name__}: {exc}")
    # The submission's time limit counts from when its sandboxes are ready: a slow start of the
    # grader's own processes (a loaded node) is never charged to the student.
    ready_timeout = max(120.0, settings.submission_timeout)
    timings: dict[str, float] = {}
    try:
        device, cuda = "gpu " + gpu if gpu else "cpu", bool(gpu)
        if slot.checks is not None:
            try:
                info = slot.checks.ready(timeout=ready_timeout)
            except Exception as exc:  # noqa: BLE001
                return result("infrastructure failure", f"the check run did not start: {exc}",
                              sandbox=slot.describe())
            cuda = bool(info.get("cuda"))
            device = info.get("device", "cpu") + (f" [CUDA_VISIBLE_DEVICES={gpu}]" if gpu is not None else "")
            if job.requires_gpu and not cuda and not settings.cpu:
                return result("infrastructure failure", f"CUDA_VISIBLE_DEVICES={gpu} but torch sees no GPU in "
                              f"the sandbox ({info.get('cuda_error', 'no error')}): re-run it on a GPU runner, or "
                              "grade on CPU explicitly (--cpu)", device=device, sandbox=slot.describe(),
                              cpu_only=False)
        # Where the time goes (engine, report and scripts/bench_grading.py read these): "sandbox" is the
        # wait for this submission's sandboxes (zero when the spare slot was warm), then the student run's
        # "kernel start", "setup" (the instructor's cells before the first solution cell: the imports),
        # "cells" (the student's cells and the rest), "tests" (nbgrader mode: the test cells in the kernel),
        # and "checks" (trusted mode: the hidden checks, side by side with the kernel).
        timings["sandbox"] = time.monotonic() - t_slot
        deadline = time.monotonic() + settings.submission_timeout
        replies: dict[str, Any] = {}
        thread = None
        if slot.checks is not None:
            checks = slot.checks

            def run_checks() -> None:
                t = time.monotonic()
                jobs = [{"name": name, **p.check_job()} for name, p in prepared.items()]
                job_for_checks = {"notebooks": jobs, "budget": max(1.0, deadline - time.monotonic() - 5.0),
                                  "secret": job.secret, "files": {k: v.hex() for k, v in _working_files(job).items()}}
                replies["checks"] = checks.run(job_for_checks, timeout=deadline - time.monotonic())
                timings["checks"] = time.monotonic() - t

            thread = threading.Thread(target=run_checks, daemon=True)
            thread.start()
        # The student run: every notebook in its own kernel, in one folder that holds the files (the
        # first notebook's kernel already started in the slot, its setup imports done).
        kernel_dir = slot.workdir / "kernel"
        cwd = slot.cwd
        files = _working_files(job)
        _write_files(cwd, files)
        slot.kernel_box.hand_over()
        env = slot.env
        executed: dict[str, nbformat.NotebookNode | None] = {}
        outcomes: list[tuple[str, str]] = []
        t = time.monotonic()
        for name, prep in prepared.items():
            nb = prep.student_run()
            clock: dict[str, Any] = {}
            # nbgrader mode interrupts a cell past its limit and goes on, as nbgrader does (the test
            # cells after it still run); trusted mode stops the kernel (the checks run apart).
            ran, outcome, reason = run_notebook(nb, slot.kernel_box, kernel_dir, cwd, env,
                                                cell_timeout=settings.cell_timeout, output_bytes=settings.output_bytes,
                                                deadline=deadline, submission_timeout=settings.submission_timeout,
                                                name=name if len(spec.notebooks) > 1 else "notebook",
                                                interrupt=not trusted, clock=clock, warm=slot.warm)
            _add_cell_times(timings, nb, clock)
            executed[name] = ran
            outcomes.append((outcome, reason))
            if outcome == "infrastructure failure":
                return result(outcome, reason, sandbox=slot.describe(), seconds=timings, stats=slot.stats())
            if time.monotonic() >= deadline:
                break
        timings["student"] = time.monotonic() - t
        written = _side_effects(cwd, files)
        outcome, reason = _worst(outcomes)
        stats = slot.stats()
        checks_out: dict[str, dict[str, Any]] = {}
        if thread is not None:
            thread.join(max(0.0, deadline - time.monotonic()))
            reply = replies.get("checks") or {"tests": {}, "done": False, "running": None, "timed_out": True,
                                              "setup_error": None, "isolation": []}
            stats["isolation"] = reply.get("isolation", [])
            stats["test seconds"] = {(f"{nb}/{gid}" if len(spec.notebooks) > 1 else gid): round(r["seconds"], 3)
                                     for nb, tests in reply["tests"].items() for gid, r in tests.items()}
            checks_out = {nb: {gid: r["outputs"] for gid, r in tests.items()} for nb, tests in reply["tests"].items()}
            if not reply["done"]:
                assert slot.check_box is not None
                slot.check_box.kill()
                where = f" (in {reply['running']})" if reply.get("running") else ""
                if reply["timed_out"] or thread.is_alive() or time.monotonic() >= deadline:
                    outcome, reason = "timed out", f"the hidden tests ran past the {settings.submission_timeout:g} s limit{where}"
                elif not reply["tests"] and not reply.get("running"):
                    return result("infrastructure failure", "the check run died before its first test: "
                                  + slot.checks.tail()[-500:], sandbox=slot.describe(), seconds=timings, stats=stats)
                else:
                    memory = " (memory limit exceeded)" if stats.get("checks", {}).get("oom_killed") else ""
                    how = f" ({reply['died']})" if reply.get("died") else ""
                    outcome, reason = "crashed", (f"the hidden tests stopped{where}: the check run was killed{how}"
                                                  f"{memory}; the cells that finished keep their results")
            elif reply.get("setup_error"):
                return result("infrastructure failure", "the instructor's setup failed in the check run: "
                              + reply["setup_error"], sandbox=slot.describe(), seconds=timings, stats=stats)
        tampered = [f"{n}.ipynb: {t}" if len(spec.notebooks) > 1 else t
                    for n, p in prepared.items() for t in p.tampered]
        if outcome == "graded" and tampered:
            outcome, reason = "tampered", "; ".join(tampered)
        elif tampered:
            reason += "; also " + "; ".join(tampered)
        if missing:
            note = "not submitted: " + ", ".join(f"{n}.ipynb" for n in missing) + " (scored 0)"
            reason = f"{reason}; {note}" if reason else note
        graded: dict[str, str | None] = {name: None for name in missing}
        for name, prep in prepared.items():
            if trusted:
                nb = nbtools.merge(prep, executed.get(name), checks_out.get(name, {}))
            else:
                nb = executed.get(name) if executed.get(name) is not None else prep.notebook
            graded[name] = nbformat.writes(nb)
        # The autograded folder, as nbgrader leaves it: the files the notebooks ran beside, and what they wrote.
        return result(outcome, reason, graded, device=device, sandbox=slot.describe(), seconds=timings,
                      stats=stats, cpu_only=job.requires_gpu and not cuda, files={**files, **written})
    finally:
        slot.close()

