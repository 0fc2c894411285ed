# why: every stage warms up like the first one (min(p - 1, m) forwards): valid, but the later stages hold p micro-batches instead of p - s (the memory the schedule exists to save) and their backwards start late, so the step is longer too
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        warmup = min(p - s - 1, m)
=======
        warmup = min(p - 1, m)
>>>>>>> mistake
