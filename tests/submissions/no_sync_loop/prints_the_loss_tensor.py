# why: prints the detached loss tensor every step for progress: printing a tensor formats its value on the host, a synchronisation per step (the meta device prints without a value, so only the count in the student's process sees this one)
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
        sizes.append(len(y))                                 # a shape: known on the host
=======
        sizes.append(len(y))
        print("step", len(sizes), "loss", loss.detach())
>>>>>>> mistake
