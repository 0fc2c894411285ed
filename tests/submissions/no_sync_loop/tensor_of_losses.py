# why: keeps the detached losses on the device but turns the list into one tensor with torch.tensor(losses): torch.tensor reads every 0-dim tensor of its data on the host, one synchronisation per step; the log is right
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
    values, right = fetch(torch.stack(losses), correct)      # the one synchronisation
=======
    values, right = fetch(torch.tensor(losses), correct)
>>>>>>> mistake
