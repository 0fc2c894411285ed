"""The course's grading side: the class autograder and the course's nbgrader assignments.

* the ``autograder`` command (``autograder.cli``): collect a class, grade it sandboxed and in parallel
  (``engine``, ``runner``, ``slots``, ``sandbox``; on Slurm through ``slurm``), feedback, export, status,
  the HTML report, ``doctor``;
* ``autograder.trusted``: what decides a grade outside the student's process (hosts started by the
  zygote, the relay between ranks, seeds); ``autograder.exercises``: each exercise's checker;
* ``autograder.course``: the course's own assignments (generate ``exercises/`` from ``solutions/``, check
  staleness, grade fixtures through plain nbgrader).

The pages *Grading a class* and *Trustworthy grades* of the book (``book/grading.md``,
``book/threat-model.md``) describe it for instructors.
"""
