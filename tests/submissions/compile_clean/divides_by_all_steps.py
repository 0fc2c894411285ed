# why: masks the padding but averages each sequence over all T steps (.mean(dim=1)) instead of its own length: right only for full-length sequences, so the loss is wrong everywhere, compiled or not
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution
# %% compile_clean-loss: solution, edited
<<<<<<< solution
    per_sequence = torch.where(valid, per_step, 0.0).sum(dim=1) / lengths
=======
    per_sequence = torch.where(valid, per_step, 0.0).mean(dim=1)
>>>>>>> mistake
