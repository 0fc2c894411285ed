# why: reduces into data[0] but never sends the sum back: only replica 0 holds it
# expect: {"allreduce-sum-test-values": 0, "allreduce-sum-test-dtypes": 0, "allreduce-sum-test-views": 0, "allreduce-sum-test-storage": 0, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum
import torch


def allreduce(data):
    for t in data[1:]:
        data[0].add_(t.to(data[0].device))
# %% allreduce-split: solution
# %% allreduce-step: solution
