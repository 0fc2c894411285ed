# why: drops optimizer.zero_grad() from the loop: gradients accumulate across steps, so the parameters and every loss after the first differ from train_epoch_slow's (no synchronisation, no kept graph)
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 0, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train: solution, edited
<<<<<<< solution
        optimizer.zero_grad()
        logits = model(x)
=======
        logits = model(x)
>>>>>>> mistake
