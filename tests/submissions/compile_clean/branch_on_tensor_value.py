# why: forward drops the print but keeps `if norm.max() > max_norm:`, a Python branch on a tensor's value: right in eager mode, a graph break that fullgraph=True refuses (found by Dynamo, not by the static reading)
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution, edited
<<<<<<< solution
    h = h * (max_norm / norm.clamp_min(max_norm))   # exactly 1.0 where norm <= max_norm: no branch needed
=======
    if norm.max() > max_norm:
        h = h * (max_norm / norm.clamp_min(max_norm))
>>>>>>> mistake
# %% compile_clean-loss: solution
