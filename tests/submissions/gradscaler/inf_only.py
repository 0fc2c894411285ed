# why: unscale_grads_ looks for inf with torch.isinf, so NaN gradients are neither detected nor skipped
# expect: {"gradscaler-unscale-test": 0, "gradscaler-scale-test": 1, "gradscaler-step-test": 0, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution, edited
<<<<<<< solution
        for g in grads:
            found_inf = found_inf or not bool(torch.isfinite(g).all())  # looked at before multiplying
            g.mul_(inv_scale)
=======
        for g in grads:
            found_inf = found_inf or bool(torch.isinf(g).any())  # looked at before multiplying
            g.mul_(inv_scale)
>>>>>>> mistake
# %% gradscaler-scaler: solution
