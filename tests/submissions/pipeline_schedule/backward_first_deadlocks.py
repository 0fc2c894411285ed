# why: the steady state runs the backward before the forward: the last stage (no warm-up) lists ("B", 0) before its own ("F", 0), and every stage above it waits: a deadlock
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
            ops += [("F", warmup + k), ("B", k)]
=======
            ops += [("B", k), ("F", warmup + k)]
>>>>>>> mistake
