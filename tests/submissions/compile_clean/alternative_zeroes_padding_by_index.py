# why: a correct rewrite that zeroes the padded errors of its own temporary with boolean-mask assignment (per_step[~valid] = 0.0) and scales with torch.minimum instead of clamp_min: no input changed, no host read (an assignment through a mask needs no size from the data), full marks
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward: solution, edited
<<<<<<< solution
    h = h * (max_norm / norm.clamp_min(max_norm))   # exactly 1.0 where norm <= max_norm: no branch needed
=======
    h = h * torch.minimum(max_norm / norm, torch.ones_like(norm))
>>>>>>> mistake
# %% compile_clean-loss
import torch


def masked_loss(pred, target, lengths):
    steps = torch.arange(pred.shape[1], device=pred.device)
    valid = steps[None, :] < lengths[:, None]
    per_step = (pred - target).square().mean(dim=-1)
    per_step[~valid] = 0.0
    return (per_step.sum(dim=1) / lengths).mean()
