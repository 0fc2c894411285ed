# why: keeps the scale as a Python int (int(init_scale), int() after each update): get_scale() and state_dict()['scale'] are not floats
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 0, "gradscaler-step-test": 2, "gradscaler-update-test": 0, "gradscaler-errors-test": 1, "gradscaler-state-test": 0, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
        self.enabled = enabled
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
=======
        self.enabled = enabled
        self._scale = int(init_scale)
        self._growth_factor = float(growth_factor)
>>>>>>> mistake
<<<<<<< solution
        # 1 or 2 lines
        return float(self._scale) if self.enabled else 1.0

=======
        # 1 or 2 lines
        return self._scale if self.enabled else 1.0

>>>>>>> mistake
<<<<<<< solution
        if any(state["found_inf"] for state in self._per_optimizer.values()):
            self._scale *= self._backoff_factor
            self._growth_tracker = 0
=======
        if any(state["found_inf"] for state in self._per_optimizer.values()):
            self._scale = int(self._scale * self._backoff_factor)
            self._growth_tracker = 0
>>>>>>> mistake
<<<<<<< solution
                if grown <= FLOAT32_MAX:             # finite in float32, where PyTorch keeps the scale
                    self._scale = grown
                self._growth_tracker = 0
=======
                if grown <= FLOAT32_MAX:             # finite in float32, where PyTorch keeps the scale
                    self._scale = int(grown)
                self._growth_tracker = 0
>>>>>>> mistake
<<<<<<< solution
                               "from a disabled instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
=======
                               "from a disabled instance of GradScaler.")
        self._scale = int(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
>>>>>>> mistake
