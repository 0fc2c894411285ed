"""``autograder doctor``: can this node grade?  Every ingredient of grading, checked for real, in one table.

Run it on each runner before a class is sent there (``autograder doctor``, or
``autograder doctor --gpu`` on a GPU runner, where a missing GPU is then a
failure).  Each line is one check with its verdict:

* ``OK`` -- works as grading needs it;
* ``WARN`` -- grading works, but weaker than it should be (say which);
* ``FAIL`` -- grading cannot work, or would be wrong, here;
* ``NO GPU`` -- the check needs a GPU and the node has none (a failure with ``--gpu``);
* ``N/A`` -- does not apply to this node (NCCL with fewer than two GPUs), or
  was not run because something it needs failed (said which).

The checks, in order: the Python stack (torch, nbgrader, Dask, ... importable,
with their versions); the sandbox (bubblewrap and its namespaces,
:func:`autograder.sandbox.check_available`); the limits in force (a memory hog
and a fork loop run in a real sandbox with small limits, and must be stopped);
the processes that run student code for the hidden checks
(:class:`autograder.trusted.Student`, started here, and reported again from
inside each reference grade's check run, where the zygote forks them); the GPUs
(``nvidia-smi`` and torch); CUDA inside a sandbox as the student's kernel sees
it; ``CUDA_VISIBLE_DEVICES`` of the engine's local Dask workers (one per GPU);
NCCL between two processes (where there are two GPUs); the gradebook (SQLite
writable, PostgreSQL reachable); and a timed grade of the reference solution of
every exercise by the class autograder's own runner
(:func:`autograder.runner.grade`, jobs made by :func:`autograder.engine.make_jobs`,
scored by nbgrader's rules), which must get full marks.

The exit status is 0 when the node can grade (on CPU only, when it has no GPU
and ``--gpu`` was not given: the verdict says what that means), 1 when it cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import course
from .gpus import check_cuda_in_sandbox, check_gpus, check_nccl, check_worker_pinning, gpu_inventory, nccl_sum
from .node import check_gradebook, check_limits, check_sandbox, check_stack, check_student_process
from .references import check_reference, grade_reference, why_lost
from .report import FAIL, NA, NO_GPU, OK, WARN, Line, Report, _timed

def diagnose(*, db_url: str, settings: Any, gpu_required: bool = False, exercises: list[str] | None = None,
             progress: Callable[[Line], None] | None = None) -> Report:
    """Run every check (the references of ``exercises``; all by default, none with ``[]``)."""
    lines: list[Line] = []
    say = progress or (lambda line: None)

    def run(check: str, fn: Callable[..., None], *args: Any) -> Line:
        with _timed(lines, check) as slot:
            fn(slot, *args)
        say(lines[-1])
        return lines[-1]

    def put(check: str, verdict: str, why: str) -> None:       # a line decided without running anything
        lines.append(Line(check, verdict, why))
        say(lines[-1])

    stack = run("python stack", check_stack)
    # The grades run as the class would: in sandboxes, or without them where --no-sandbox says so.
    sandbox_ok = True
    if not settings.sandbox:
        put("sandbox (bubblewrap)", WARN, "--no-sandbox: student code would run NOT sandboxed, with the grader's "
            "view of the machine and the network")
        put("limits in force", NA, "not checked: --no-sandbox")
    else:
        sandbox_ok = run("sandbox (bubblewrap)", check_sandbox).verdict == OK
        if sandbox_ok:
            run("limits in force", check_limits)
        else:
            put("limits in force", NA, "not checked: no sandbox")
    if stack.verdict != OK:
        put("student processes", NA, "not checked: the Python stack is broken")
    else:
        run("student processes", check_student_process)
    info = gpu_inventory() if stack.verdict == OK else {"smi": [], "torch_count": 0, "driver": None, "error": None}
    gpus = info["torch_count"]
    run("GPUs", check_gpus, info, gpu_required)
    if not gpus:
        put("CUDA in the sandbox", FAIL if gpu_required else NO_GPU, "no GPU")
    elif not settings.sandbox or not sandbox_ok:
        put("CUDA in the sandbox", NA, "not checked: no sandbox")
    else:
        run("CUDA in the sandbox", check_cuda_in_sandbox, settings.memory_bytes, settings.processes)
    run("worker GPU pinning", check_worker_pinning, gpus)
    if gpu_required and not gpus:
        put("NCCL (2 GPUs)", FAIL, "no GPU: --gpu asks for one")
    else:
        run("NCCL (2 GPUs)", check_nccl, gpus)
    run("gradebook", check_gradebook, db_url)
    for assignment in course.assignments() if exercises is None else exercises:
        if stack.verdict != OK or not sandbox_ok:
            put(f"grade {assignment}", NA, "not graded: " + ("the Python stack is broken" if stack.verdict != OK
                                                             else "no sandbox"))
        else:
            run(f"grade {assignment}", check_reference, assignment, settings, gpus)
    return Report(lines, gpus, gpu_required)


def run_doctor(args: argparse.Namespace) -> int:
    """``autograder doctor`` (options resolved by :func:`autograder.options.resolve`)."""
    from ..options import db_url as _db_url
    from ..options import settings as _settings

    settings = _settings(args)
    exercises = None if args.exercises is None else [e for e in args.exercises.split(",") if e]
    unknown = sorted(set(exercises or []) - set(course.assignments()))
    if unknown:
        raise ValueError(f"no exercise {', '.join(unknown)} (there are: {', '.join(course.assignments())})")
    print(f"autograder doctor on {socket.gethostname()} ({os.cpu_count()} cores, {platform.platform()}): "
          f"can this node grade?{' (--gpu: a GPU is required)' if args.gpu else ''}", flush=True)

    def progress(line: Line) -> None:
        # the detail at once where something is wrong: a run cut short (a lent GPU's time) still says why
        why = f": {line.detail}" if line.verdict not in (OK, NA) and line.detail else ""
        print(f"  {line.check}: {line.verdict} ({line.seconds:.1f} s){why}", flush=True)

    report = diagnose(db_url=_db_url(args), settings=settings, gpu_required=args.gpu, exercises=exercises,
                      progress=progress)
    print()
    print(report.table())
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=1, default=str) + "\n")
    return 0 if report.can_grade else 1


__all__ = ["FAIL", "NA", "NO_GPU", "OK", "WARN", "Line", "Report", "check_gradebook", "diagnose", "gpu_inventory",
           "grade_reference", "nccl_sum", "run_doctor", "why_lost"]
