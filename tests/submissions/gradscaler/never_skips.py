# why: step() always runs optimizer.step(), even when an inf/NaN was found (the detection only feeds update())
# expect: {"gradscaler-unscale-test": 2, "gradscaler-scale-test": 1, "gradscaler-step-test": 0, "gradscaler-update-test": 2, "gradscaler-errors-test": 1, "gradscaler-state-test": 1, "gradscaler-e2e-test": 0}
# %% gradscaler-unscale: solution
# %% gradscaler-scaler: solution, edited
<<<<<<< solution
        state["stage"] = "stepped"
        if state["found_inf"]:
            return None
        return optimizer.step()
=======
        state["stage"] = "stepped"
        return optimizer.step()
>>>>>>> mistake
