# why: counts each batch's right predictions as the length of argwhere(pred == y): argwhere's result size depends on the values, so the host waits for them every step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
        correct += (logits.argmax(dim=1) == y).sum()         # stays on the device
=======
        correct += len(torch.argwhere(logits.argmax(dim=1) == y))
>>>>>>> mistake
