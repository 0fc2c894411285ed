# why: masked_loss is vectorised over the batch but loops over the time steps in Python: fine while T stays 12 (the batch size becomes symbolic after one recompilation), but T marked dynamic is specialised by the loop
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution
# %% compile_clean-loss
import torch


def masked_loss(pred, target, lengths):
    per_step = (pred - target).square().mean(dim=-1)          # (B, T)
    total = torch.zeros_like(per_step[:, 0])
    for t in range(pred.shape[1]):
        total = total + torch.where(t < lengths, per_step[:, t], 0.0)
    return (total / lengths).mean()
