# why: step() unscales the gradients itself every time, also after an explicit unscale_(): they end up divided by the scale twice
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 0, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
            raise RuntimeError("step() has already been called since the last update().")
        if state is None:
            self.unscale_(optimizer)
            state = self._per_optimizer[id(optimizer)]
        state["stage"] = "stepped"
        if state["found_inf"]:
=======
            raise RuntimeError("step() has already been called since the last update().")
        found_inf = unscale_grads_(optimizer, 1.0 / self._scale)
        if state is not None:
            found_inf = found_inf or state["found_inf"]
        state = {"stage": "stepped", "found_inf": found_inf}
        self._per_optimizer[id(optimizer)] = state
        if state["found_inf"]:
>>>>>>> mistake
