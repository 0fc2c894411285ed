# why: no synchronisation left, but the mean loss is the mean of the batch means: wrong when the last batch is smaller
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 0, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
            "mean_loss": sum(v * n for v, n in zip(values, sizes)) / count,
=======
            "mean_loss": sum(values) / len(values),
>>>>>>> mistake
