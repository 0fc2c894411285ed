# why: forward keeps its logging line (print of .item()): right values in eager mode, but a graph break, so fullgraph=True fails (and the static reading refuses print and .item())
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution, edited
<<<<<<< solution
    norm = h.norm(dim=-1, keepdim=True)
=======
    norm = h.norm(dim=-1, keepdim=True)
    print(f"largest hidden norm: {norm.max().item():.3f}")
>>>>>>> mistake
# %% compile_clean-loss: solution
