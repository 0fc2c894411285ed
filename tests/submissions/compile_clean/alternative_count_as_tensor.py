# why: a correct rewrite that averages the sequences with `per_sequence.sum() / torch.tensor(pred.shape[0], ...)`: a size turned into a tensor stays symbolic under Dynamo (no recompilation per batch size, marked dimensions stay dynamic), so it keeps full marks
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution
# %% compile_clean-loss: solution, edited
<<<<<<< solution
    return per_sequence.mean()
=======
    count = torch.tensor(pred.shape[0], dtype=pred.dtype, device=pred.device)
    return per_sequence.sum() / count
>>>>>>> mistake
