"""The sandboxes a worker grades in: a *slot* per submission, one kept warm for the next.

A slot is a job folder with the sandbox (:class:`autograder.sandbox.Sandbox`) of
the student's kernel(s), started before the submission arrives: a **warm
kernel** (:class:`autograder.kernel.WarmKernel`) that has imported ipykernel and
the assignment's setup imports, so that a submission pays for neither an
interpreter's start nor torch's import.  A worker keeps one spare slot of the
kind it last used, started in the background while the current submission runs.

For assignments graded with trusted checks, the slot is attached to the
worker's **check run** (:class:`CheckServer`: ``python -m autograder.checks
--serve`` in a sandbox of its own), which is kept from one submission to the
next: each job runs in a fork of it taken before that job is read, and everything
else in its sandbox is killed between two jobs, so torch is imported for the
checks once per worker, not once per submission.  A run over several assignments
(``autograder grade A B C``) gives every job the union of their setup imports as the check run's
preload (``check_preload``): one warm check run per worker serves all of them, each job still in
a fork of its own; the warm kernel keeps its own assignment's imports (the student's kernel holds
only what its own setup cells import), and the spare slot is started for the assignment the worker
will most likely grade next (``next_preload``, the engine's guess).  Each sandboxed process gets
its share of the worker's cores as its compute threads (``OMP_NUM_THREADS``).
On a CPU worker with the sandbox, the kernel itself is **served**
(:mod:`autograder.kernel_serve`): a slot is then a folder in the sandbox of the
worker's kernel server, which forks the submission's kernel in namespaces of its
own, so torch is imported for the kernels once per worker too (``DLPERF_KERNEL_SERVER=0``,
a GPU runner, or a machine without user namespaces: a warm kernel per slot, as above).
Separate sandboxes have separate memory and process limits: a fork bomb or a
memory hog in the kernel cannot starve the hidden checks, and the other way
round.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
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
from .kernel_serve import KernelServer, Served
from .sandbox import Limits, Sandbox

REPO = Path(__file__).resolve().parents[1]

__all__ = ["CheckRun", "CheckServer", "Slot", "gpu_devices", "release_spares", "take_slot", "thread_env", "warm"]


class CheckRun:
    """``python -m autograder.checks`` started in a sandbox, warm, waiting for its job."""

    def __init__(self, sandbox: Sandbox, env: Mapping[str, str], workdir: Path, preload: tuple[str, ...] = (),
                 serve: bool = False):
        self.started = time.monotonic()
        self.serve = serve
        self.jobs = 0            # jobs sent so far
        self.clean = True        # every job sent so far came back "done"
        self.log = open(workdir / "checks.log", "wb")  # noqa: SIM115 - closed in finish()
        flags = ["--serve"] if serve else []
        argv = sandbox.command([sys.executable, "-m", "autograder.checks", *flags, *preload], env)
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        cwd=str(workdir), start_new_session=True)
        self.lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.info: dict[str, Any] | None = None

    def reusable(self) -> bool:
        """True where it serves jobs, every job so far ended "done", and it still runs."""
        return self.serve and self.clean and self.process.poll() is None

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
        ``timed_out``, ``setup_error``, ``isolation``, and ``died`` (how the job's process ended, where
        it died before ``done``)."""
        assert self.process.stdin is not None
        got: dict[str, Any] = {"tests": {}, "done": False, "running": None, "timed_out": False,
                               "setup_error": None, "isolation": []}
        self.jobs += 1
        self.clean = False
        self.info = None          # the next job's process says "ready" again
        with contextlib.suppress(OSError, ValueError):
            self.log.truncate(0)  # this job's log only (the server's stderr shares the file's offset)
            self.log.seek(0)
        try:
            self.process.stdin.write(json.dumps(job).encode() + b"\n")
            self.process.stdin.flush()
            if not self.serve:
                self.process.stdin.close()
        except (BrokenPipeError, ValueError):
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
                self.clean = True
                return got
            elif "died" in line:         # the job's process is gone (the warm one says so at once)
                got["died"] = str(line["died"])[:200]
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


def _sandbox(settings: Any, folder: Path, gpu_devices: str | None, name: str) -> Sandbox:
    """A sandbox for one part of grading, entered: the course's limits, the repository and the home
    folder hidden, the library and the Python installation exposed."""
    box = Sandbox(folder, limits=Limits(memory_bytes=settings.memory_bytes, processes=settings.processes),
                  hide=[REPO, Path.home(), *map(Path, settings.hide)],
                  expose=[REPO / "dlperf", REPO / "autograder", Path(sys.prefix)],
                  gpu_devices=gpu_devices, enabled=settings.sandbox, name=name)
    box.__enter__()
    return box


