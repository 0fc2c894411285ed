# why: the steady state loops over range(m - warmup - 1): the last steady forward and backward pair never runs, so a micro-batch is missing its forward and a backward runs twice: not a complete schedule
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        for k in range(m - warmup):              # steady state: one forward, one backward
=======
        for k in range(m - warmup - 1):          # steady state: one forward, one backward
>>>>>>> mistake
