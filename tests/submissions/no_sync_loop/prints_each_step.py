# why: prints a progress line with the loss formatted in every step: formatting a tensor reads its value on the host
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
        sizes.append(len(y))                                 # a shape: known on the host
=======
        sizes.append(len(y))
        print(f"step {len(sizes)}: loss {loss:.4f}")
>>>>>>> mistake
