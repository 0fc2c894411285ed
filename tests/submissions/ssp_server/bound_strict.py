# why: the bound with < in place of <= (a pull of clock c answered only once the slowest is past c - s): one clock of waiting too many, a barrier at s = 1, and at s = 0 every worker waits for a clock nobody reaches (the run stops); values and the bound itself are right
# expect: {"ssp_server-test-values": 3, "ssp_server-test-bound": 3, "ssp_server-test-waits": 0, "ssp_server-test-sync": 0}
# %% ssp_server-rule: solution, edited
<<<<<<< solution
    ready = [(k, c) for k, c in waiting if slowest >= c - staleness]
    still = [(k, c) for k, c in waiting if slowest < c - staleness]
=======
    ready = [(k, c) for k, c in waiting if slowest > c - staleness]
    still = [(k, c) for k, c in waiting if slowest <= c - staleness]
>>>>>>> mistake
# %% ssp_server-server: solution
