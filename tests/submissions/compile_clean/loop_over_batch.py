# why: masked_loss masks each sequence without .item() but still loops over range(pred.shape[0]): one graph for one shape, but the unrolled loop makes the batch size a constant, so every batch size recompiles, and marking it dynamic fails
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution
# %% compile_clean-loss
import torch


def masked_loss(pred, target, lengths):
    steps = torch.arange(pred.shape[1], device=pred.device)
    total = 0.0
    for i in range(pred.shape[0]):
        per_step = (pred[i] - target[i]).square().mean(dim=-1)
        total = total + torch.where(steps < lengths[i], per_step, 0.0).sum() / lengths[i]
    return total / pred.shape[0]
