# why: gives every tensor the sum by replacing its storage (t.data = total): values right, but on one device all replicas now share one buffer, views no longer reach their base, and data_ptr changed
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 0, "allreduce-sum-test-storage": 0, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum
import torch


def allreduce(data):
    total = sum(t.to(data[0].device) for t in data)
    for t in data:
        t.data = total.to(t.device)
# %% allreduce-split: solution
# %% allreduce-step: solution
