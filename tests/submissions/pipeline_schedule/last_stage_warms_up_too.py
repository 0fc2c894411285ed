# why: "every stage needs at least one warm-up forward" (max(1, min(p - s - 1, m))): valid, but the last stage runs a second forward before its first backward, which delays every backward above it (the step is longer than (m+p-1)(f+b)) and holds two micro-batches where one suffices
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        warmup = min(p - s - 1, m)
=======
        warmup = max(1, min(p - s - 1, m))
>>>>>>> mistake
