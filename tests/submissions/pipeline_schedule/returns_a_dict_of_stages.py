# why: 1F1B returned as a dict {stage: operations} instead of a list of p lists: the format is the contract, so none of part 2's cells can grade it
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b
def one_f_one_b(p, m):
    stages = {}
    for s in range(p):
        warmup = min(p - s - 1, m)
        ops = [("F", i) for i in range(warmup)]
        for k in range(m - warmup):
            ops += [("F", warmup + k), ("B", k)]
        stages[s] = ops + [("B", i) for i in range(m - warmup, m)]
    return stages
