"""The student run: one notebook executed by a Jupyter kernel inside the submission's sandbox.

The kernel talks to the runner over unix sockets in the job's folder (the
sandbox has no network); every cell has a time limit, the whole submission a
deadline, and the output kept is capped.  The outcome says how it ended:
``graded`` (it ran to the end, errors in cells included), ``timed out``,
``crashed`` (the kernel died: memory limit, segfault, ``os._exit``) or
``infrastructure failure`` (the kernel could not start).
"""

from __future__ import annotations

import contextlib
import functools
import json
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from . import notebook as nbtools
from .sandbox import Sandbox

__all__ = ["KernelChoice", "KernelUnavailable", "WarmKernel", "choose_kernel", "run_notebook"]


class WarmKernel:
    """A kernel process started in a slot before its submission (:mod:`autograder.warm_kernel`).

    It has imported ipykernel and ``preload`` (the assignment's setup imports) in the sandbox, with
    the kernel's environment and working folder, and waits on stdin for the kernel's arguments.
    """

    def __init__(self, sandbox: Sandbox, workdir: Path, cwd: Path, env: Mapping[str, str], preload: Sequence[str]):
        self.env = dict(env)
        self.cwd = cwd
        self.log = open(workdir / "kernel-warm.log", "wb")  # noqa: SIM115 - closed in close()
        argv = sandbox.command([sys.executable, "-m", "autograder.warm_kernel", *preload], self.env)
        self.process = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=self.log, stderr=self.log,
                                        cwd=str(cwd), start_new_session=True)
        self.taken = False

    def usable(self, env: Mapping[str, str], cwd: Path) -> bool:
        return not self.taken and self.process.poll() is None and dict(env) == self.env and cwd == self.cwd

    def start(self, kernel_args: Sequence[str]) -> subprocess.Popen:
        """Become the kernel with these arguments (``-f <connection file> ...``)."""
        assert self.process.stdin is not None
        self.taken = True
        self.process.stdin.write((json.dumps(list(kernel_args)) + "\n").encode())
        self.process.stdin.close()
        return self.process

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(5)
        self.log.close()


class KernelUnavailable(Exception):
    """The kernel a notebook names cannot run here: not installed, or not runnable in the sandbox."""


@dataclass(frozen=True)
class KernelChoice:
    """The kernel a notebook runs in: its kernelspec's name, the variables it adds, whether it is this
    Python's own ipykernel (which a warm kernel can stand in for)."""

    name: str
    env: dict[str, str]
    native: bool


def choose_kernel(nb: nbformat.NotebookNode, sandbox: Sandbox) -> KernelChoice:
    """The kernel ``nb`` names (the instructor's kernelspec, which grading puts on the submission as
    nbgrader's ``OverwriteKernelspec`` does; ``python3`` where it names none), found as nbgrader finds
    it (jupyter_client's search path: ``JUPYTER_PATH``, the user's and the environment's data folders).

    The folders the kernelspec needs (its own folder, the paths in its ``env``) are shown to the
    sandbox read-only; :class:`KernelUnavailable` says why a kernel cannot be used: not installed
    ("no kernel named ir"), a program the sandbox does not show, or a path on it that holds what the
    sandbox hides from student code (the course root, the gradebook)."""
    import os
    import shutil

    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    from .sandbox import _normal, _under

    name = str((nb.metadata.get("kernelspec") or {}).get("name") or "python3")
    if name == "python":
        name = "python3"                            # as jupyter_client's KernelManager maps it
    try:
        spec = KernelSpecManager().get_kernel_spec(name)
    except NoSuchKernel:
        raise KernelUnavailable(f"no kernel named {name} (nbgrader: 'No such kernel named {name}'): its kernelspec "
                                "is not installed where the grader looks (JUPYTER_PATH, the Jupyter data folders)"
                                ) from None
    program = spec.argv[0] if spec.argv else ""
    if program in {"python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}"}:
        program = sys.executable                    # as jupyter_client runs it
    program = shutil.which(program) or program
    env = {str(k): str(v) for k, v in (spec.env or {}).items()}
    wanted = [Path(spec.resource_dir)]
    for value in env.values():
        wanted += [Path(part) for part in value.split(os.pathsep) if os.path.isabs(part) and os.path.exists(part)]
    for path in _normal(wanted):
        inside = [h for h in sandbox.hide if h == path or h.is_relative_to(path)]
        if inside:
            raise KernelUnavailable(f"the kernel {name} needs {path}, which holds {inside[0]}: the sandbox hides "
                                    "that from student code")
    sandbox.expose = _normal([*sandbox.expose, *wanted])
    if sandbox.enabled and not os.path.isabs(program):
        raise KernelUnavailable(f"the kernel {name} runs {spec.argv[0]!r}, which is not found on the grader's PATH")
    if sandbox.enabled and not _under(Path(os.path.realpath(program)), sandbox.visible()) \
            and not _under(Path(program), sandbox.visible()):
        raise KernelUnavailable(f"the kernel {name} runs {program}, which the sandbox does not show (it shows the "
                                "system's folders, the grader's Python and the kernelspec's own paths)")
    native = not env and os.path.realpath(program) == os.path.realpath(sys.executable) \
        and "ipykernel_launcher" in spec.argv
    return KernelChoice(name, env, native)


