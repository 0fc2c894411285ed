"""The check run: the hidden test cells, executed in a process where no student code runs.

Started (inside the submission's sandbox) as ``python -m autograder.checks``
*before* the submission is known: it imports torch and the grading library and
starts the fork server from which every hidden check forks, then says
``ready`` and waits for its job on stdin.  A worker keeps one warm for the next
submission, so the imports are off the critical path.

The job (JSON, see :meth:`autograder.notebook.Prepared.check_job`) holds the
instructor's setup cells, the student's solution cells and the hidden test
cells.  The setup and test cells are the instructor's code and are executed
here; a solution cell is **not** executed here: each name it defines is bound to
a placeholder whose source is that cell, so that the test cell's
``isolated(check, allreduce, ...)`` runs the student's cell in a fresh child
process, as it does in the notebook.  Each test cell's outputs are recorded the
way a Jupyter kernel would (stdout, stderr, the value of the last expression,
the error), except that an error carries a one-line traceback: frames of a
hidden test cell never leave this process.

Protocol: one line ``{"ready": true, ...}`` then, after the job was read
until EOF, one JSON line with ``{"tests": {grade_id: {"outputs": [...],
"seconds": s}}, "setup_error": ...}``, on the file descriptor that was stdout
at start-up (file descriptor 1 itself is pointed at ``/dev/null``, so nothing
else written there can corrupt the reply).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import linecache
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO


def _register(filename: str, source: str) -> None:
    """Make ``source`` findable by :mod:`linecache` (and ``inspect.getsource``) under ``filename``."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def _placeholder(name: str, filename: str) -> Any:
    """A function whose code claims to come from ``filename``: :func:`solution_source` finds the cell.

    Classes get a function placeholder too: the hidden test only hands it to
    :func:`dlperf.grading.isolated`, which looks for the defining cell.
    """
    namespace: dict[str, Any] = {}
    code = compile(f"def {name}(*args, **kwargs):\n    raise RuntimeError('the solution runs only inside the "
                   "hidden check')\n", filename, "exec")
    exec(code, namespace)  # noqa: S102 - our own two lines
    return namespace[name]


class _Capture(io.TextIOBase):
    def __init__(self, limit: int = 100_000):
        self.parts: list[str] = []
        self.size = 0
        self.limit = limit

    def write(self, text: str) -> int:
        if self.size < self.limit:
            self.parts.append(text[: self.limit - self.size])
            self.size += len(text)
        return len(text)

    def value(self) -> str:
        text = "".join(self.parts)
        return text + ("\n[output truncated]\n" if self.size > self.limit else "")


def run_cell(source: str, filename: str, namespace: dict[str, Any]) -> list[dict[str, Any]]:
    """Execute one instructor cell; its outputs as a kernel would report them (one-line tracebacks)."""
    _register(filename, source)
    outputs: list[dict[str, Any]] = []
    out, err = _Capture(), _Capture()
    result: Any = None
    error: BaseException | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            tree = ast.parse(source, filename)
            last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            if last is not None:
                tree.body = tree.body[:-1]
            exec(compile(tree, filename, "exec"), namespace)  # noqa: S102 - the instructor's cell
            if last is not None:
                result = eval(compile(ast.Expression(last.value), filename, "eval"), namespace)  # noqa: S307
        except BaseException as exc:  # noqa: BLE001 - reported as the cell's error, as a kernel does
            error = exc
    if out.value():
        outputs.append({"output_type": "stream", "name": "stdout", "text": out.value()})
    if err.value():
        outputs.append({"output_type": "stream", "name": "stderr", "text": err.value()})
    if error is not None:
        ename, evalue = type(error).__name__, str(error)
        outputs.append({"output_type": "error", "ename": ename, "evalue": evalue,
                        "traceback": [f"{ename}: {evalue}"]})
    elif result is not None:
        outputs.append({"output_type": "execute_result", "execution_count": None, "metadata": {},
                        "data": {"text/plain": repr(result)}})
    return outputs


