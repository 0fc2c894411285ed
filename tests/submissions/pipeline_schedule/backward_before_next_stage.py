# why: numbers the stages from the end (warm-up min(s, m)): stage 0 starts a backward before stage 1 has run it, and stage 1 waits for a forward stage 0 lists after that backward (a deadlock for m >= 2)
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        warmup = min(p - s - 1, m)
=======
        warmup = min(s, m)
>>>>>>> mistake
