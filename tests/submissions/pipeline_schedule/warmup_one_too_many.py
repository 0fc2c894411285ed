# why: min(p - s, m) warm-up forwards (one too many): as fast as 1F1B, but every stage holds one micro-batch more than it needs
# expect: {"pipeline_schedule-gpipe-test": 2, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 0}
# %% pipeline_schedule-gpipe: solution
# %% pipeline_schedule-1f1b: solution, edited
<<<<<<< solution
        warmup = min(p - s - 1, m)
=======
        warmup = min(p - s, m)
>>>>>>> mistake
