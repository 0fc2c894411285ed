# why: logs each loss with .item() as it goes (the line the chapter warns about): the right log, one synchronisation per step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
        losses.append(loss.detach())                        # no wait, and no graph kept
=======
        losses.append(torch.tensor(loss.item()))            # the value read on the host, every step
>>>>>>> mistake
