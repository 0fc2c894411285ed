"""Served kernels: one warm process per worker forks the student's kernel of each submission.

A warm kernel (:mod:`autograder.warm_kernel`) saves a submission the interpreter's
start and torch's import only by paying them while the previous submission runs:
on a busy machine (a class on every core, the test suite) that is still CPU taken
from grading, 1.3-1.9 CPU-s per submission, most of a small submission's cost.  A
**kernel server** pays it once per worker: ``python -m autograder.warm_kernel
--serve MODULE...`` runs in a kernel sandbox kept from one submission to the next,
imports ipykernel and the modules, makes itself non-dumpable (no process of the
same user may trace it or read its memory), and for each submission forks the
kernel, which then becomes ipykernel with the connection file's arguments.

A kept sandbox must not carry anything from one student to the next.  So each
forked kernel, before any of the student's code runs, gets (:func:`_enter`):

* a **mount namespace** with its own empty ``/tmp``, ``/dev/shm`` and ``/var/tmp``
  (the sandbox's are the server's, kept across submissions) and only its own
  submission's folder bound back, writable;
* an **IPC namespace** (System V shared memory outlives its processes);
* a session of its own, no capability, the out-of-memory killer's first choice
  (a kernel that fills the sandbox's memory dies, the server does not).

It keeps the sandbox's network namespace (its loopback: ranks of a process
group on ``127.0.0.1`` in nbgrader-mode hidden tests) and PID namespace (a fresh
``/proc`` cannot be mounted inside bubblewrap, and libraries read
``/proc/self``).  When the kernel has ended, the server kills every other
process of the sandbox (all that a submission can leave listening or waiting)
and the grader empties the sandbox's folder, so the next submission meets what a
fresh sandbox would show it.  A server is used again only while each kernel
ended and was cleaned up and its sandbox hit no limit; a timeout (the whole
sandbox is killed) or a crash closes it and a new one is started.  Where the
namespaces cannot be made (no unprivileged user namespaces), the server says so
when it starts and the grader uses a warm kernel per submission instead.

Protocol, JSON lines: the server says ``{"ready": true, "isolation": ...}``; the
grader sends ``{"kernel": {"folder", "cwd", "args", "log"}}``, the server answers
``{"pid": n}`` (or ``{"error": why}``); ``{"signal": n}`` is forwarded to the
kernel's session; when it ends, ``{"exit": code}`` then ``{"clean": true}``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import queue
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["KernelServer", "ServedKernel", "serve"]

PRIVATE = ("/tmp", "/dev/shm", "/var/tmp")


# ---------------------------------------------------------------------------------------------
# Inside the sandbox: the server
# ---------------------------------------------------------------------------------------------


def _enter(folder: str) -> None:
    """In a forked kernel, before the student's code: the namespaces and limits of the module's docstring."""
    from .trusted import zygote

    with contextlib.suppress(OSError):
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
    # Every folder of the import path is bound back (read-only) where a private folder covers it: a lazy
    # import must find what the server found (a parent environment's packages, through a .pth file, under
    # /tmp) -- but not the sandbox's folder, which holds the submissions'.
    box = os.path.dirname(os.path.realpath(folder))
    path = [p for p in sys.path if p and not (os.path.realpath(p) + os.sep).startswith(box + os.sep)]
    zygote._enter_namespaces(PRIVATE, (), pid_namespace=False, network=False, writable=(folder,), readable=path)
    zygote._drop_capabilities()


def _probe() -> str:
    """Whether a fork of this process can enter the kernel's namespaces: '' if so, else why not."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        why = ""
        try:
            _enter(os.getcwd())
        except Exception as exc:  # noqa: BLE001 - reported to the grader
            why = f"{type(exc).__name__}: {exc}" or "failed"
        os.write(write_end, why.encode()[:500] or b"ok")
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read().decode(errors="replace")
    os.waitpid(pid, 0)
    return "" if data == "ok" else (data or "the probe died")


class _Lines:
    """Lines from a file descriptor, read with ``os.read`` so that ``select`` on it stays truthful."""

    def __init__(self, fd: int):
        self.fd, self.buffer, self.eof = fd, b"", False

    def next(self) -> dict[str, Any] | None:
        """The next complete JSON line if one is buffered (or, blocking, read); None at EOF."""
        while b"\n" not in self.buffer:
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.eof = True
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}

    def buffered(self) -> bool:
        return b"\n" in self.buffer


