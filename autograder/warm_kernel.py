"""A Jupyter kernel started before its submission is known: ``python -m autograder.warm_kernel MODULE...``.

Run inside the student's sandbox of a warm slot (:mod:`autograder.slots`), it
imports ipykernel and the modules named on its command line (:func:`imports`: the
imports of the assignment's setup cells, which the notebook runs first anyway), then waits.
When the submission's notebook is about to run, the runner writes the kernel's
command line (``-f <connection file> ...``) as one JSON line on its stdin; it
becomes that kernel (:class:`autograder.kernel.WarmKernel` is the runner's
side).  So the interpreter's start, ipykernel's imports and torch's are paid
while the previous submission runs, not by this one.

A module that fails to import is skipped: the notebook's own ``import`` will
report the error where the student sees it.  Nothing is bound in the kernel's
namespace (the modules are only in ``sys.modules``).

With ``--serve`` it stays for the worker's next submissions and forks each one's kernel
(:mod:`autograder.kernel_serve`), so torch is imported once per worker, not once per submission.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys


def _name(name: str) -> None:
    """Say in ``/proc/<pid>/comm`` (what ``ps -o comm`` and ``top`` show) that this process is now a
    submission's kernel, not a warm one waiting (its command line cannot change)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)   # PR_SET_NAME


def imports(setup_imports: tuple[str, ...], trusted: bool) -> tuple[str, ...]:
    """What a warm kernel of an assignment imports: its setup cells' imports, and in nbgrader mode, where
    torch is among them, ``torch._dynamo`` too (torch imports it on a process's first ``optimizer.step()``,
    which hidden tests that train call: 1.3-1.5 s of CPU on the CI machine).  In trusted mode the kernel
    runs the setup and solution cells only (the hidden tests run in the check run), which seldom train,
    and a preload is CPU taken from the submission being graded on a busy machine."""
    if not trusted and "torch" in setup_imports and "torch._dynamo" not in setup_imports:
        return (*setup_imports, "torch._dynamo")
    return tuple(setup_imports)


def _preload(names: list[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S110 - the notebook's own import reports it
            pass


def main(argv: list[str]) -> int:
    from ipykernel import kernelapp

    if argv[:1] == ["--serve"]:
        from .kernel_serve import serve

        _preload(argv[1:])
        return serve(_name)
    _preload(argv)
    line = sys.stdin.readline()
    if not line:
        return 0            # the slot was closed before a submission came
    args = json.loads(line)
    _name("student-kernel")
    sys.argv = ["ipykernel_launcher", *args]
    kernelapp.launch_new_instance()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
