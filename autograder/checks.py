"""The check run: the hidden test cells, in the trusted process that decides the scores.

Started (inside its own sandbox) as ``python -m autograder.checks [MODULE...]``
*before* the submission is known: it imports torch, the grading library and the
modules named (the assignment's setup imports), makes
itself non-dumpable (no process of the same user may trace it or read its
memory, descriptors or environment) and forks the **zygote**
(:mod:`autograder.trusted.zygote`) from which every process that runs student
code is started -- a fork taken now holds no hidden test, since the job has not
been read.  Then it says ``ready`` and waits for its job on stdin.  With
``--serve`` it stays for the worker's next submissions: every job runs in a
fork of the warm process taken before that job is read (:func:`_serve`), so a
worker imports torch for its checks once, not once per submission.

The job (JSON, see :meth:`autograder.notebook.Prepared.check_job`) holds the
instructor's setup cells, the student's solution cells, the hidden test cells,
the submission's time budget, its secret (the seed of every random input,
:mod:`autograder.trusted.seeds`) and the assignment's files (given to each
process that runs the solution, in its working folder).  An assignment of
several notebooks sends one such set of cells per notebook, each run in a
namespace of its own.  The setup and test cells are the
instructor's code and run here; a solution cell never runs here: each name it
defines is bound to a placeholder whose source is that cell, so that a test
cell's ``Student(allreduce)`` (:mod:`autograder.trusted`) loads the student's
cell into a separate process and drives it with plain data.  Each test cell's
outputs are recorded the way a Jupyter kernel would record them (stdout,
stderr, the value of the last expression, the error), except that an error
carries a one-line traceback: frames of a hidden test never leave this process.

Protocol, one JSON line each, on the file descriptor that was stdout at
start-up (file descriptor 1 itself points at ``/dev/null``, so nothing else
written there can corrupt it): ``{"ready": true, ...}``; after the job was
read (one JSON line on stdin), ``{"start": grade_id}`` before and ``{"test": grade_id,
"notebook": name, "outputs": [...], "seconds": s}`` after each test cell, so that the results
of the cells that finished survive if this process dies; and last
``{"done": true, "setup_error": ..., "isolation": [...]}``.  With ``--serve``, a job whose process died
before ``done`` is followed at once by ``{"died": "killed by SIGKILL"}`` from the warm process.
"""

from __future__ import annotations

import ast
import contextlib
import gc
import io
import json
import linecache
import os
import select
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, TextIO


def _register(filename: str, source: str) -> None:
    """Make ``source`` findable by :mod:`linecache` (and ``inspect.getsource``) under ``filename``."""
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)


def _placeholder(name: str, filename: str) -> Any:
    """A function whose code claims to come from ``filename``: :func:`autograder.trusted.solution_parts` finds
    the cell.

    Classes get a function placeholder too: a hidden test only hands it to
    :class:`autograder.trusted.Student`, which looks for the defining cell.
    """
    namespace: dict[str, Any] = {}
    code = compile(f"def {name}(*args, **kwargs):\n    raise RuntimeError('the solution runs only in its own process: "
                   "use autograder.trusted.Student')\n", filename, "exec")
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


def run_notebook_job(job: Mapping[str, Any], emit: Callable[[dict[str, Any]], None] = lambda line: None,
                     notebook: str = "") -> tuple[dict[str, Any], str | None]:
    """One notebook's setup cells, solution placeholders, then every test cell, in a namespace of its own.

    Returns the outputs and seconds per test cell and the first setup error.  ``emit`` receives each
    progress line (``start``, ``test``) as it happens.
    """
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
        emit({"start": cell["grade_id"], "notebook": notebook})
        start = time.perf_counter()
        outputs = run_cell(cell["source"], f"<test {cell['grade_id']}>", namespace)
        tests[cell["grade_id"]] = {"outputs": outputs, "seconds": time.perf_counter() - start}
        emit({"test": cell["grade_id"], "notebook": notebook, **tests[cell["grade_id"]]})
    return tests, setup_error


def run_job(job: Mapping[str, Any], emit: Callable[[dict[str, Any]], None] = lambda line: None) -> dict[str, Any]:
    """Every notebook of the job (``notebooks``: ``[{name, setup, solutions, tests}]``, or one notebook's
    fields at the top level); ``tests`` maps notebook -> grade id -> outputs and seconds."""
    from autograder.trusted import seeds, student

    student.set_deadline(job.get("budget"))
    seeds.set_secret(job.get("secret"))
    student.set_files({k: bytes.fromhex(v) for k, v in (job.get("files") or {}).items()})
    notebooks = job["notebooks"] if "notebooks" in job else [{"name": "", **job}]
    tests: dict[str, Any] = {}
    setup_error = None
    for nb_job in notebooks:
        name = str(nb_job.get("name", ""))
        tests[name], error = run_notebook_job(nb_job, emit, name)
        setup_error = setup_error or error
    return {"tests": tests, "setup_error": setup_error, "isolation": sorted(student.isolations)}


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


