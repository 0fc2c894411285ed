# why: computes the scaling factor with `.float()` "for safety": in float32 nothing changes, but a float64 forward now rounds its factor to float32 and misses the given code by ~1e-8 (relative), far outside float64's tolerance; compiles cleanly
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution, edited
<<<<<<< solution
    h = h * (max_norm / norm.clamp_min(max_norm))   # exactly 1.0 where norm <= max_norm: no branch needed
=======
    h = h * (max_norm / norm.clamp_min(max_norm)).float()
>>>>>>> mistake
# %% compile_clean-loss: solution
