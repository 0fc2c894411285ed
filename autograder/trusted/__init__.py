"""The trusted side of a hidden check: it holds the check, the expected values and the verdict.

Nothing in this package runs student code.  A hidden test cell uses it to drive
the student's solution in a separate process (:mod:`dlperf.grading.host`) with
plain data, to compute the reference values itself and to decide:

* :class:`Student` -- one process with the student's solution cells: calls,
  kept objects (:class:`Handle`), memory this side owns (:meth:`Student.share`),
  objects and functions of this side (:class:`Remote`, callbacks);
* :class:`Ranks` -- several such processes as the ranks of a process group
  whose every message the :class:`~autograder.trusted.relay.Relay` here routes,
  counts and times;
* :func:`seed` -- the seeds of a check's random inputs: new for every
  submission under the class autograder, fixed elsewhere;
* :class:`CheckFailed` / :class:`StudentRaised` -- what a failed check raises
  (its message is what the student reads).

The processes are started by a zygote (:mod:`autograder.trusted.zygote`) that
never held a secret, each in namespaces of its own where the kernel allows.
"""

from .compare import difference, expect_same, show
from .ranks import Ranks
from .seeds import seed, set_secret
from .student import (
    CheckFailed,
    Handle,
    Remote,
    SharedTensor,
    Student,
    StudentRaised,
    set_deadline,
    solution_parts,
)

__all__ = [
    "CheckFailed",
    "Handle",
    "Ranks",
    "Remote",
    "SharedTensor",
    "Student",
    "StudentRaised",
    "difference",
    "expect_same",
    "seed",
    "set_deadline",
    "set_secret",
    "show",
    "solution_parts",
]
