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

# Only notebooks are assignment files.  `include` also filters what `nbgrader collect` copies
# from the exchange, and release_feedback needs the submission's timestamp and secret.
c.CourseDirectory.include = ["*.ipynb", "timestamp.txt", "submission_secret.txt"]

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

# Feedback without the hidden tests: nbgrader's ClearHiddenTests removes them from the feedback's
# source, and a traceback cut to 3 entries (the separator line, "... Traceback truncated ...",
# the error message) drops the frames that quote hidden-test lines as context.  Students still
# see each failed check's message.  (max_traceback must be 3: 1 and 2 keep everything, an
# off-by-one in nbgrader 0.9.)  tests/test_student_path.py checks the feedback for leaks.
# (ClearHiddenTestsInTestCells: nbgrader's ClearHiddenTests for the test cells only; nbgrader's own
# looks in every cell, and a student who writes its delimiter text in a cell breaks their feedback.)
from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor  # noqa: E402
from nbgrader.preprocessors import GetGrades  # noqa: E402

from autograder.feedback import ClearHiddenTestsInTestCells  # noqa: E402

c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTestsInTestCells, CSSHTMLHeaderPreprocessor]
c.LimitOutput.max_traceback = 3
