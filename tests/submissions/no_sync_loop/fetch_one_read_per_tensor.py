# why: fetch reads each tensor with its own .tolist(): right values, but a synchronisation per tensor (and train_epoch, which fetches two, makes two)
# expect: {"no_sync_loop-fetch-test": 0, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch
def fetch(*tensors):
    return [t.tolist() for t in tensors]
# %% no_sync_loop-train: solution
