# why: state_dict() names the tracker 'growth_tracker' (torch's key is '_growth_tracker'): its own round trip works, torch's does not
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 2, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 0, "gradscaler-e2e-test": 1}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

=======
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "growth_tracker": self._growth_tracker}

>>>>>>> mistake
<<<<<<< solution
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
=======
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["growth_tracker"])
>>>>>>> mistake
