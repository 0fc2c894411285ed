# why: takes the clean path only under torch.compiler.is_compiling() and skips the scaling in eager mode ("only needed when compiled"): every compiled result is right, every eager one with a long vector is wrong
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution, edited
<<<<<<< solution
    h = h * (max_norm / norm.clamp_min(max_norm))   # exactly 1.0 where norm <= max_norm: no branch needed
=======
    if torch.compiler.is_compiling():
        h = h * (max_norm / norm.clamp_min(max_norm))
>>>>>>> mistake
# %% compile_clean-loss: solution
