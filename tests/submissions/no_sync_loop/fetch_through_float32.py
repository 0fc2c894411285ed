# why: fetch packs everything into float32 instead of float64: float64 values lose digits and integers above 2**24 come back wrong (train_epoch's small counts and float32 losses survive)
# expect: {"no_sync_loop-fetch-test": 0, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution, edited
<<<<<<< solution
    flat = torch.cat([t.detach().reshape(-1).to(torch.float64) for t in tensors]).tolist()  # the one read
=======
    flat = torch.cat([t.detach().reshape(-1).float() for t in tensors]).tolist()
>>>>>>> mistake
# %% no_sync_loop-train: solution
