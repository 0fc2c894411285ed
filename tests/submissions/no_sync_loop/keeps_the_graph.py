# why: keeps loss instead of loss.detach(): the right log and one synchronisation, but every step's autograd graph stays alive until the end
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 0}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
        losses.append(loss.detach())                        # no wait, and no graph kept
=======
        losses.append(loss)
>>>>>>> mistake
