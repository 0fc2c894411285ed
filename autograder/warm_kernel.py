"""A Jupyter kernel started before its submission is known: ``python -m autograder.warm_kernel MODULE...``.

Run inside the student's sandbox of a warm slot (:mod:`autograder.slots`), it
imports ipykernel and the modules named on its command line (the imports of the
assignment's setup cells, which the notebook runs first anyway; with torch, also
the part of torch its first ``optimizer.step()`` would import), then waits.
When the submission's notebook is about to run, the runner writes the kernel's
command line (``-f <connection file> ...``) as one JSON line on its stdin; it
becomes that kernel (:class:`autograder.kernel.WarmKernel` is the runner's
side).  So the interpreter's start, ipykernel's imports and torch's are paid
while the previous submission runs, not by this one.

A module that fails to import is skipped: the notebook's own ``import`` will
report the error where the student sees it.  Nothing is bound in the kernel's
namespace (the modules are only in ``sys.modules``).
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


def main(argv: list[str]) -> int:
    from ipykernel import kernelapp

    # torch imports torch._dynamo on a process's first optimizer.step() (about a second on the CI machine)
    for name in [*argv, "torch._dynamo"] if "torch" in argv else argv:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001, S110 - the notebook's own import reports it
            pass
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
