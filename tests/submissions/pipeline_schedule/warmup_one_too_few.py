# why: min(p - s - 2, m) warm-up forwards (one too few, at least 0): a valid order, but stages wait for backwards they could have overlapped with a forward, so the pipeline takes longer (and memory is graded only at the right makespan)
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        warmup = min(p - s - 1, m)
=======
        warmup = max(0, min(p - s - 2, m))
>>>>>>> mistake
