# why: assign_buckets drops the parameters left over after the last full bucket: they get no bucket, and the hook of the first such parameter fails with a KeyError (the run stops, nothing can be graded)
# expect: {"ddp_buckets-test-values": 0, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution, edited
<<<<<<< solution
    if current:
        out.append(current)
    return out
=======
    return out
>>>>>>> mistake
# %% ddp_buckets-wrapper: solution
