# why: removes the branch by changing the maths: every hidden vector is scaled to norm max_norm, short ones (and those of norm 0, to NaN) too; one clean graph, but no result equals the given code's
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution, edited
<<<<<<< solution
    h = h * (max_norm / norm.clamp_min(max_norm))   # exactly 1.0 where norm <= max_norm: no branch needed
=======
    h = h * (max_norm / norm)
>>>>>>> mistake
# %% compile_clean-loss: solution
