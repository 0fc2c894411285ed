# why: 1F1B calls a helper defined in the GPipe cell: it runs in the notebook, but the grader loads each solution cell on its own (and its reading, like the self-check's, refuses a name the cell does not define)
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe
def forwards(first, last):
    return [("F", i) for i in range(first, last)]


def gpipe(p, m):
    return [forwards(0, m) + [("B", i) for i in reversed(range(m))] for _ in range(p)]
# %% pipeline_schedule-1f1b
def one_f_one_b(p, m):
    stages = []
    for s in range(p):
        warmup = min(p - s - 1, m)
        ops = forwards(0, warmup)
        for k in range(m - warmup):
            ops += [("F", warmup + k), ("B", k)]
        stages.append(ops + [("B", i) for i in range(m - warmup, m)])
    return stages
