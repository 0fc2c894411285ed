# why: default init_scale=2^16, which in Python is XOR: 18, not 65536 (the classic from the source notes)
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 0, "gradscaler-step-test": 2, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 0, "gradscaler-e2e-test": 0}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
=======

    def __init__(self, init_scale=2^16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
>>>>>>> mistake
