# why: computes the accuracy from a second forward pass after optimizer.step(): no synchronisation, but the spec asks for the predictions of the step's own forward pass, before its update
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 0, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
        correct += (logits.argmax(dim=1) == y).sum()         # stays on the device
=======
        correct += (model(x).argmax(dim=1) == y).sum()
>>>>>>> mistake
