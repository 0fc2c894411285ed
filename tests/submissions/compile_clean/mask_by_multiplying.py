# why: masked_loss multiplies by the mask instead of selecting with it: right on finite padding, NaN when the padding holds inf or NaN (0 * inf is NaN); compiles cleanly
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution
# %% compile_clean-loss: solution, edited
<<<<<<< solution
    per_sequence = torch.where(valid, per_step, 0.0).sum(dim=1) / lengths
=======
    per_sequence = (per_step * valid).sum(dim=1) / lengths
>>>>>>> mistake
