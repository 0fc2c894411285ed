# why: each replica uses the mean loss of its slice and the summed gradient is divided by k (what DDP does with equal shards): right only when the slices are equal, NaN for an empty slice
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 0, "allreduce-step-test-tiny": 0, "allreduce-step-test-state": 1}
# %% allreduce-sum: solution
# %% allreduce-split: solution
# %% allreduce-step
import torch
import torch.nn.functional as F


def train_step(X, y, device_params, devices, lr):
    k = len(devices)
    X_slices, y_slices = split_batch(X, y, devices)
    losses = []
    for Xs, ys, params in zip(X_slices, y_slices, device_params):
        loss = F.cross_entropy(net(Xs, params), ys)
        loss.backward()
        losses.append(loss.item())
    with torch.no_grad():
        for i in range(len(device_params[0])):
            allreduce([params[i].grad for params in device_params])
        for params in device_params:
            for p in params:
                p -= lr * p.grad / k
                p.grad = None
    return sum(losses) / k
