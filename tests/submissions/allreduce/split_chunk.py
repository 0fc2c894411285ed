# why: splits with torch.chunk, which returns fewer chunks than asked for some sizes (5 examples in 4 chunks: 2, 2, 1) and uneven ones for others (10 in 4: 3, 3, 3, 1); Part 2's step is graded with a correct split_batch
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 0, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum: solution
# %% allreduce-split
import torch


def split_batch(X, y, devices):
    k = len(devices)
    return ([x.to(d) for x, d in zip(X.chunk(k), devices)],
            [t.to(d) for t, d in zip(y.chunk(k), devices)])
# %% allreduce-step: solution
