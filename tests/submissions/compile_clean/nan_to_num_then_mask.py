# why: cleans the padding with torch.nan_to_num before squaring and multiplies by the mask: NaN padding becomes 0, but inf becomes the largest float, whose square is inf again, and 0 * inf is NaN; compiles cleanly
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution
# %% compile_clean-loss: solution, edited
<<<<<<< solution
    per_step = (pred - target).square().mean(dim=-1)                  # (B, T)
    per_sequence = torch.where(valid, per_step, 0.0).sum(dim=1) / lengths
=======
    per_step = torch.nan_to_num(pred - target).square().mean(dim=-1)
    per_sequence = (per_step * valid).sum(dim=1) / lengths
>>>>>>> mistake
