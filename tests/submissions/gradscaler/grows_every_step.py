# why: update() multiplies the scale by growth_factor after every clean iteration, ignoring growth_interval
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 0, "gradscaler-errors-test": 1, "gradscaler-state-test": 0, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
        else:
            self._growth_tracker += 1
            if self._growth_tracker == self._growth_interval:
                grown = self._scale * self._growth_factor
                if grown <= FLOAT32_MAX:             # finite in float32, where PyTorch keeps the scale
                    self._scale = grown
                self._growth_tracker = 0
        self._per_optimizer = {}
=======
        else:
            self._scale = self._scale * self._growth_factor
        self._per_optimizer = {}
>>>>>>> mistake
