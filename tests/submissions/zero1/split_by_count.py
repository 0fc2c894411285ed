# why: splits the parameter list by the number of parameters, not by elements: still correct values (each parameter is updated by the rank that holds its state and broadcast from it), but the shards are not the partition's (state and broadcast roots wrong)
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
    return [i * world_size // len(sizes) for i in range(len(sizes))]
>>>>>>> mistake
# %% zero1-optimizer: solution
