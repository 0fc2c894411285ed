# why: the update is right (summed losses), but the returned loss is the mean of the slices' mean losses: wrong for unequal slices, and a division by zero for an empty one
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 0, "allreduce-step-test-tiny": 0, "allreduce-step-test-state": 1}
# %% allreduce-sum: solution
# %% allreduce-split: solution
# %% allreduce-step
import torch
import torch.nn.functional as F


def train_step(X, y, device_params, devices, lr):
    n = X.shape[0]
    X_slices, y_slices = split_batch(X, y, devices)
    means = []
    for Xs, ys, params in zip(X_slices, y_slices, device_params):
        loss = F.cross_entropy(net(Xs, params), ys, reduction="sum")
        loss.backward()
        means.append(loss.item() / len(ys))
    with torch.no_grad():
        for i in range(len(device_params[0])):
            allreduce([params[i].grad for params in device_params])
        for params in device_params:
            for p in params:
                p -= lr * p.grad / n
                p.grad = None
    return sum(means) / len(means)
