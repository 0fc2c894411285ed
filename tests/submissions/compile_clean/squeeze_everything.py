# why: adds a defensive .squeeze() to the per-step errors: fine while T > 1, but with one time step the (B, 1) errors become (B,), the mask (B, 1) broadcasts against them to (B, B), and the loss is wrong; compiles cleanly for the graded shapes
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution
# %% compile_clean-loss: solution, edited
<<<<<<< solution
    per_step = (pred - target).square().mean(dim=-1)                  # (B, T)
=======
    per_step = (pred - target).square().mean(dim=-1).squeeze()
>>>>>>> mistake
