# why: GPipe's backwards in the order 0, 1, ..., m-1 instead of m-1, ..., 0 (it runs, and as fast, but it is not the order asked for)
# expect: {"pipeline_schedule-gpipe-test": 0, "pipeline_schedule-1f1b-test-valid": 3, "pipeline_schedule-1f1b-test-bubble": 2, "pipeline_schedule-1f1b-test-memory": 3}
# %% pipeline_schedule-gpipe: solution, edited
<<<<<<< solution
    order = [("F", i) for i in range(m)] + [("B", i) for i in reversed(range(m))]
=======
    order = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
>>>>>>> mistake
# %% pipeline_schedule-1f1b: solution
