# why: the steady state pairs the forward of micro-batch warmup + k with the backward of the same micro-batch (("B", warmup + k) instead of ("B", k)): backwards of the first micro-batches never run and later ones run twice
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
            ops += [("F", warmup + k), ("B", k)]
=======
            ops += [("F", warmup + k), ("B", warmup + k)]
>>>>>>> mistake
