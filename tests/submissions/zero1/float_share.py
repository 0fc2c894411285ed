# why: divides the start by a float share total / world_size: the same owners on every configuration of the self-check's examples and of the training runs, but a float share rounds up where a share ends exactly at a parameter (5 // (10 / 6) is 2.0, not 3), so the partition tested directly on many cases gives some parameters to the rank before
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 0}
# %% zero1-partition: solution, edited
<<<<<<< solution
    total = sum(sizes)
    owners, start = [], 0
    for size in sizes:
        owners.append(world_size * start // total)
        start += size
    return owners
=======
    share = sum(sizes) / world_size
    owners, start = [], 0
    for size in sizes:
        owners.append(int(start // share))
        start += size
    return owners
>>>>>>> mistake
# %% zero1-optimizer: solution
