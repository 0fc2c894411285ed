# why: accumulates in a float32 buffer on the CPU and copies back: fine for float32 and float16, but float64 loses precision and int64 values above 2**24 are no longer exact
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 0, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum
import torch


def allreduce(data):
    total = torch.zeros(data[0].shape, dtype=torch.float32)
    for t in data:
        total += t.float().cpu()
    for t in data:
        t.copy_(total)
# %% allreduce-split: solution
# %% allreduce-step: solution
