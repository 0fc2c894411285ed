# why: moves the data-dependent branch into a helper registered with torch._dynamo.allow_in_graph, so Dynamo would put it in the graph as one opaque call: eager is right; compiled, the branch cannot be traced and the static reading refuses torch._dynamo
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward
import torch
import torch._dynamo


def clip(h, norm, max_norm):
    if norm.max() > max_norm:
        h = h * (max_norm / norm.clamp_min(max_norm))
    return h


torch._dynamo.allow_in_graph(clip)


def forward(x, w1, b1, w2, b2, max_norm):
    h = torch.relu(x @ w1 + b1)
    norm = h.norm(dim=-1, keepdim=True)
    return clip(h, norm, max_norm) @ w2 + b2
# %% compile_clean-loss: solution
