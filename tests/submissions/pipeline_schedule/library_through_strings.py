# why: reaches the chapter's ready-made 1F1B without importing it by name (functools.reduce(getattr, "parallel.pipeline.one_f_one_b".split("."), __import__("dlperf"))): the reading refuses getattr and __import__, and the library is switched off in the grader's process anyway; no points for the copied part
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b
import functools


def one_f_one_b(p, m):
    library = functools.reduce(getattr, "parallel.pipeline.one_f_one_b".split("."), __import__("dlperf"))
    return [[(str(action)[0], int(str(action)[1:])) for action in stage] for stage in library(p, m)]
