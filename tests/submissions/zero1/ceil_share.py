# why: balances by a share of ceil(total / N) elements: right on the training runs' configurations, but not the rule (six parameters of one element on 4 ranks give owners 0, 0, 1, 1, 2, 2 instead of 0, 0, 1, 2, 2, 3): the partition, tested directly, and so the shards and roots are wrong there
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
    share = -(-sum(sizes) // world_size)
    owners, start = [], 0
    for size in sizes:
        owners.append(start // share)
        start += size
    return owners
>>>>>>> mistake
# %% zero1-optimizer: solution
