# why: zeroes the padding of pred and target in place with masked_fill_ (to "save memory"): the loss is right, but the caller's pred and target are changed, which the specification rules out; compiles cleanly
# expect: {"compile_clean-eager-test": 0, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution
# %% compile_clean-loss
import torch


def masked_loss(pred, target, lengths):
    steps = torch.arange(pred.shape[1], device=pred.device)
    padding = (steps[None, :] >= lengths[:, None])[..., None]
    pred.masked_fill_(padding, 0.0)
    target.masked_fill_(padding, 0.0)
    per_step = (pred - target).square().mean(dim=-1)
    return (per_step.sum(dim=1) / lengths).mean()