def _prepare(setup_imports: list[str]) -> None:
    """Import what the checks use and stop being traceable; before any job arrives.

    ``setup_imports``: the modules the assignment's setup cells import (visible to students: nothing
    secret), imported now so that neither the setup cells nor a host pays for them.
    """
    import importlib

    import dlperf.cluster  # noqa: F401
    from autograder.trusted import zygote

    zygote.preload()             # torch and what the hosts use: in this process and, through the fork, in each host
    for name in setup_imports:
        with contextlib.suppress(Exception):   # the setup cell's own import reports a failure
            importlib.import_module(name)
    zygote.make_non_dumpable()   # no ptrace, no /proc/<pid>/mem, fd or environ for the student's processes
    from dlperf.grading.host import index_globals

    index_globals()              # once here, not in every host (see forbid)


def _fork_zygote() -> str:
    """The zygote: a fork of this process taken now, when it holds no hidden test (the job is not read
    yet) and no CUDA context (nothing touched CUDA yet), so the hosts it forks may use the GPU."""
    from autograder.trusted import zygote

    made = zygote.Zygote.fork()
    zygote.set_zygote(made)
    return made.how


#: A job's process found no job (the grader closed stdin): the server stops.
NO_MORE_JOBS = 3


def _one_job(reply: TextIO, warm_up_seconds: float) -> int:
    """Fork the zygote, say ``ready``, read one job (a JSON line), run it, say ``done``."""
    server = _fork_zygote()
    try:
        reply.write(json.dumps({"ready": True, "warm_up_seconds": warm_up_seconds, "zygote": server,
                                **_device()}) + "\n")
        reply.flush()
    except OSError:          # BrokenPipeError: nobody reads the replies any more, the grader is gone
        return NO_MORE_JOBS
    line = sys.stdin.buffer.readline()
    if not line.strip():
        return NO_MORE_JOBS
    job = json.loads(line)

    def emit(line: dict[str, Any]) -> None:
        reply.write(json.dumps(line) + "\n")
        reply.flush()

    result = run_job(job, emit)
    emit({"done": True, "setup_error": result["setup_error"], "isolation": result["isolation"]})
    return 0


def _death(status: int) -> str:
    """How a job's process ended, in words (``killed by SIGBUS``, ``exit code 1``)."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exit code {os.WEXITSTATUS(status)}" if os.WIFEXITED(status) else "ended"


def _in_sandbox_pid_namespace() -> bool:
    """True where PID 1 is bubblewrap's: every other process we may signal belongs to this sandbox."""
    try:
        with open("/proc/1/comm", encoding="utf-8") as f:
            return f.read().strip() == "bwrap"
    except OSError:
        return False


def kill_the_rest(in_sandbox: bool) -> None:
    """Between two submissions of a kept server: kill every process of its sandbox but itself and the
    sandbox's init (where ``in_sandbox``: the PID namespace is the sandbox's), then reap its children."""
    if in_sandbox:
        with contextlib.suppress(OSError):
            os.kill(-1, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _grader_gone(reply: TextIO) -> bool:
    """True once the grader has closed both ends (it ended, or was killed): no job can come and no reply
    can be read.  A server that went on forking job processes then would spin, each one failing at once
    (a check run whose bubblewrap outlived its grader did, at 100% of a core, for the rest of a test run)."""
    poller = select.poll()
    poller.register(sys.stdin.fileno(), select.POLLIN)
    poller.register(reply.fileno(), select.POLLOUT)
    events = dict(poller.poll(0))
    no_jobs = bool(events.get(sys.stdin.fileno(), 0) & select.POLLHUP) and not (
        events.get(sys.stdin.fileno(), 0) & select.POLLIN)
    no_reader = bool(events.get(reply.fileno(), 0) & select.POLLERR)
    return no_jobs or no_reader


def _serve(reply: TextIO, warm_up_seconds: float) -> int:
    """One job after the other, each in a fork of this process taken before its job is read.

    This process never reads a job: what a job's process learnt (hidden tests, expected values, the
    student's code) dies with it.  Between two jobs every other process of the sandbox (hosts and
    whatever they left behind) is killed, so the next submission starts from a clean sandbox, as
    with a fresh check run, without paying for the interpreter and torch's import again.
    """
    clean = _in_sandbox_pid_namespace()
    while True:
        if _grader_gone(reply):
            return 0
        gc.freeze()   # a job's collections walk only what it made, not torch's objects (see zygote._zygote_main)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _one_job(reply, warm_up_seconds)
            finally:
                with contextlib.suppress(Exception):
                    reply.flush()
                os._exit(code)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = 0
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) in (0, NO_MORE_JOBS)):
            # The job's process died before it said "done" (a signal, its memory limit): say so at once,
            # so that the worker records it now instead of waiting out the submission's time limit.
            with contextlib.suppress(Exception):
                reply.write(json.dumps({"died": _death(status)}) + "\n")
                reply.flush()
        kill_the_rest(clean)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == NO_MORE_JOBS:
            return 0


def main() -> int:
    """``python -m autograder.checks [--serve] [MODULE...]``: one job, or (``--serve``) one after the other."""
    reply: TextIO = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - lives as long as the process
    args = sys.argv[1:]
    serve = bool(args) and args[0] == "--serve"
    start = time.perf_counter()
    _prepare(args[1:] if serve else args)
    warm_up_seconds = time.perf_counter() - start
    if serve:
        return _serve(reply, warm_up_seconds)
    code = _one_job(reply, warm_up_seconds)
    return 0 if code == NO_MORE_JOBS else code


if __name__ == "__main__":
    sys.exit(main())
