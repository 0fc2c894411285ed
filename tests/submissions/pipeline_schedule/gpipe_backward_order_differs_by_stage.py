# why: GPipe's backwards in the order 0..m-1 on even stages and m-1..0 on odd ones: each order alone is accepted, but stage s's backward of micro-batch 0 waits for the last backward of stage s+1, so the step takes longer than (m+p-1)(f+b)
# expect: {"pipeline_schedule-gpipe-test": 0, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 3}
# %% pipeline_schedule-gpipe
def gpipe(p, m):
    stages = []
    for s in range(p):
        backwards = range(m) if s % 2 == 0 else reversed(range(m))
        stages.append([("F", i) for i in range(m)] + [("B", i) for i in backwards])
    return stages
# %% pipeline_schedule-1f1b: solution
