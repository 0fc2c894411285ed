# why: keeps every step's logits (not detached) to count the right predictions after the loop: one synchronisation, the right log, but each kept logits tensor holds its step's autograd graph until the function returns
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 0}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, outputs = [], []
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        outputs.append(logits)
    correct = sum((logits.argmax(dim=1) == y).sum() for logits, (x, y) in zip(outputs, batches))
    values, right = fetch(torch.stack(losses), correct)
    sizes = [len(y) for x, y in batches]
    count = sum(sizes)
    return {"losses": values, "mean_loss": sum(v * n for v, n in zip(values, sizes)) / count,
            "accuracy": right / count, "best_step": values.index(min(values))}
