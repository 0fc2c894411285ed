"""Grading a class: submissions out to Dask workers, results back to the single gradebook writer.

The engine is Dask's (``distributed``): by default an embedded cluster on this
machine with **one worker per GPU**, each worker's ``CUDA_VISIBLE_DEVICES``
pinned to its GPU (so the student's kernel and every check it starts see only
that GPU), or CPU workers when there is no GPU or when asked.  Any other Dask
cluster can stand behind it (``cluster=`` an existing scheduler's address);
the code path is the same: jobs travel through Dask, graded notebooks and
records come back, and only this process writes the gradebook, in completion
order, one transaction per submission (:class:`autograder.gradebook.Writer`).

A submission already recorded (same file, same SHA-256) is not graded again
unless ``force``; a worker lost mid-submission makes Dask run it again
elsewhere (the result is recorded once); infrastructure failures are retried
``retries`` times on other workers and then recorded as such, never as scores.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import hashlib
import hmac
import logging
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from . import course
from .gradebook import Writer
from .assignment import Assignment
from .assignment import load as load_assignment
from .runner import Job, Result, Settings

# ---------------------------------------------------------------------------------------------
# Which assignments want a GPU
# ---------------------------------------------------------------------------------------------


def requires_gpu(assignment: str, course_root: Path | None = None) -> bool:
    """Whether the assignment's hidden tests want a GPU (``metadata.dlperf.requires_gpu`` of an instructor
    notebook): the project's exercise of that id, or the course's assignment."""
    if course_root is None:
        nb = nbformat.read(course.source_notebook(assignment), as_version=4)
        return bool(nb.metadata.get("dlperf", {}).get("requires_gpu", False))
    from .assignment import source_folder

    return any(bool(nbformat.read(p, as_version=4).metadata.get("dlperf", {}).get("requires_gpu", False))
               for p in sorted(source_folder(course_root, assignment).glob("*.ipynb")))


def local_gpus() -> list[str]:
    """The GPUs of this machine as CUDA indices, without importing torch (``nvidia-smi -L``, else /proc)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [d for d in visible.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
            return [str(i) for i, line in enumerate(l for l in out.splitlines() if l.startswith("GPU "))]
        except (OSError, subprocess.SubprocessError):
            pass
    proc = Path("/proc/driver/nvidia/gpus")
    return [str(i) for i in range(len(list(proc.iterdir())))] if proc.is_dir() else []


# ---------------------------------------------------------------------------------------------
# The cluster
# ---------------------------------------------------------------------------------------------


@dataclass
class ClusterChoice:
    """Where the workers come from.  ``kind``: ``local`` (default), ``address`` or ``slurm``."""

    kind: str = "local"
    workers: int | None = None           # local: number of workers (default: one per GPU, else cores // 2)
    cpu_workers: bool = False            # local: CPU workers even when there are GPUs
    address: str | None = None           # an existing scheduler, e.g. tcp://10.0.0.5:8786
    slurm: dict[str, Any] = field(default_factory=dict)   # dask-jobqueue SLURMCluster options

    def describe(self) -> str:
        if self.kind == "address":
            return f"Dask scheduler at {self.address}"
        if self.kind == "slurm":
            return f"Dask workers as Slurm jobs ({', '.join(f'{k}={v}' for k, v in self.slurm.items())})"
        return "local Dask cluster"


def _local_cluster(choice: ClusterChoice) -> tuple[Any, str]:
    from distributed import Nanny, Scheduler, SpecCluster

    gpus = [] if choice.cpu_workers else local_gpus()
    workers: dict[str, Any] = {}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 2)
    if gpus:
        chosen = gpus[: choice.workers] if choice.workers else gpus
        share = str(max(1, cores // len(chosen)))   # each worker's share of the cores (runner.worker_cores)
        for gpu in chosen:
            workers[f"gpu{gpu}"] = {"cls": Nanny, "options": {
                "nthreads": 1, "memory_limit": 0, "resources": {"GPU": 1}, "silence_logs": logging.WARNING,
                "env": {"CUDA_VISIBLE_DEVICES": gpu, "DLPERF_GRADING_CORES": share}, "name": f"gpu{gpu}"}}
        what = f"{len(chosen)} GPU worker(s) ({', '.join('cuda ' + g for g in chosen)})"
    else:
        n = choice.workers or max(1, cores // 2)
        share = str(max(1, cores // n))
        for i in range(n):
            workers[f"cpu{i}"] = {"cls": Nanny, "options": {
                "nthreads": 1, "memory_limit": 0, "env": {"CUDA_VISIBLE_DEVICES": "", "DLPERF_GRADING_CORES": share},
                "name": f"cpu{i}", "silence_logs": logging.WARNING}}
        what = f"{n} CPU worker(s)"
    cluster = SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                          silence_logs=40)
    return cluster, what


@contextlib.contextmanager
def connect(choice: ClusterChoice) -> Iterator[tuple[Any, str]]:
    """A Dask client for ``choice`` and a sentence saying what it is; everything closed afterwards."""
    from distributed import Client

    if choice.kind == "address":
        client = Client(choice.address, timeout="30s")
        try:
            n = len(client.scheduler_info()["workers"])
            yield client, f"{n} worker(s) of the Dask scheduler at {choice.address}"
        finally:
            client.close()
        return
    if choice.kind == "slurm":
        from .slurm import slurm_cluster

        cluster, what = slurm_cluster(choice)
    else:
        cluster, what = _local_cluster(choice)
    client = Client(cluster)
    try:
        yield client, what
    finally:
        client.close()
        cluster.close()


# ---------------------------------------------------------------------------------------------
# Jobs
# ---------------------------------------------------------------------------------------------


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Submission:
    """A student's submission: the folder ``submitted/<student>/<assignment>/`` (or one notebook file)."""

    student: str
    path: Path
    timestamp: dt.datetime | None

    def files(self) -> dict[str, bytes]:
        """Its notebooks and other files (relative paths); links and checkpoints left out."""
        from .assignment import submission_files

        if self.path.is_file():
            return {self.path.name: self.path.read_bytes()}
        return submission_files(self.path)


def find_submissions(course_root: Path, assignment: str) -> list[Submission]:
    """Every ``submitted/<student>/<assignment>/`` folder that holds a file, with its timestamp."""
    from .collect import read_timestamp

    found = []
    for folder in sorted((course_root / "submitted").glob(f"*/{assignment}")):
        if folder.parent.name.startswith(".") or not folder.is_dir():
            continue
        if not any(p.is_file() and p.name not in ("timestamp.txt", "submission_secret.txt") for p in folder.iterdir()):
            continue
        try:
            stamp = read_timestamp(folder)
        except ValueError:
            stamp = None   # a garbled timestamp.txt: graded, without a submission time
        found.append(Submission(folder.parent.name, folder, stamp))
    return found


def files_digest(files: dict[str, bytes]) -> str:
    """SHA-256 of a submission's files (names and contents; the timestamp is not what is graded)."""
    h = hashlib.sha256()
    for name in sorted(files):
        if name in ("timestamp.txt", "submission_secret.txt"):
            continue
        h.update(name.encode() + b"\0" + hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def course_key(course_root: Path) -> bytes:
    """The course's secret key (``.autograder-key`` in the course root, made on first use, mode 0600).

    Each submission's check run gets ``HMAC(key, assignment, digest)`` as the seed of its
    random inputs (:mod:`autograder.trusted.seeds`): new inputs for every changed file,
    the same on a regrade, and nothing a student can compute.
    """
    path = Path(course_root) / ".autograder-key"
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        key = os.urandom(32)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(key.hex() + "\n")
        return key


def make_jobs(assignment: str, submissions: Sequence[Submission], settings: Settings,
              course_root: Path | None = None, spec: Assignment | None = None, db_url: str | None = None) -> list[Job]:
    """One job per submission (``spec``: the assignment, read from the course root if not given)."""
    root = Path(course_root) if course_root is not None else course.COURSE
    if spec is None:
        spec = load_assignment(assignment, root, db_url or f"sqlite:///{root / 'gradebook.db'}")
    key = course_key(root) if course_root is not None else os.urandom(32)
    jobs = []
    for sub in submissions:
        files = sub.files()
        sha = files_digest(files)
        secret = hmac.new(key, f"{assignment}\0{sha}".encode(), hashlib.sha256).hexdigest()
        jobs.append(Job(assignment, sub.student, files, spec, sha, settings, secret=secret))
    return jobs


def _run_on_worker(job: Job, submitted_at: float) -> Result:
    """The task Dask runs (module level, so that workers can import it)."""
    from distributed import get_worker

    from .runner import grade

    try:
        name = str(get_worker().name)
    except ValueError:
        name = socket.gethostname()
    return grade(job, worker=name, queued=max(0.0, time.time() - submitted_at), prewarm=True)


def _lost_workers(dask_scheduler: Any, key: str) -> int:
    """How many workers died while running task ``key`` (Dask re-ran it elsewhere each time)."""
    task = dask_scheduler.tasks.get(key)
    return int(task.suspicious) if task is not None else 0


def _release_spares() -> None:
    from .runner import release_spares

    release_spares()


def _close_pools(client: Any) -> None:
    """Close every worker's warm slots and check runs (before the cluster closes, also when a run stops
    early: an assignment refused after the workers warmed up, an interrupt)."""
    with contextlib.suppress(Exception):
        client.run(_release_spares)


# ---------------------------------------------------------------------------------------------
# The coordinator
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def single_grader(course_root: Path) -> Iterator[None]:
    """One grader per course root at a time (a second one would be a second writer)."""
    course_root.mkdir(parents=True, exist_ok=True)
    with open(course_root / ".autograder.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RuntimeError(f"another autograder is grading in {course_root} (lock .autograder.lock)") from None
        yield


@dataclass
class ClassRun:
    """What :func:`grade_class` did (or :func:`grade_term`, for one of its assignments)."""

    records: list[dict[str, Any]]
    skipped: list[str]
    wall_seconds: float
    workers: int
    cluster: str


@dataclass
class TermRun:
    """What :func:`grade_term` did: per assignment (in the order asked), and for the whole run."""

    runs: dict[str, ClassRun]
    wall_seconds: float
    workers: int                         # 0: nothing was graded (no cluster was started)
    cluster: str
    check_runs: int = 0                  # check runs started (a warm one serves the following submissions)

    @property
    def records(self) -> list[dict[str, Any]]:
        """The records this run wrote, every assignment's."""
        return [r for run in self.runs.values() for r in run.records]


def grade_class(assignment: str, *, course_root: Path, db_url: str, students: Sequence[str] | None = None,
                force: bool = False, settings: Settings | None = None, choice: ClusterChoice | None = None,
                retries: int = 1, progress: Callable[[str], None] | None = print, mode: str | None = None) -> ClassRun:
    """Grade the collected submissions of ``assignment`` (all, or ``students``) into the gradebook.

    ``mode``: ``trusted`` or ``nbgrader`` (default: what the course asks, see
    :mod:`autograder.assignment`); an assignment whose tests cannot run in it is refused
    (:class:`~autograder.assignment.AssignmentError`) before anything is graded.
    """
    return grade_term([assignment], course_root=course_root, db_url=db_url, students=students, force=force,
                      settings=settings, choice=choice, retries=retries, progress=progress, mode=mode).runs[assignment]


def _next_preloads(todo: Sequence[Job], preloads: dict[str, tuple[str, ...]], workers: int) -> list[tuple[str, ...]]:
    """For each job (in the order sent), the kernel imports of the job its worker most likely grades next.

    Dask hands queued tasks out in the order they were sent, so a worker that takes job ``i`` next
    takes about job ``i + workers``; past the end, the job's own (a retry is of the same kind).
    """
    kinds = [preloads[j.assignment] for j in todo]
    return [kinds[min(i + workers, len(kinds) - 1)] for i in range(len(kinds))]


def _kind(course_root: Path, assignment: str, mode: str | None
          ) -> tuple[bool, tuple[str, ...], bool, tuple[str, ...]] | None:
    """What a worker warms up for ``assignment`` before it is read in full: (trusted mode, the warm
    kernel's imports, wants a GPU, the check run's imports), from its source notebooks; None where they cannot be read (reading the
    assignment then says why).  A guess only: what grading uses comes from :func:`load_assignment`."""
    from . import notebook as nbtools
    from .assignment import _toml_mode, source_folder
    from .warm_kernel import imports

    try:
        paths = sorted(source_folder(course_root, assignment).glob("*.ipynb"))
        notebooks = [nbformat.read(p, as_version=4) for p in paths]
        declared = {(nb.metadata.get("dlperf", {}) or {}).get("mode") for nb in notebooks} - {None}
        chosen = mode or _toml_mode(course_root, assignment) or (declared.pop() if len(declared) == 1 else "nbgrader")
    except Exception:  # noqa: BLE001 - only a warm-up
        return None
    if not notebooks:
        return None
    preload = imports(tuple(dict.fromkeys(m for nb in notebooks for m in nbtools.setup_imports(nb, True))),
                      trusted=chosen == "trusted")
    checks = tuple(dict.fromkeys(m for nb in notebooks for m in nbtools.setup_imports(nb)))
    gpu = any(bool((nb.metadata.get("dlperf", {}) or {}).get("requires_gpu")) for nb in notebooks)
    return chosen == "trusted", preload, gpu, checks


def _warm_up(settings: Settings, trusted: bool, preload: tuple[str, ...], requires_gpu: bool,
             check_preload: tuple[str, ...] | None) -> None:
    """Run on every worker (``client.run``): start its sandboxes for the first submission."""
    from .runner import warm_up

    warm_up(settings, trusted, preload, requires_gpu, check_preload)


def grade_term(assignments: Sequence[str], *, course_root: Path, db_url: str, students: Sequence[str] | None = None,
               force: bool = False, settings: Settings | None = None, choice: ClusterChoice | None = None,
               retries: int = 1, progress: Callable[[str], None] | None = print, mode: str | None = None) -> TermRun:
    """Grade the collected submissions of several assignments in one run: one lock, one gradebook
    connection, one Dask cluster and one pool of warm sandboxes for all of them.

    Where anything is left to grade, the cluster starts first and its workers start their sandboxes
    for the first submission while the assignments are read (nbgrader's ``generate_assignment`` of
    each, seconds apiece).  Every assignment is read (and refused, for a mode its tests cannot run
    in) before anything is graded.  Jobs go out assignment by assignment; each worker's check run
    imports what every assignment's setup cells import, so one warm check run serves them all (each
    job in a fork of its own, as within one assignment), and each job tells its worker which kind of
    kernel to warm for the job it most likely grades next.  ``students``: only these students, in
    every assignment that has a submission of theirs (each must have one somewhere).
    """
    from distributed import as_completed

    from .runner import check_preload, kernel_preload

    names = list(dict.fromkeys(assignments))
    if not names:
        raise ValueError("no assignment to grade")
    settings = settings or Settings()
    choice = choice or ClusterChoice()
    say = progress or (lambda _: None)
    term = len(names) > 1
    start = time.monotonic()
    with single_grader(course_root), Writer(db_url, course_root) as writer, contextlib.ExitStack() as stack:
        found = {name: find_submissions(course_root, name) for name in names}
        if students:
            wanted = set(students)
            missing = wanted - {s.student for subs in found.values() for s in subs}
            if missing:
                what = f"submission of {', '.join(names)}" if term else f"{names[0]} submission"
                raise ValueError(f"no collected {what} for: {', '.join(sorted(missing))}")
            found = {name: [s for s in subs if s.student in wanted] for name, subs in found.items()}
        # What is left to grade follows from the files alone: where anything is, the cluster starts now and
        # its workers warm up while the assignments are read.
        done = {name: ({} if force else writer.done(name)) for name in names}
        left = [name for name in names if any(done[name].get(s.student) != files_digest(s.files())
                                              for s in found[name])]
        kinds = {name: _kind(course_root, name, mode) for name in left}
        union = tuple(dict.fromkeys(m for k in kinds.values() if k for m in k[3])) if term else None
        client = what = None
        if left:
            client, what = stack.enter_context(connect(choice))
            stack.callback(_close_pools, client)
            first = kinds[left[0]]
            if first is not None:
                with contextlib.suppress(Exception):      # a warm-up only: the jobs start what is missing
                    client.run(_warm_up, settings, first[0], first[1], first[2], union or first[3])
        specs: dict[str, Assignment] = {}
        for name in names:
            specs[name] = spec = load_assignment(name, course_root, db_url, mode)
            say(f"{name}: {len(spec.notebooks)} notebook(s) ({', '.join(n + '.ipynb' for n in spec.names)}), "
                f"graded in {spec.mode} mode ({spec.mode_origin})")
        todo: list[Job] = []
        skipped: dict[str, list[str]] = {}
        stamps: dict[tuple[str, str], dt.datetime | None] = {}
        for name in names:
            subs = found[name]
            jobs = make_jobs(name, subs, settings, course_root, spec=specs[name])
            skipped[name] = [j.student for j in jobs if done[name].get(j.student) == j.digest]
            mine = [j for j in jobs if done[name].get(j.student) != j.digest]
            todo += mine
            stamps.update({(name, s.student): s.timestamp for s in subs})
            if skipped[name]:
                say(f"{name}: {len(skipped[name])} submission(s) already graded, not graded again "
                    "(--force to regrade)")
            if not mine:
                say(f"{name}: nothing left to grade" if subs or not term else f"{name}: nothing collected")
        records: dict[str, list[dict[str, Any]]] = {name: [] for name in names}

        def finish(wall: float, workers: int, what: str, check_runs: int = 0) -> TermRun:
            runs = {name: ClassRun(records[name] if workers else writer.records(name), skipped[name], wall,
                                   workers, what) for name in names}
            return TermRun(runs, wall, workers, what, check_runs)

        if not todo:
            return finish(time.monotonic() - start, 0, "")
        if client is None:      # (the files changed while the assignments were read)
            client, what = stack.enter_context(connect(choice))
            stack.callback(_close_pools, client)
        # One check run per worker for the whole run: it imports what any of the assignments' setup
        # cells import (public: the notebooks' own imports), and each job still runs in a fork of it.
        preloads = {name: kernel_preload(specs[name]) for name in names}
        checks = {name: check_preload(specs[name]) for name in names}
        if term:
            union = union or tuple(dict.fromkeys(m for name in names for m in checks[name]))
        for job in todo:
            job.check_preload = union if term else checks[job.assignment]
        counts = {name: sum(j.assignment == name for j in todo) for name in names}
        infos = client.scheduler_info()["workers"]
        workers = len(infos) or 1
        cpu_note = (" (CPU grading of a GPU exercise: marked in the records)"
                    if settings.cpu and any(j.requires_gpu for j in todo) else "")
        if term:
            for job, upcoming in zip(todo, _next_preloads(todo, preloads, workers)):
                job.next_preload = upcoming
            parts = ", ".join(f"{name} {n}" for name, n in counts.items() if n)
            say(f"grading {len(todo)} submission(s) of {sum(1 for n in counts.values() if n)} assignment(s) "
                f"({parts}) on {what}{cpu_note}")
        else:
            say(f"{names[0]}: grading {len(todo)} submission(s) on {what}{cpu_note}")
        # One submission per GPU: ask for the GPU resource where the workers offer it (local GPU
        # workers, Slurm jobs with GRES, a lab's workers started with --resources GPU=1).
        gpu_workers = bool(infos) and all(w.get("resources", {}).get("GPU") for w in infos.values())
        resources = {"GPU": 1} if gpu_workers else None
        # A worker warms a spare slot for its next submission while it grades one; the last ``workers``
        # submissions have no next one on their worker (a sandbox, a kernel and a check run started for
        # nothing: most of a small class's start-up).  A retry then starts its slot when it comes.
        for index, job in enumerate(todo):
            job.spare = index < len(todo) - workers
        attempts = {(j.assignment, j.student): 1 for j in todo}
        by_key = {}
        futures = []
        for job in todo:
            future = client.submit(_run_on_worker, job, time.time(), pure=False, resources=resources,
                                   key=f"grade-{job.assignment}-{job.student}-{job.digest[:12]}-1")
            by_key[future.key] = job
            futures.append(future)
        pending = as_completed(futures, with_results=True, raise_errors=False)
        finished = 0
        check_runs = 0
        who = (lambda j: f"{j.assignment}/{j.student}") if term else (lambda j: j.student)
        for future, result in pending:
            job = by_key[future.key]
            key = (job.assignment, job.student)
            if not isinstance(result, Result):
                error = future.exception() if future.status == "error" else result
                result = Result(job.assignment, job.student, job.digest, "infrastructure failure",
                                f"the worker failed: {type(error).__name__}: {error}", {},
                                "", "", "", "", False, {"total": 0.0}, mode=job.spec.mode)
            if result.stats.get("checks", {}).get("jobs") == 1:
                check_runs += 1           # this submission's check run was started for it
            if result.outcome == "infrastructure failure" and attempts[key] <= retries \
                    and "needs a GPU" not in result.reason:
                attempts[key] += 1
                retry = client.submit(_run_on_worker, job, time.time(), pure=False, resources=resources,
                                      key=f"grade-{job.assignment}-{job.student}-{job.digest[:12]}-{attempts[key]}")
                by_key[retry.key] = job
                pending.add(retry)
                say(f"  {who(job)}: infrastructure failure ({result.reason[:120]}), running it again")
                continue
            try:
                lost = client.run_on_scheduler(_lost_workers, key=future.key)
            except Exception:  # noqa: BLE001 - only for the record
                lost = 0
            if lost:
                say(f"  {who(job)}: {lost} worker(s) died while grading it; Dask ran it again elsewhere")
            record = writer.record(result, timestamp=stamps.get(key), attempts=attempts[key] + lost)
            records[job.assignment].append(record)
            finished += 1
            score = f"{record['score']:g}/{record['max_score']:g}" if record["score"] is not None else "-"
            elapsed = time.monotonic() - start
            eta = elapsed / finished * (len(todo) - finished)
            say(f"  [{finished:>{len(str(len(todo)))}}/{len(todo)}] {who(job)}: {score} {result.outcome}"
                f"{' (' + result.reason[:100] + ')' if result.reason else ''} in {result.seconds['total']:.1f} s"
                f" on {result.worker or '?'}; {elapsed:.0f} s elapsed, ~{eta:.0f} s left")
        return finish(time.monotonic() - start, workers, what, check_runs)


def ensure_assignment(assignment: str, course_root: Path, db_url: str) -> None:
    """Put the assignment (its notebooks and graded cells) into the gradebook if it is not there yet."""
    from .assignment import _generated, course_config

    _generated(course_root, assignment, db_url, course_config(course_root, db_url))


__all__ = ["ClassRun", "ClusterChoice", "TermRun", "connect", "ensure_assignment", "find_submissions",
           "grade_class", "grade_term", "local_gpus", "make_jobs", "requires_gpu"]
