# why: divides the sum over every valid step by lengths.sum(): the mean over all valid steps, not the mean of each sequence's mean -- the same only when every sequence has the same length, so almost every result differs from the given code's, compiled or not
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution
# %% compile_clean-loss: solution, edited
<<<<<<< solution
    per_sequence = torch.where(valid, per_step, 0.0).sum(dim=1) / lengths
    return per_sequence.mean()
=======
    return torch.where(valid, per_step, 0.0).sum() / lengths.sum()
>>>>>>> mistake
