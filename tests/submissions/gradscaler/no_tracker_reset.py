# why: update() backs off on inf/NaN but does not reset the growth tracker, so the scale grows again too early
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 0, "gradscaler-errors-test": 1, "gradscaler-state-test": 0, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
        else:
=======
            self._scale *= self._backoff_factor
        else:
>>>>>>> mistake
