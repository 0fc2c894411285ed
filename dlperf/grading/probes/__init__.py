"""Public probes: code that exercises a solution the same way in the student's process and the checker's.

A probe ``probe(module, *args)`` receives a module (the student's solution in
the host; the reference in the checker) and plain data, runs the module's
objects through a sequence of calls and returns what it observed as plain
data.  The checker runs the same probe on its reference and compares: the
probe holds no expected value and no case (those are in the hidden check).
"""
