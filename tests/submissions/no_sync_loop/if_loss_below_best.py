# why: tracks the best step with `if loss < best` on tensors: the condition calls bool() on a tensor, a synchronisation every step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import math

import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, sizes = [], []
    correct = torch.zeros((), dtype=torch.int64, device=batches[0][0].device)
    best, best_step = torch.tensor(math.inf), 0
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        correct += (logits.argmax(dim=1) == y).sum()
        sizes.append(len(y))
        if loss < best:
            best, best_step = loss.detach(), step
    values, right = fetch(torch.stack(losses), correct)
    count = sum(sizes)
    return {"losses": values, "mean_loss": sum(v * n for v, n in zip(values, sizes)) / count,
            "accuracy": right / count, "best_step": best_step}
