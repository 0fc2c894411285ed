# why: fills the buckets in forward order (first parameter first): bucket 0 holds the first layer, whose gradient the backward pass computes last, so no bucket can start before the pass ends, and the sizes differ from the rule's
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 0, "ddp_buckets-test-overlap": 0}
# %% ddp_buckets-assign: solution, edited
<<<<<<< solution
    for i in reversed(range(len(nbytes))):
=======
    for i in range(len(nbytes)):
>>>>>>> mistake
# %% ddp_buckets-wrapper: solution
