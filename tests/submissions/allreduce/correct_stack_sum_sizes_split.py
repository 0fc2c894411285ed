# why: a correct alternative written differently: allreduce sums with torch.stack(...).sum(0) into a temporary on the first replica's device and copy_()s it into every replica; split_batch computes the sizes itself (the first n % k slices one larger) and cuts with torch.split
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum
import torch


def allreduce(data):
    if len(data) == 0:
        return None
    home = data[0].device
    with torch.no_grad():
        total = torch.stack([t.to(home) for t in data]).sum(0, dtype=data[0].dtype)
        for t in data:
            t.copy_(total)
    return None
# %% allreduce-split
import torch


def split_batch(X, y, devices):
    n, k = X.shape[0], len(devices)
    sizes = [n // k + (1 if j < n % k else 0) for j in range(k)]
    xs = [part.to(dev) for part, dev in zip(torch.split(X, sizes), devices)]
    ys = [part.to(dev) for part, dev in zip(torch.split(y, sizes), devices)]
    return xs, ys
# %% allreduce-step: solution
