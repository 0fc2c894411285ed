# why: divides the sum by the number of replicas before copying it back (what DDP's allreduce hook does to gradients): every replica holds the mean, not the sum (an int64 mean truncated), which every value check sees, the memory test included; Part 2 is graded with a correct allreduce, so it keeps its points
# expect: {"allreduce-sum-test-values": 0, "allreduce-sum-test-dtypes": 0, "allreduce-sum-test-views": 0, "allreduce-sum-test-storage": 0, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum: solution, edited
<<<<<<< solution
    for t in data:
        t.copy_(total)  # copy_ writes into t's own memory, across devices and through views
=======
    if total.is_floating_point():
        total.div_(len(data))  # the mean, as DDP averages gradients
    else:
        total.div_(len(data), rounding_mode="trunc")
    for t in data:
        t.copy_(total)  # copy_ writes into t's own memory, across devices and through views
>>>>>>> mistake
# %% allreduce-split: solution
# %% allreduce-step: solution
