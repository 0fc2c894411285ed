# why: p - s - 1 warm-up forwards without min(..., m): right when m >= p, but with m < p the first stages run forwards of micro-batches that do not exist
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        warmup = min(p - s - 1, m)
=======
        warmup = p - s - 1
>>>>>>> mistake
