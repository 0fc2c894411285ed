# why: accumulates the weighted loss with total += loss * len(y) on the device, without detach: total's graph grows by one step's graph every step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 0}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, sizes = [], []
    device = batches[0][0].device
    correct = torch.zeros((), dtype=torch.int64, device=device)
    total = torch.zeros((), dtype=torch.float64, device=device)
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        total += loss * len(y)
        correct += (logits.argmax(dim=1) == y).sum()
        sizes.append(len(y))
    values, right, weighted = fetch(torch.stack(losses), correct, total)
    count = sum(sizes)
    return {"losses": values, "mean_loss": weighted / count, "accuracy": right / count,
            "best_step": values.index(min(values))}