def _kernel(request: Mapping[str, Any], report: int, name_process: Callable[[str], None]) -> None:
    """In the forked kernel: isolate, say so on ``report``, then become ipykernel."""
    try:
        os.setsid()
        _enter(str(request["folder"]))
        os.chdir(str(request["cwd"]))
        log = os.open(str(request["log"]), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except Exception as exc:  # noqa: BLE001 - the grader reports it as the runner's failure
        os.write(report, f"{type(exc).__name__}: {exc}".encode()[:500] or b"failed")
        os._exit(1)
    os.write(report, b"ok")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    from .trusted import zygote

    zygote._close_other_fds({0, 1, 2})
    with contextlib.suppress(OSError):
        zygote._libc.prctl(zygote.PR_SET_DUMPABLE, 1, 0, 0, 0)   # an ordinary process again, as a fresh kernel is
    sys.stdout = open(1, "w", closefd=False, buffering=1)  # noqa: SIM115 - lives as long as the process
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115
    name_process("student-kernel")
    from ipykernel import kernelapp

    sys.argv = ["ipykernel_launcher", *request["args"]]
    kernelapp.launch_new_instance()


def serve(name_process: Callable[[str], None]) -> int:
    """The server's loop (stdin: requests; the original stdout: replies; see the module's docstring)."""
    from .checks import _in_sandbox_pid_namespace, kill_the_rest
    from .trusted import zygote

    reply = os.fdopen(os.dup(1), "w", buffering=1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)

    def say(**message: Any) -> None:
        reply.write(json.dumps(message) + "\n")

    zygote.make_non_dumpable()
    why = _probe()
    say(ready=True, isolation="process" if why else "namespaces", why=why, pid=os.getpid())
    clean_up = _in_sandbox_pid_namespace()
    lines = _Lines(0)
    while True:
        request = lines.next()
        if request is None:
            return 0
        if "kernel" not in request:
            continue
        read_end, write_end = os.pipe()
        gc.freeze()   # the kernel's collections walk only what the submission made (see zygote._zygote_main)
        pid = os.fork()
        if pid == 0:
            try:
                os.close(read_end)
                _kernel(request["kernel"], write_end, name_process)
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as f:
            started = f.read().decode(errors="replace")
        if started == "ok":
            say(pid=pid)
        else:
            say(error=started or "the kernel died before it started")
        code = _wait(pid, lines)
        say(exit=code)
        kill_the_rest(clean_up)
        say(clean=True)
        if lines.eof:
            return 0


def _wait(pid: int, lines: _Lines) -> int:
    """Until the kernel ``pid`` ends, forwarding ``{"signal": n}`` to its session; its exit code.
    End of input (the grader is gone) kills it."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready = [] if lines.buffered() else select.select([0, pidfd], [], [])[0]
            if pidfd in ready:
                break
            if lines.buffered() or 0 in ready:
                request = lines.next()
                number = None if request is None else request.get("signal")
                if request is None:
                    number = signal.SIGKILL
                if isinstance(number, int):
                    for target in (lambda: os.killpg(pid, number), lambda: os.kill(pid, number)):
                        try:
                            target()
                            break
                        except OSError:
                            continue
                if request is None:
                    break
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)
    finally:
        os.close(pidfd)


# ---------------------------------------------------------------------------------------------
# In the grader
# ---------------------------------------------------------------------------------------------


class ServedKernel:
    """The kernel forked for one submission, seen as the ``subprocess.Popen`` that ``jupyter_client``'s
    provisioner expects (``poll``, ``wait``, ``send_signal``, ``kill``); ``pgid`` None: signals go
    through the server, never to a process group of this machine."""

    stdin = stdout = stderr = None
    pgid = None

    def __init__(self, server: KernelServer, pid: int):
        self.server, self.pid, self.returncode = server, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server._exit_code(0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired("served kernel", timeout or 0)
            self.server._exit_code(0.05 if deadline is None else max(0.0, min(0.05, deadline - time.monotonic())))
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            self.server._send({"signal": int(number)})

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class KernelServer:
    """``python -m autograder.warm_kernel --serve`` in a kernel sandbox of its own, kept across submissions.

    ``box``: the sandbox (:class:`autograder.sandbox.Sandbox`, entered), whose folder holds one
    submission's folder at a time (:meth:`folder_for`); ``env``: the kernels' environment.  Its
    sandbox's figures (peak memory) count since the server started.
    """

    def __init__(self, box: Any, root: Path, env: Mapping[str, str], preload: Sequence[str]):
        self.box, self.root, self.env = box, root, dict(env)
        self.folder = Path(box.workdir)
        self.log = open(root / "kernel-server.log", "wb")  # noqa: SIM115 - closed in close()
        argv = box.command([sys.executable, "-m", "autograder.warm_kernel", "--serve", *preload], self.env)
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        cwd=str(self.folder), start_new_session=True)
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.info: dict[str, Any] | None = None
        self.running: ServedKernel | None = None
        self.clean = True         # every kernel so far ended and was cleaned up after
        self._exit: int | None = None
        self._numbers = 0

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                self.lines.put(value)
        self.lines.put(None)

    def _line(self, timeout: float) -> dict[str, Any] | None:
        try:
            line = self.lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return {}
        if line is None:
            self.lines.put(None)    # EOF stays EOF
        return line

    def _send(self, message: Mapping[str, Any]) -> bool:
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def ready(self, timeout: float) -> dict[str, Any]:
        """The server's report once warm (``isolation``: ``namespaces`` or ``process``, and why)."""
        if self.info is None:
            line = self._line(timeout)
            if not line or not line.get("ready"):
                raise RuntimeError(f"the kernel server did not start (exit code {self.process.poll()}): "
                                   + self.tail())
            self.info = line
        return self.info

    def isolated(self, timeout: float = 120.0) -> bool:
        return self.ready(timeout).get("isolation") == "namespaces"

    def folder_for(self) -> Path:
        """A new folder for the next submission, inside the sandbox's."""
        self._numbers += 1
        folder = self.folder / f"s{self._numbers}"   # short: unix socket paths in it are <= 107 bytes
        folder.mkdir()
        return folder

    def start(self, folder: Path, cwd: Path, args: Sequence[str], log: Path) -> ServedKernel:
        """Fork the kernel of the submission in ``folder`` (working folder ``cwd``) with ``args``."""
        if self.running is not None:
            raise RuntimeError("a kernel of this server is still running")
        self.box.hand_over()
        self.clean = False
        self._exit = None
        if not self._send({"kernel": {"folder": str(folder), "cwd": str(cwd), "args": list(args), "log": str(log)}}):
            raise RuntimeError("the kernel server is gone: " + self.tail())
        line = self._line(30.0)
        if not line or "pid" not in line:
            why = (line or {}).get("error") or "no answer"
            raise RuntimeError(f"the served kernel did not start: {why}")
        self.running = ServedKernel(self, int(line["pid"]))
        return self.running

    def _exit_code(self, timeout: float) -> int | None:
        """The running kernel's exit code once the server said it ended (waiting up to ``timeout``)."""
        if self._exit is None:
            line = self._line(timeout)
            if line is None:
                self._exit = -signal.SIGKILL        # the server (and so its kernels) is gone
            elif "exit" in line:
                self._exit = int(line["exit"])
        return self._exit

    def finish(self, timeout: float = 15.0) -> None:
        """After a submission: its kernel killed if it still runs, the sandbox cleaned by the server,
        then the sandbox's folder emptied here.  ``clean`` says whether all of it happened."""
        kernel, self.running = self.running, None
        if kernel is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                if kernel.poll() is None:
                    kernel.kill()
                kernel.wait(timeout)
            deadline = time.monotonic() + timeout
            while True:
                line = self._line(deadline - time.monotonic())
                if line is None or not line:
                    break                       # the server is gone, or never said so: not clean
                if "exit" in line and kernel.returncode is None:
                    self._exit = kernel.returncode = int(line["exit"])
                if line.get("clean"):
                    self.clean = kernel.returncode is not None
                    break
        self._empty()

    def _empty(self) -> None:
        if os.environ.get("DLPERF_KEEP_SANDBOX"):
            return
        for entry in list(self.folder.iterdir()) if self.folder.is_dir() else []:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    entry.unlink()

    def reusable(self) -> bool:
        """True while it runs, every kernel ended cleanly, and its sandbox hit no limit."""
        if self.running is not None or not self.clean or self.process.poll() is not None:
            return False
        if self.info is None or self.info.get("isolation") != "namespaces":
            return False
        if len(self.box._wrappers()) > 1:
            return False          # another kernel was started in its sandbox (a second notebook, another kernelspec)
        stats = self.box.stats()
        return not stats.get("oom_killed") and not stats.get("pids_limit_hit")

    def tail(self) -> str:
        self.log.flush()
        try:
            return Path(self.log.name).read_bytes()[-2000:].decode(errors="replace")
        except OSError:
            return ""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            assert self.process.stdin is not None
            self.process.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(2)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.box.__exit__(None, None, None)
        self.log.close()
        if not os.environ.get("DLPERF_KEEP_SANDBOX"):
            shutil.rmtree(self.root, ignore_errors=True)


class Served:
    """A submission's kernel to come, from ``server``: what :class:`autograder.kernel.WarmKernel` offers
    the runner (``usable``, ``start``, ``close``)."""

    def __init__(self, server: KernelServer, folder: Path, cwd: Path):
        self.server, self.folder, self.cwd, self.env = server, folder, cwd, server.env
        self.taken = False

    def usable(self, env: Mapping[str, str], cwd: Path) -> bool:
        return (not self.taken and self.server.process.poll() is None and dict(env) == self.env
                and cwd == self.cwd and self.server.isolated())

    def start(self, kernel_args: Sequence[str]) -> ServedKernel:
        self.taken = True
        return self.server.start(self.folder, self.cwd, kernel_args, self.folder / "kernel" / "kernel-warm.log")

    def close(self) -> None:
        self.server.finish()