def _kernel_env(box: Sandbox, threads: int) -> dict[str, str]:
    """The student's kernel's environment: what nbgrader's autograde sets, the library importable."""
    return {**box.base_env(), "PYTHONPATH": str(REPO), "NBGRADER_EXECUTION": "autograde", **thread_env(threads)}


def _new_kernel_server(settings: Any, gpu: str | None, preload: tuple[str, ...], threads: int) -> KernelServer:
    """A kernel server (:mod:`autograder.kernel_serve`) in a sandbox and a folder of its own, warming up."""
    root = Path(tempfile.mkdtemp(prefix=f"dlperf-kernels-{os.getpid()}-{next(_numbers)}-"))
    (root / "b").mkdir()
    box = _sandbox(settings, root / "b", gpu, "kernel")
    try:
        return KernelServer(box, root, _kernel_env(box, threads), preload)
    except BaseException:
        box.__exit__(None, None, None)
        shutil.rmtree(root, ignore_errors=True)
        raise


class CheckServer:
    """The check run of a worker, in a sandbox and a folder of its own, kept from one submission to the next.

    With the sandbox (bubblewrap's PID namespace), it serves (``--serve``): each job runs in a fork of
    the warm process taken before that job is read, and everything else in the sandbox is killed
    between two jobs, so a submission meets the same clean sandbox as with a fresh check run, without
    another interpreter's start and torch's import.  It is used again only while every job came back
    "done", without the memory or process limit hit; otherwise it is closed and a new one started.
    Without the sandbox it runs one job and ends (nothing could clean up between two jobs).
    """

    def __init__(self, settings: Any, gpu_devices: str | None, preload: tuple[str, ...], threads: int):
        self.workdir = Path(tempfile.mkdtemp(prefix=f"dlperf-checks-{os.getpid()}-{next(_numbers)}-"))
        self.box = _sandbox(settings, self.workdir, gpu_devices, "checks")
        try:
            env = {**self.box.base_env(), "PYTHONPATH": str(REPO), **thread_env(threads)}
            self.run = CheckRun(self.box, env, self.workdir, preload, serve=settings.sandbox)
        except BaseException:
            self.box.__exit__(None, None, None)
            raise

    def reusable(self) -> bool:
        if not self.run.reusable():
            return False
        stats = self.box.stats()
        return not stats.get("oom_killed") and not stats.get("pids_limit_hit")

    def stats(self) -> dict[str, Any]:
        """The sandbox's figures (peak memory: since this check run started) and the jobs it has run."""
        return {**self.box.stats(), "jobs": self.run.jobs}

    def close(self) -> None:
        try:
            self.run.finish()
        finally:
            self.box.__exit__(None, None, None)
            if not os.environ.get("DLPERF_KEEP_SANDBOX"):
                shutil.rmtree(self.workdir, ignore_errors=True)


class Slot:
    """The sandbox of one submission's kernel, already warm, and (``attach``) the worker's check run.

    ``preload``: the modules a warm kernel imports before the submission comes (``None``: no warm
    kernel); ``threads``: the compute threads of each sandboxed process (0: the libraries' default).
    """

    def __init__(self, settings: Any, gpu_devices: str | None, preload: tuple[str, ...] | None = None,
                 threads: int = 0, kernels: KernelServer | None = None):
        self.settings = settings
        self.kernels = kernels
        self._kernels_key = (settings, gpu_devices, preload, threads)
        self.server: CheckServer | None = None
        self._server_key: tuple[Any, ...] | None = None
        self.check_box: Sandbox | None = None
        self.checks: CheckRun | None = None
        self.warm: WarmKernel | Served | None = None
        if kernels is not None:
            # The worker's kernel server: a folder in its kept sandbox, the kernel forked when the notebook runs.
            self.workdir = kernels.folder_for()
            (self.workdir / "kernel").mkdir()
            self.kernel_box = kernels.box
            self.env = kernels.env
            self.cwd = self.workdir / "kernel" / "home"
            self.cwd.mkdir()
            self.warm = Served(kernels, self.workdir, self.cwd)
            return
        self.workdir = Path(tempfile.mkdtemp(prefix=f"dlperf-sub-{os.getpid()}-{next(_numbers)}-"))
        folder = self.workdir / "kernel"
        folder.mkdir()
        self.kernel_box = _sandbox(settings, folder, gpu_devices, "kernel")
        # The student's kernel: what nbgrader's autograde sets, in the folder the submission's files go to.
        self.env = _kernel_env(self.kernel_box, threads)
        self.cwd = self.workdir / "kernel" / "home"
        self.cwd.mkdir()
        if preload is not None:
            self.warm = WarmKernel(self.kernel_box, self.workdir / "kernel", self.cwd, self.env, preload)

    def attach(self, server: CheckServer, key: tuple[Any, ...]) -> None:
        """Grade this submission's hidden checks with ``server`` (given back to the pool on close)."""
        self.server, self._server_key = server, key
        self.check_box, self.checks = server.box, server.run

    def describe(self) -> str:
        return self.kernel_box.describe()

    def stats(self) -> dict[str, Any]:
        stats = {"kernel": self.kernel_box.stats()}
        if self.server is not None:
            stats["checks"] = self.server.stats()
        return stats

    def close(self) -> None:
        try:
            if self.warm is not None:
                self.warm.close()
        finally:
            if self.kernels is not None:
                _give_back_kernels(self.kernels, self._kernels_key)
            else:
                self.kernel_box.__exit__(None, None, None)
                if not os.environ.get("DLPERF_KEEP_SANDBOX"):
                    shutil.rmtree(self.workdir, ignore_errors=True)
            if self.server is not None:
                _give_back(self.server, self._server_key)
                self.server = self.checks = self.check_box = None


