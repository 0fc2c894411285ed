# why: the chapter's classic bug: sums into data[0] in place, then rebinds the other list slots; the caller's tensors never get the sum (Part 2 is graded with a correct allreduce, so it keeps its points)
# expect: {"allreduce-sum-test-values": 0, "allreduce-sum-test-dtypes": 0, "allreduce-sum-test-views": 0, "allreduce-sum-test-storage": 0, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum
import torch


def allreduce(data):
    for i in range(1, len(data)):
        data[0].add_(data[i].to(data[0].device))
    for i in range(1, len(data)):
        data[i] = data[0].to(data[i].device)
# %% allreduce-split: solution
# %% allreduce-step: solution