def _kernel_manager(sandbox: Sandbox, workdir: Path, env: Mapping[str, str], name: str,
                    warm: WarmKernel | None = None, kernel: KernelChoice | None = None) -> Any:
    from jupyter_client import AsyncKernelManager

    class SandboxedKernelManager(AsyncKernelManager):
        """A kernel started through the sandbox, talking over unix sockets in the job's folder.

        Interrupts are sent as messages: a SIGINT would reach bwrap, not the kernel, and end both.
        With a ``warm`` kernel, launching it hands the connection file to that waiting process
        instead of starting a new one.
        """

        inner: list[str] = []

        @property
        def kernel_spec(self) -> Any:
            spec = super().kernel_spec
            if spec is not None:
                spec.interrupt_mode = "message"
            return spec

        def format_kernel_cmd(self, extra_arguments: list[str] | None = None) -> list[str]:
            # jupyter_client has just written the connection file (mode 0600): command() hands the
            # workdir, the file included, over to the sandbox's user.
            self.inner = super().format_kernel_cmd(extra_arguments)
            return sandbox.command(self.inner, kernel_env)

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            module = self.inner.index("ipykernel_launcher") if "ipykernel_launcher" in self.inner else -1
            cwd = Path(kw.get("cwd") or ".")
            if warm is None or module < 0 or not choice.native or not warm.usable(kernel_env, cwd):
                return await super()._async_launch_kernel(kernel_cmd, **kw)
            provisioner = self.provisioner
            assert provisioner is not None
            process = warm.start(self.inner[module + 1:])
            provisioner.process = process
            provisioner.pid = process.pid
            # a session (and process group) of its own; a served kernel's signals go through its server
            provisioner.pgid = getattr(process, "pgid", process.pid)
            provisioner.cwd = str(cwd)
            self._reconcile_connection_info(provisioner.connection_info)

    # The kernelspec's variables over the sandbox's (nbgrader's kernel gets them over its own environment).
    choice = kernel or KernelChoice("python3", {}, True)
    kernel_env = {**env, **choice.env}
    ipc = workdir / f"ipc-{name}"
    ipc.mkdir(exist_ok=True)
    return SandboxedKernelManager(kernel_name=choice.name, transport="ipc", ip=str(ipc / "k"),
                                  connection_file=str(workdir / f"kernel-{name}.json"))


def _release(client: Any, km: Any) -> None:
    """Free what the run held in this process: nbclient leaves a kernel manager it was handed to its owner
    (no shutdown, no cleanup), so its client's channels (a heartbeat thread) and both zmq contexts (two
    threads each) would stay for the worker's life, a few per submission.  The kernel itself ends with its
    sandbox.  (The manager's own ``cleanup_resources`` is a coroutine on this asynchronous manager, and
    ``cleanup_kc=True`` would also shut the kernel down through its provisioner, which a warm kernel's
    process is not started by: the two releases are done here.)"""
    kc = getattr(client, "kc", None)
    with contextlib.suppress(Exception):
        if kc is not None:
            kc.stop_channels()
    with contextlib.suppress(Exception):
        km._close_control_socket()
    with contextlib.suppress(Exception):
        if km._created_context and not km.context.closed:
            km.context.destroy(linger=0)


@functools.cache
def _client_class() -> Any:
    from nbclient import NotebookClient

    class CappedClient(NotebookClient):
        """nbclient, keeping at most ``output_limit`` bytes of output for the whole notebook."""

        output_limit: int = 2 * 2**20
        kept = 0
        dropped = 0
        current: int | None = None      # index of the cell being executed
        timed_out: list[int] = []       # cells interrupted for running past the limit
        first_cell_at: float | None = None   # when the kernel was ready and the first cell was sent
        cell_seconds: dict[int, float] = {}  # cell index -> seconds it ran

        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.on_cell_executed = _record_hidden_errors

        async def _async_handle_timeout(self, timeout: int, cell: Any = None) -> Any:
            if self.interrupt_on_timeout and self.current is not None:
                self.timed_out = [*self.timed_out, self.current]
            return await super()._async_handle_timeout(timeout, cell)

        async def async_execute_cell(self, cell: Any, cell_index: int, *args: Any, **kwargs: Any) -> Any:
            self.current = cell_index
            start = time.monotonic()
            if self.first_cell_at is None:
                self.first_cell_at = start
            try:
                return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
            finally:
                self.cell_seconds = {**self.cell_seconds, cell_index: time.monotonic() - start}

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


