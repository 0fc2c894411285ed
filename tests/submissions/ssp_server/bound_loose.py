# why: the bound one clock too loose (slowest >= c - s - 1, as if the pull were of the clock before the push): a worker reads weights one clock staler than s allows; at s = 0 a fast worker reads before the clock is complete, which is not synchronous SGD
# expect: {"ssp_server-test-values": 3, "ssp_server-test-bound": 0, "ssp_server-test-waits": 0, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution, edited
<<<<<<< solution
    ready = [(k, c) for k, c in waiting if slowest >= c - staleness]
    still = [(k, c) for k, c in waiting if slowest < c - staleness]
=======
    ready = [(k, c) for k, c in waiting if slowest >= c - staleness - 1]
    still = [(k, c) for k, c in waiting if slowest < c - staleness - 1]
>>>>>>> mistake
# %% ssp_server-server: solution
