# why: every replica adds the others' tensors to its own, each in its own order: the sums are right up to rounding but not bitwise identical, so replicas would drift apart
# expect: {"allreduce-sum-test-values": 0, "allreduce-sum-test-dtypes": 0, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum
import torch


def allreduce(data):
    received = [t.clone() for t in data]
    for i, t in enumerate(data):
        for j, other in enumerate(received):
            if j != i:
                t.add_(other.to(t.device))
# %% allreduce-split: solution
# %% allreduce-step: solution
