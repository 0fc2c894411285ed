# why: unscale_grads_ walks only optimizer.param_groups[0]: the other groups are neither unscaled nor checked
# expect: {"gradscaler-unscale-test": 0, "gradscaler-scale-test": 1, "gradscaler-step-test": 0, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution, edited
<<<<<<< solution
    # about 10 lines
    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if any(g.dtype == torch.float16 for g in grads):
=======
    # about 10 lines
    grads = [p.grad for p in optimizer.param_groups[0]["params"] if p.grad is not None]
    if any(g.dtype == torch.float16 for g in grads):
>>>>>>> mistake
# %% gradscaler-scaler: solution
