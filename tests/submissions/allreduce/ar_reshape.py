# why: works on flattened tensors with reshape(-1), which copies a non-contiguous tensor (a transpose): the sum is written into the copy, not into the caller's view
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 0, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum
import torch


def allreduce(data):
    flat = [t.reshape(-1) for t in data]
    total = flat[0].clone()
    for f in flat[1:]:
        total += f.to(total.device)
    for f in flat:
        f.copy_(total.to(f.device))
# %% allreduce-split: solution
# %% allreduce-step: solution
