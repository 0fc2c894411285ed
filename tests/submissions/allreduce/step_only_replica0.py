# why: updates only replica 0 (as if the others would follow); with more than one replica the others keep their old parameters
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 0, "allreduce-step-test-uneven": 0, "allreduce-step-test-tiny": 0, "allreduce-step-test-state": 0}
# %% allreduce-sum: solution
# %% allreduce-split: solution
# %% allreduce-step
import torch
import torch.nn.functional as F


def train_step(X, y, device_params, devices, lr):
    n = X.shape[0]
    X_slices, y_slices = split_batch(X, y, devices)
    total = 0.0
    for Xs, ys, params in zip(X_slices, y_slices, device_params):
        loss = F.cross_entropy(net(Xs, params), ys, reduction="sum")
        loss.backward()
        total += loss.item()
    with torch.no_grad():
        for i in range(len(device_params[0])):
            allreduce([params[i].grad for params in device_params])
        for p in device_params[0]:
            p -= lr * p.grad / n
        for params in device_params:
            for p in params:
                p.grad = None
    return total / n
