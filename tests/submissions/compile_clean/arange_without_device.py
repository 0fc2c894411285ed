# why: builds the step indices with torch.arange(pred.shape[1]) without device=: right on the CPU, but on a GPU the mask would mix devices (an error, or a copy every step); the specification asks for the inputs' device and part 1 checks it on the meta device
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution
# %% compile_clean-loss: solution, edited
<<<<<<< solution
    steps = torch.arange(pred.shape[1], device=pred.device)
=======
    steps = torch.arange(pred.shape[1])
>>>>>>> mistake
