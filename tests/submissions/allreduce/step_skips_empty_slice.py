# why: skips the replicas whose slice is empty (to avoid a forward pass on no examples), then allreduces and updates only the replicas that have a gradient: the others keep their old parameters when there are fewer examples than devices
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 0, "allreduce-step-test-state": 1}
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
        if len(ys) == 0:
            continue  # nothing to compute on this replica
        loss = F.cross_entropy(net(Xs, params), ys, reduction="sum")
        loss.backward()
        total += loss.item()
    with torch.no_grad():
        for i in range(len(device_params[0])):
            grads = [params[i].grad for params in device_params if params[i].grad is not None]
            allreduce(grads)
        for params in device_params:
            for p in params:
                if p.grad is not None:
                    p -= lr * p.grad / n
                    p.grad = None
    return total / n
