"""The course's grading side: nbgrader assignments (``autograder.course``) and, in time, the class autograder."""
