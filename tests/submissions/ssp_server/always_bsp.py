# why: waits for the slowest worker always, whatever s (a barrier per clock: bulk-synchronous): right at s = 0, but the pulls that s >= 1 allows wait all the same
# expect: {"ssp_server-test-values": 3, "ssp_server-test-bound": 3, "ssp_server-test-waits": 0, "ssp_server-test-sync": 2}
# %% ssp_server-rule: solution, edited
<<<<<<< solution
    ready = [(k, c) for k, c in waiting if slowest >= c - staleness]
    still = [(k, c) for k, c in waiting if slowest < c - staleness]
=======
    ready = [(k, c) for k, c in waiting if slowest >= c]
    still = [(k, c) for k, c in waiting if slowest < c]
>>>>>>> mistake
# %% ssp_server-server: solution
