# why: one stage/found_inf for the whole scaler instead of one per optimizer: the second optimizer of an iteration trips the 'already stepped' error
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 0, "gradscaler-update-test": 0, "gradscaler-errors-test": 0, "gradscaler-state-test": 1, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
            raise AssertionError("unscale_() before any scale(): call scaler.scale(loss) first")
        state = self._per_optimizer.get(id(optimizer))
        if state is not None and state["stage"] == "unscaled":
=======
            raise AssertionError("unscale_() before any scale(): call scaler.scale(loss) first")
        state = self._per_optimizer.get("all")
        if state is not None and state["stage"] == "unscaled":
>>>>>>> mistake
<<<<<<< solution
        found_inf = unscale_grads_(optimizer, 1.0 / self._scale)
        self._per_optimizer[id(optimizer)] = {"stage": "unscaled", "found_inf": found_inf}

=======
        found_inf = unscale_grads_(optimizer, 1.0 / self._scale)
        self._per_optimizer["all"] = {"stage": "unscaled", "found_inf": found_inf}

>>>>>>> mistake
<<<<<<< solution
            raise AssertionError("step() before any scale(): call scaler.scale(loss) first")
        state = self._per_optimizer.get(id(optimizer))
        if state is not None and state["stage"] == "stepped":
=======
            raise AssertionError("step() before any scale(): call scaler.scale(loss) first")
        state = self._per_optimizer.get("all")
        if state is not None and state["stage"] == "stepped":
>>>>>>> mistake
<<<<<<< solution
            self.unscale_(optimizer)
            state = self._per_optimizer[id(optimizer)]
        state["stage"] = "stepped"
=======
            self.unscale_(optimizer)
            state = self._per_optimizer["all"]
        state["stage"] = "stepped"
>>>>>>> mistake
