# why: unscales inside GradScaler.unscale_ and leaves unscale_grads_ as the stub: only the unscale_grads_ points are lost
# expect: {"gradscaler-unscale-test": 0, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
            raise RuntimeError("unscale_() is being called after step().")
        found_inf = unscale_grads_(optimizer, 1.0 / self._scale)
        self._per_optimizer[id(optimizer)] = {"stage": "unscaled", "found_inf": found_inf}
=======
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = 1.0 / self._scale
        found_inf = False
        with torch.no_grad():
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        found_inf = found_inf or not bool(torch.isfinite(p.grad).all())
                        p.grad.mul_(inv_scale)
        self._per_optimizer[id(optimizer)] = {"stage": "unscaled", "found_inf": found_inf}
>>>>>>> mistake
