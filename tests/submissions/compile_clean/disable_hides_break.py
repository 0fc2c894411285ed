# why: keeps the logging in a helper marked @torch._dynamo.disable to hide the break: eager is right, but a disabled function is still a graph break (fullgraph=True refuses it) and the static reading refuses torch._dynamo
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward
import torch


@torch._dynamo.disable
def log_norm(norm):
    print(f"largest hidden norm: {norm.max().item():.3f}")


def forward(x, w1, b1, w2, b2, max_norm):
    h = torch.relu(x @ w1 + b1)
    norm = h.norm(dim=-1, keepdim=True)
    log_norm(norm)
    h = h * (max_norm / norm.clamp_min(max_norm))
    return h @ w2 + b2
# %% compile_clean-loss: solution