_numbers = itertools.count()
_spare: dict[tuple[Any, ...], Slot] = {}
_servers: dict[tuple[Any, ...], CheckServer] = {}
_warming: list[concurrent.futures.Future[None]] = []
_kernel_servers: dict[tuple[Any, ...], KernelServer] = {}   # idle, by (settings, gpu, preload, threads)
_kernels_in_use: dict[tuple[Any, ...], int] = {}
_not_served: list[str] = []          # why kernels cannot be served here (found once, then warm kernels)
KEPT_KERNEL_SERVERS = 2              # idle ones per worker: the kind it grades now and the next
_lock = threading.Lock()
_swept = False
# Spare slots and check runs are started from this one long-lived thread.  bwrap's --die-with-parent is the kernel's
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
              preload: tuple[str, ...] | None = None, threads: int = 0,
              check_preload: tuple[str, ...] | None = None, next_preload: tuple[str, ...] | None = None) -> Slot:
    """The warm slot if one matches, else a new one, with the worker's check run attached where
    ``checks``; then start the next slot in the background.

    ``preload``: the warm kernel's imports (this assignment's setup imports); ``check_preload``: the
    check run's (default ``preload``; a run over several assignments passes the union of theirs, so
    that one check run serves them all); ``next_preload``: the kernel imports of the submission this
    worker will most likely grade next (default ``preload``), for the spare slot.  At most one spare
    slot is kept: a spare of another kind is closed when the next one is made.
    """
    _sweep_once()
    key = (settings, gpu, preload, threads)
    server_key = (settings, gpu, preload or () if check_preload is None else check_preload, threads)
    # Taken in the launcher's thread, after what it was asked to start before (a warm-up, the previous
    # submission's spare): a spare still being made is waited for rather than started twice.
    slot = _launcher.submit(_slot_for, key).result()
    if checks:
        try:
            server = _launcher.submit(_server_or_new, server_key).result()
        except BaseException:
            slot.close()
            raise
        slot.attach(server, server_key)
    if prewarm:
        spare_key = key if next_preload is None else (settings, gpu, next_preload, threads)

        def make() -> None:
            _make_spare(spare_key)
            if checks and not settings.sandbox:
                _give_back(CheckServer(settings, gpu, server_key[2], threads), server_key)   # one job each
        _track(_launcher.submit(make))
    return slot


def _sweep_once() -> None:
    """Before this process's first sandbox: what a grader killed earlier on this machine left behind."""
    global _swept
    if not _swept:
        _swept = True
        from .sandbox import sweep_stale_cgroups, sweep_stale_folders

        sweep_stale_cgroups()
        sweep_stale_folders()


def _served(key: tuple[Any, ...]) -> bool:
    """Whether submissions of ``key`` get their kernel from a kernel server: with the sandbox, a warm
    kernel asked for, no GPU (a served kernel's user namespace has not been tried with CUDA yet: a GPU
    runner keeps a warm kernel per submission), and namespaces possible here (``DLPERF_KERNEL_SERVER=0``:
    warm kernels always)."""
    settings, gpu, preload, _ = key
    return (bool(settings.sandbox) and preload is not None and gpu is None and not _not_served
            and os.environ.get("DLPERF_KERNEL_SERVER", "1") != "0")


def _slot_for(key: tuple[Any, ...]) -> Slot:
    """In the launcher's thread: a slot on the kernel server of ``key`` (settings, gpu, preload, threads)
    where kernels are served, else the spare slot of ``key``, else a new one."""
    if _served(key):
        with _lock:
            server = _kernel_servers.pop(key, None)
        if server is not None and server.process.poll() is not None:
            server.close()        # it died while it waited (killed from outside)
            server = None
        try:
            if server is None:
                server = _new_kernel_server(*key)
            isolated = server.isolated()
        except Exception:  # noqa: BLE001 - the server did not start: this submission gets a warm kernel
            isolated = None
        if isolated:
            with _lock:
                _kernels_in_use[key] = _kernels_in_use.get(key, 0) + 1
            return Slot(*key, kernels=server)
        if isolated is False:
            _not_served.append(str((server.info or {}).get("why", "")))
        if server is not None:
            server.close()
    with _lock:
        slot = _spare.pop(key, None)
    return slot if slot is not None else Slot(*key)


