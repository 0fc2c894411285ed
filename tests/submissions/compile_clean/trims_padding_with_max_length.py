# why: vectorised and masked correctly, but first trims the padded tail with `pred[:, :int(lengths.max())]` to save work: right values, yet `int(lengths.max())` is a host read (an `item` node in the graph, a sync every step on a GPU), which part 2 refuses; the shapes are otherwise handled symbolically
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution
# %% compile_clean-loss
import torch


def masked_loss(pred, target, lengths):
    longest = int(lengths.max())
    pred, target = pred[:, :longest], target[:, :longest]
    steps = torch.arange(longest, device=pred.device)
    valid = steps[None, :] < lengths[:, None]
    per_step = (pred - target).square().mean(dim=-1)
    return (torch.where(valid, per_step, 0.0).sum(dim=1) / lengths).mean()
