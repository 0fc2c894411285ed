"""The student-facing side of the graded exercises: self-checks, and the process that runs student code.

* :class:`SelfCheck` -- the *visible* self-check cells of an exercise: a table
  of what the student's code produced beside what was expected, and an
  ``AssertionError`` naming the first mismatch.
* :mod:`dlperf.grading.host` -- the process in which a hidden check runs the
  student's solution: it answers requests made of plain data
  (:mod:`dlperf.grading.wire`) and holds nothing of the check.
* :mod:`dlperf.grading.relay` -- a rank's end of a process group whose every
  message goes through the grader (point-to-point only).
* :mod:`dlperf.grading.probes` -- public code that exercises a student's objects
  the same way on both sides (the student's in the host, the reference in the
  checker).

The checks themselves, the expected values and the verdicts live on the other
side of the boundary, in :mod:`autograder.trusted`.
"""

from .selfcheck import SelfCheck

__all__ = ["SelfCheck"]
