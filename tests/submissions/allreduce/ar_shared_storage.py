# why: gives every tensor the sum by replacing its storage (t.data = total): the tensor objects read as the sum, but nothing is written into the memory the caller handed over (the grader reads that memory itself), views no longer reach their base, and on one device all replicas now share one buffer
# expect: {"allreduce-sum-test-values": 0, "allreduce-sum-test-dtypes": 0, "allreduce-sum-test-views": 0, "allreduce-sum-test-storage": 0, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum
import torch


def allreduce(data):
    total = sum(t.to(data[0].device) for t in data)
    for t in data:
        t.data = total.to(t.device)
# %% allreduce-split: solution
# %% allreduce-step: solution
