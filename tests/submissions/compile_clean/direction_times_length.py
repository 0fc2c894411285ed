# why: rewrites the clipping as "direction times clipped length", h / norm * norm.clamp(max=max_norm): the same numbers wherever the norm is positive, but 0 / 0 = NaN for a hidden vector of norm 0, which the given code leaves at 0; compiles cleanly
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution, edited
<<<<<<< solution
    h = h * (max_norm / norm.clamp_min(max_norm))   # exactly 1.0 where norm <= max_norm: no branch needed
=======
    h = h / norm * norm.clamp(max=max_norm)
>>>>>>> mistake
# %% compile_clean-loss: solution
