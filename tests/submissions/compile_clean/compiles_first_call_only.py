# why: cheats the counts: loops over the batch (recompiles for every size) and replaces torch.compile in its own process with a wrapper that compiles the first call and runs the others eagerly, so the probe would see one graph and right values; the static reading refuses torch.compile, so every cell that counts graphs scores 0
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution
# %% compile_clean-loss
import torch

real_compile = torch.compile


def compile_once(fn, **options):
    compiled = real_compile(fn, **options)
    calls = []

    def run(*args):
        calls.append(len(calls))
        return compiled(*args) if len(calls) == 1 else fn(*args)
    return run


torch.compile = compile_once


def masked_loss(pred, target, lengths):
    steps = torch.arange(pred.shape[1], device=pred.device)
    total = 0.0
    for i in range(pred.shape[0]):
        per_step = (pred[i] - target[i]).square().mean(dim=-1)
        total = total + torch.where(steps < lengths[i], per_step, 0.0).sum() / lengths[i]
    return total / pred.shape[0]
