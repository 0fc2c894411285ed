# why: one_f_one_b returns GPipe's order (all forwards, then all backwards): valid and as fast, but every stage holds all m micro-batches' activations
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b
def one_f_one_b(p, m):
    order = [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
    return [list(order) for _ in range(p)]
