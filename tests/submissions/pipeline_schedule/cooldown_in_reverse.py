# why: the cool-down drains the backwards newest first (reversed(range(m - w, m))), "like GPipe's figure": stage s's first cool-down backward waits for stage s + 1 to drain everything, so the stages take turns at the end and the step is longer than (m+p-1)(f+b)
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        ops += [("B", i) for i in range(m - warmup, m)]   # cool-down
=======
        ops += [("B", i) for i in reversed(range(m - warmup, m))]   # cool-down, newest first
>>>>>>> mistake
