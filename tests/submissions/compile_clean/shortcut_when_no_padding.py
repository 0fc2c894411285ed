# why: adds a fast path `if bool((lengths == pred.shape[1]).all()):` for batches without padding: right in eager mode, but a Python branch on a tensor's value is a graph break, so fullgraph=True fails (and the step with it)
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution
# %% compile_clean-loss: solution, edited
<<<<<<< solution
    steps = torch.arange(pred.shape[1], device=pred.device)
=======
    if bool((lengths == pred.shape[1]).all()):
        return (pred - target).square().mean()
    steps = torch.arange(pred.shape[1], device=pred.device)
>>>>>>> mistake
