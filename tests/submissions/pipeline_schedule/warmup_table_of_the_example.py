# why: copies the warm-up counts of the p = 4 table ([3, 2, 1, 0][s]) instead of min(p - s - 1, m): right for p = 4 and m >= 3 only (other p: forwards of micro-batches that do not exist, or an IndexError); nothing of 1F1B is right in general
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 0, "pipeline_schedule-1f1b-test-bubble": 0, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        warmup = min(p - s - 1, m)
=======
        warmup = [3, 2, 1, 0][s]   # as in the table for p = 4
>>>>>>> mistake
