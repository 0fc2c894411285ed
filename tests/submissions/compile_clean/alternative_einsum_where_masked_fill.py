# why: a correct rewrite spelled differently from the reference: einsum for both layers, F.relu, torch.where to pick the scaled vectors, torch.linalg.vector_norm, masked_fill for the padding, .pow(2).sum / K for the mean, lengths cast with .to; full marks
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 3, "compile_clean-recompile-test": 2, "compile_clean-dynamic-test": 2}
# %% compile_clean-forward
import torch
import torch.nn.functional as F


def forward(x, w1, b1, w2, b2, max_norm):
    h = F.relu(torch.einsum("btd,dh->bth", x, w1) + b1)
    norm = torch.linalg.vector_norm(h, dim=-1, keepdim=True)
    h = torch.where(norm > max_norm, h * (max_norm / norm), h)
    return torch.einsum("bth,hk->btk", h, w2) + b2
# %% compile_clean-loss
import torch


def masked_loss(pred, target, lengths):
    B, T, K = pred.shape
    padding = torch.arange(T, device=lengths.device).unsqueeze(0) >= lengths.unsqueeze(1)
    errors = (pred - target).pow(2).sum(dim=-1) / K
    errors = errors.masked_fill(padding, 0.0)
    return (errors.sum(dim=1) / lengths.to(errors.dtype)).mean()