def _record_hidden_errors(cell: Any, execute_reply: dict[str, Any], **kwargs: Any) -> None:
    """An error the kernel replied with but did not show (the student disabled ``showtraceback``) is
    written into the cell anyway, as nbgrader's ``Execute`` does: a failed test cell scores 0."""
    content = execute_reply.get("content", {})
    if content.get("status") != "error":
        return
    if any(o.get("output_type") == "error" and o.get("ename") == content.get("ename") for o in cell.get("outputs", [])):
        return
    traceback = content.get("traceback") or ["ERROR: An error occurred while showtraceback was disabled"]
    cell.setdefault("outputs", []).append(nbformat.v4.new_output(
        "error", ename=content.get("ename", "Error"), evalue=content.get("evalue", ""), traceback=traceback))


def _cell_name(nb: nbformat.NotebookNode, index: int | None) -> str:
    """A cell as the student would find it: its grade id, else its position."""
    if index is None:
        return "?"
    return nbtools.grade_id(nb.cells[index]) or f"#{index + 1}"


def run_notebook(nb: nbformat.NotebookNode, sandbox: Sandbox, workdir: Path, cwd: Path, env: Mapping[str, str],
                 *, cell_timeout: float, output_bytes: int, deadline: float, submission_timeout: float,
                 name: str = "notebook", interrupt: bool = False, clock: dict[str, Any] | None = None,
                 warm: WarmKernel | None = None) -> tuple[nbformat.NotebookNode | None, str, str]:
    """Execute ``nb`` in a sandboxed kernel whose working folder is ``cwd``; (notebook, outcome, reason).

    ``interrupt``: a cell past ``cell_timeout`` is interrupted and the next cells run (nbgrader's
    way; the outcome is then ``timed out`` with the notebook's results); otherwise the run stops there.
    ``clock`` receives where the time went: ``kernel start`` (seconds until the kernel took its first
    cell) and ``cells`` (cell index -> seconds).  ``warm``: a kernel already started for this run
    (used when its environment and folder are these; else a kernel is started now).
    """
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    where = "" if name == "notebook" else f" of {name}.ipynb"
    try:
        kernel = choose_kernel(nb, sandbox)
    except KernelUnavailable as exc:
        # Never a 0 "graded": the grader cannot run this notebook as nbgrader would (re-run once it can).
        return None, "infrastructure failure", f"{name}.ipynb: {exc}" if where else str(exc)
    km = _kernel_manager(sandbox, workdir, env, name, warm, kernel)
    client = _client_class()(nb, km=km,
                             timeout=int(cell_timeout),
                             allow_errors=True, startup_timeout=120, shutdown_kernel="immediate",
                             interrupt_on_timeout=interrupt, resources={"metadata": {"path": str(cwd)}})
    client.output_limit = output_bytes
    fired = threading.Event()

    def expire() -> None:
        fired.set()
        sandbox.kill()

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), expire)
    timer.daemon = True
    timer.start()
    log = open(workdir / f"kernel-{name}.log", "wb")  # noqa: SIM115 - the kernel's own stdout/stderr
    began = time.monotonic()
    try:
        client.execute(stdout=log, stderr=log)
    except CellTimeoutError:
        return nb, "timed out", f"cell {_cell_name(nb, client.current)}{where} ran past the {cell_timeout:g} s limit"
    except DeadKernelError:
        if fired.is_set():
            return nb, "timed out", f"the submission ran past the {submission_timeout:g} s limit"
        stats = sandbox.stats()
        if stats.get("oom_killed"):
            return nb, "crashed", (f"the kernel was killed in cell {_cell_name(nb, client.current)}{where}: "
                                   "memory limit exceeded")
        return nb, "crashed", f"the kernel died in cell {_cell_name(nb, client.current)}{where}"
    except Exception as exc:  # noqa: BLE001 - a kernel that cannot start is the runner's failure
        if fired.is_set():
            return nb, "timed out", f"the submission ran past the {submission_timeout:g} s limit"
        return None, "infrastructure failure", f"the student's kernel failed: {type(exc).__name__}: {exc}"
    finally:
        timer.cancel()
        log.close()
        _release(client, km)
        if clock is not None:
            clock["kernel start"] = (client.first_cell_at or time.monotonic()) - began
            clock["cells"] = dict(client.cell_seconds)
    if client.timed_out:
        cells = ", ".join(_cell_name(nb, i) for i in client.timed_out)
        return nb, "timed out", f"cell {cells}{where} ran past the {cell_timeout:g} s limit (interrupted; the cells after it ran)"
    return nb, "graded", ""