def run_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """Setup cells, solution placeholders, then every test cell; outputs and seconds per test cell."""
    from dlperf import grading

    grading.set_deadline(job.get("budget"))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    setup_error = None
    for i, source in enumerate(job["setup"]):
        outputs = run_cell(source, f"<setup-{i}>", namespace)
        errors = [o for o in outputs if o["output_type"] == "error"]
        if errors and setup_error is None:
            setup_error = f"setup cell {i}: {errors[0]['ename']}: {errors[0]['evalue']}"
    for cell in job["solutions"]:
        filename = f"<solution {cell['grade_id']}>"
        _register(filename, cell["source"])
        for name in cell["names"]:
            namespace[name] = _placeholder(name, filename)
    tests: dict[str, Any] = {}
    for cell in job["tests"]:
        start = time.perf_counter()
        outputs = run_cell(cell["source"], f"<test {cell['grade_id']}>", namespace)
        tests[cell["grade_id"]] = {"outputs": outputs, "seconds": time.perf_counter() - start}
    return {"tests": tests, "setup_error": setup_error}


def _device() -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"host": socket.gethostname(), "cuda": False, "device": "cpu",
                            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        if torch.cuda.is_available():
            info.update(cuda=True, device=f"cuda:0 ({torch.cuda.get_device_name(0)})")
    except Exception as exc:  # noqa: BLE001 - a broken driver is reported, not fatal
        info["cuda_error"] = f"{type(exc).__name__}: {exc}"
    return info


def _start_fork_server() -> str:
    """Make this process's fork, taken now, the fork server of :func:`dlperf.grading.isolated`.

    multiprocessing's own fork server is a new interpreter that imports torch
    again (a second of CPU per submission); a fork of this process, taken
    before the job is read (so it holds no hidden test), already has it.  The
    fork runs multiprocessing's own server loop (``forkserver.main``) with
    only its listening socket and liveness pipe open; every check is then
    forked from it, exactly as from multiprocessing's server.  Where the
    interpreter's ``forkserver`` differs from the one this was written against
    (Python 3.10-3.13: no authentication key), multiprocessing starts its own
    server instead.  Returns which one runs.
    """
    import inspect
    from multiprocessing import connection, forkserver, util

    server = forkserver._forkserver
    expected = ["listener_fd", "alive_r", "preload", "main_path", "sys_path"]
    if list(inspect.signature(forkserver.main).parameters) != expected or \
            hasattr(server, "_forkserver_authkey") or server._forkserver_pid is not None:
        forkserver.ensure_running()
        return "multiprocessing's fork server"
    listener = socket.socket(socket.AF_UNIX)
    address = connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    if not util.is_abstract_socket_namespace(address):
        os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the fork server: nothing of the check run's but its two fds (no reply pipe, no job)
        try:
            keep = {0, 1, 2, listener.fileno(), alive_r}
            for fd in sorted(int(n) for n in os.listdir("/proc/self/fd") if int(n) not in keep):
                with contextlib.suppress(OSError):
                    os.close(fd)
            forkserver.main(listener.fileno(), alive_r, [], None, None)
        finally:
            os._exit(0)
    os.close(alive_r)
    listener.close()
    server._forkserver_address = address
    server._forkserver_alive_fd = alive_w
    server._forkserver_pid = pid
    return "a fork of the check run"


def _warm_up() -> str:
    """Import what the checks use and start the fork server, before the job arrives."""
    import torch  # noqa: F401
    from dlperf import cluster, grading, launch  # noqa: F401

    grading._get_context()
    return _start_fork_server()   # before anything touches CUDA: the checks' children may use it


def main() -> int:
    reply: TextIO = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives as long as the process
    start = time.perf_counter()
    server = _warm_up()
    reply.write(json.dumps({"ready": True, "warm_up_seconds": time.perf_counter() - start, "fork_server": server,
                            **_device()}) + "\n")
    reply.flush()
    job = json.loads(sys.stdin.read())
    result = run_job(job)
    reply.write(json.dumps(result) + "\n")
    reply.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
