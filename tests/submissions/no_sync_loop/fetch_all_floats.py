# why: fetch returns every value as a float (no int or bool given back): one read, and train_epoch's log is still right
# expect: {"no_sync_loop-fetch-test": 0, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution, edited
<<<<<<< solution
        if t.dtype == torch.bool:
            part = [v != 0.0 for v in part]
        elif not t.dtype.is_floating_point:
            part = [int(v) for v in part]
        values.append(part[0] if t.dim() == 0 else part)
=======
        values.append(part[0] if t.dim() == 0 else part)
>>>>>>> mistake
# %% no_sync_loop-train: solution
