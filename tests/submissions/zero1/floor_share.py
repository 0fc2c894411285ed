# why: divides by a share of total // N elements, dropping the remainder: on 2 ranks with 66 elements nothing changes, but with sizes 21, 7, 14, 2 on 3 ranks (44 elements, shares of 14) the third parameter goes to rank 2 instead of rank 1
# expect: {"zero1-test-values": 4, "zero1-test-state": 0, "zero1-test-traffic": 0}
# %% zero1-partition: solution, edited
<<<<<<< solution
        owners.append(world_size * start // total)
=======
        owners.append(min(start // (total // world_size), world_size - 1))
>>>>>>> mistake
# %% zero1-optimizer: solution
