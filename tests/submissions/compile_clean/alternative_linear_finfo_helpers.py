# why: a correct rewrite with its own style: F.linear, a clip factor guarded with torch.finfo, .amax-free, a helper function and a literal constant in the cell, and test code left at the cell's top level (which the grader does not run); full marks
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward
import math

import torch
import torch.nn.functional as F

ONE = 1.0


def clip_factor(norm, max_norm):
    tiny = torch.finfo(norm.dtype).tiny
    return torch.clamp(max_norm / norm.clamp_min(tiny), max=ONE)


def forward(x, w1, b1, w2, b2, max_norm: float):
    h = F.linear(x, w1.T, b1).clamp_min(0.0)
    h = h * clip_factor(h.norm(dim=-1, keepdim=True), max_norm)
    return F.linear(h, w2.T, b2)


x_try = torch.randn(2, 3, 6)
print(forward(x_try, torch.randn(6, 4), torch.zeros(4), torch.randn(4, 2), torch.zeros(2), math.sqrt(2.0)).shape)
# %% compile_clean-loss
import torch
import torch.nn.functional as F


def valid_steps(lengths, T):
    return torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]


def masked_loss(pred, target, lengths):
    per_step = F.mse_loss(pred, target, reduction="none").mean(dim=-1)
    kept = torch.where(valid_steps(lengths, pred.shape[1]), per_step, per_step.new_zeros(()))
    return torch.mean(kept.sum(dim=-1) / lengths)
