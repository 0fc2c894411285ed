# why: keeps the given loop and slices each sequence with `n = int(lengths[i])`: right in eager mode, and torch 2.13 compiles `int(t)` without a graph break, as an `item` node -- a host read in the graph (a sync per sequence on a GPU), and the unrolled loop recompiles for every batch size
# expect: {"compile_clean-eager-test": 3, "compile_clean-fullgraph-test": 0, "compile_clean-recompile-test": 0, "compile_clean-dynamic-test": 0}
# %% compile_clean-forward: solution
# %% compile_clean-loss
import torch


def masked_loss(pred, target, lengths):
    total = pred.new_zeros(())
    for i in range(pred.shape[0]):
        n = int(lengths[i])
        total = total + (pred[i, :n] - target[i, :n]).square().mean()
    return total / pred.shape[0]
