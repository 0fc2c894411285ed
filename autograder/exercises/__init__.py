"""The checker's side of the project's own exercises: how each one's inputs are made and its results judged.

One module per exercise, imported by that exercise's hidden test cells (which
hold the cases).  Everything here runs in the trusted process (the check run,
or under plain ``nbgrader autograde`` the kernel); the student's code runs in
hosts driven through :mod:`autograder.trusted`.
"""
