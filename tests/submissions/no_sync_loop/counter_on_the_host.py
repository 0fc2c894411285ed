# why: the count of right predictions is a tensor made without device=, so it lives on the host: on a GPU, adding each step's device count into it is a device-to-host copy (or an error); right on a CPU, wrong where it matters
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
    correct = torch.zeros((), dtype=torch.int64, device=batches[0][0].device)
=======
    correct = torch.zeros((), dtype=torch.int64)
>>>>>>> mistake
