# why: no pipelining: every stage runs F0 B0 F1 B1 ...: valid, holds one micro-batch, but the stages take turns, so the step takes about p times as long
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b
def one_f_one_b(p, m):
    order = []
    for i in range(m):
        order += [("F", i), ("B", i)]
    return [list(order) for _ in range(p)]