def _make_spare(key: tuple[Any, ...]) -> None:
    """In the launcher's thread: what the next submission of ``key`` will take, started now -- a kernel
    server (unless one is kept or in use for ``key``), else a spare slot (one per worker)."""
    if _served(key):
        with _lock:
            have = key in _kernel_servers or _kernels_in_use.get(key, 0) > 0
        if not have:
            _keep_kernel_server(key, _new_kernel_server(*key))
        return
    spare = Slot(*key)
    with _lock:
        old = list(_spare.values())       # one spare per worker: the kind it will grade next
        _spare.clear()
        _spare[key] = spare
    for stale in old:
        stale.close()


def _keep_kernel_server(key: tuple[Any, ...], server: KernelServer) -> None:
    """Keep ``server`` idle for the next submission of ``key``; at most :data:`KEPT_KERNEL_SERVERS` kept."""
    with _lock:
        old = [_kernel_servers.pop(key)] if key in _kernel_servers else []
        _kernel_servers[key] = server
        while len(_kernel_servers) > KEPT_KERNEL_SERVERS:
            old.append(_kernel_servers.pop(next(iter(_kernel_servers))))
    for stale in old:
        stale.close()


def _give_back_kernels(server: KernelServer, key: tuple[Any, ...]) -> None:
    """After a submission: keep its kernel server if it can serve again, else close it and start another."""
    with _lock:
        _kernels_in_use[key] = max(0, _kernels_in_use.get(key, 0) - 1)
    if server.reusable():
        _keep_kernel_server(key, server)
        return
    server.close()
    _track(_launcher.submit(_make_spare, key))


def _server_or_new(key: tuple[Any, ...]) -> CheckServer:
    """The kept check run of ``key`` (settings, gpu, preload, threads), else a new one (in the launcher's thread)."""
    with _lock:
        server = _servers.pop(key, None)
    if server is not None and server.run.process.poll() is not None:
        server.close()        # it died while it waited (killed from outside)
        server = None
    return server if server is not None else CheckServer(*key)


def warm(settings: Any, gpu: str | None, checks: bool, preload: tuple[str, ...] | None, threads: int,
         check_preload: tuple[str, ...] | None = None) -> None:
    """Start, in the background, the slot (and, where ``checks``, the check run) that a first submission
    of this kind will take: a worker warms up while the coordinator still reads the assignments.
    Returns at once; :func:`take_slot` takes what was started (or waits for it to be)."""
    _sweep_once()
    key = (settings, gpu, preload, threads)
    server_key = (settings, gpu, preload or () if check_preload is None else check_preload, threads)

    def make() -> None:
        with _lock:
            have_slot = key in _spare
            have_server = server_key in _servers
        if not have_slot:
            _make_spare(key)
        if checks and not have_server:
            _give_back(CheckServer(*server_key), server_key)

    _track(_launcher.submit(make))


def _give_back(server: CheckServer, key: tuple[Any, ...] | None) -> None:
    """Keep ``server`` for the next submission of its kind if it can serve again, else close it."""
    fresh = server.run.jobs == 0
    if key is not None and (fresh or server.reusable()):
        with _lock:
            old = _servers.pop(key, None)
            _servers[key] = server
        if old is not None:
            old.close()
        return
    server.close()
    if key is not None and server.run.serve:
        # a job that did not end well (timed out, killed, a limit hit): a new one for the next submission
        settings, gpu, preload, threads = key
        _track(_launcher.submit(lambda: _give_back(CheckServer(settings, gpu, preload or (), threads), key)))


def _track(future: concurrent.futures.Future[None]) -> None:
    """Remember background work that :func:`release_spares` must wait for."""
    with _lock:
        _warming[:] = [f for f in _warming if not f.done()] + [future]


def release_spares() -> None:
    """Close the warm slots of this process (at the end of a class), after those still warming up."""
    with _lock:
        warming = list(_warming)
    concurrent.futures.wait(warming, timeout=120)
    with _lock:
        slots = list(_spare.values())
        _spare.clear()
        servers = list(_servers.values())
        _servers.clear()
        kernel_servers = list(_kernel_servers.values())
        _kernel_servers.clear()
    for slot in slots:
        slot.close()
    for server in servers:
        server.close()
    for kernels in kernel_servers:
        kernels.close()
