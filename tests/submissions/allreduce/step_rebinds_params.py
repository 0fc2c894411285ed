# why: computes the right new values but stores them as new tensors in the replicas' lists instead of updating the parameters in place
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 0}
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
    for params in device_params:
        for i, p in enumerate(params):
            params[i] = (p - lr * p.grad / n).detach().requires_grad_()
    return total / n
