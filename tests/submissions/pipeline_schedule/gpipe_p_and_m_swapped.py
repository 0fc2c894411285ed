# why: GPipe with p and m swapped (one list per micro-batch, operations over the stages): right only when p == m; a TA takes the part's points, 1F1B is untouched
# expect: {"pipeline_schedule-gpipe-test": 0, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 3}
# %% pipeline_schedule-gpipe
def gpipe(p, m):
    return [[("F", i) for i in range(p)] + [("B", i) for i in reversed(range(p))] for _ in range(m)]
# %% pipeline_schedule-1f1b: solution
