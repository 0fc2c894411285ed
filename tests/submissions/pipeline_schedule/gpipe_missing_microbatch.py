# why: GPipe's backwards run over range(m - 1, 0, -1): micro-batch 0 never gets its backward
# expect: {"pipeline_schedule-gpipe-test": 0, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 3}
# %% pipeline_schedule-gpipe
def gpipe(p, m):
    order = [("F", i) for i in range(m)] + [("B", i) for i in range(m - 1, 0, -1)]
    return [list(order) for _ in range(p)]
# %% pipeline_schedule-1f1b: solution
