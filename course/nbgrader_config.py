# nbgrader configuration of the course (https://nbgrader.readthedocs.io).
#
# This folder is nbgrader's course root: the gradebook and the submitted/, autograded/
# and feedback/ folders live here (none of them in git).  The assignments themselves are
# not copied here: the instructor sources (solutions, hidden tests, points) are in
# ../solutions/<assignment>/ and the student versions nbgrader generates from them in
# ../exercises/<assignment>/.  Generate them with `make exercises` (or, from this folder,
# `nbgrader generate_assignment <assignment> --force`); a test fails when exercises/ is stale.
import os

c = get_config()  # noqa: F821 - provided by traitlets when nbgrader loads this file

c.CourseDirectory.course_id = "dlperf"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "../solutions"
c.CourseDirectory.release_directory = "../exercises"

# Only notebooks are assignment files; nothing else in a source folder is copied.
c.CourseDirectory.include = ["*.ipynb"]

# What replaces a solution region in the student version.
c.ClearSolutions.code_stub = {
    "python": "# YOUR CODE HERE\nraise NotImplementedError(\"replace this line with your code\")",
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Grading: hidden tests start several processes; a cell may take a while on a loaded
# two-core machine.  Retries cure the kernel-port race of parallel graders (see
# ../shared/notes/grading.md).
c.Execute.timeout = 180
c.Execute.execute_retries = 2
