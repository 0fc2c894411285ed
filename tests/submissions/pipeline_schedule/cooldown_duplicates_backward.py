# why: the cool-down starts one micro-batch early (range(m - warmup - 1, m)): the last steady-state backward runs twice on every stage (and when m <= p - s - 1 a micro-batch -1 appears)
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        ops += [("B", i) for i in range(m - warmup, m)]   # cool-down
=======
        ops += [("B", i) for i in range(m - warmup - 1, m)]   # cool-down
>>>>>>> mistake
