# why: moves each step's loss to the CPU as it goes ("to free GPU memory") and reads them all at the end: every .cpu() is a device-to-host copy, one synchronisation per step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
        losses.append(loss.detach())                        # no wait, and no graph kept
=======
        losses.append(loss.detach().cpu())
>>>>>>> mistake
