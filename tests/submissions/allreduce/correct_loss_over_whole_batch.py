# why: a correct alternative written differently: each replica's loss is its slice's summed cross-entropy divided by the WHOLE batch size (so the allreduced gradient is already the gradient of the batch mean and an empty slice adds 0), explicit index loops over replicas and parameters, the update with p.sub_(grad, alpha=lr) under torch.no_grad(), gradients reset with grad.zero_(), the loss returned as the sum of the slices' parts
# expect: {"allreduce-sum-test-values": 2, "allreduce-sum-test-dtypes": 1, "allreduce-sum-test-views": 1, "allreduce-sum-test-storage": 1, "allreduce-split-test": 1, "allreduce-step-test-even": 1, "allreduce-step-test-uneven": 1, "allreduce-step-test-tiny": 1, "allreduce-step-test-state": 1}
# %% allreduce-sum: solution
# %% allreduce-split: solution
# %% allreduce-step
import torch
import torch.nn.functional as F


def train_step(X, y, device_params, devices, lr):
    batch = len(y)
    X_parts, y_parts = split_batch(X, y, devices)
    total = 0.0
    for r in range(len(devices)):
        logits = net(X_parts[r], device_params[r])
        part = F.cross_entropy(logits, y_parts[r], reduction="sum") / batch
        part.backward()
        total += float(part)
    n_params = len(device_params[0])
    with torch.no_grad():
        for i in range(n_params):
            allreduce([device_params[r][i].grad for r in range(len(devices))])
        for r in range(len(devices)):
            for i in range(n_params):
                p = device_params[r][i]
                p.sub_(p.grad, alpha=lr)
                p.grad.zero_()
    return total
