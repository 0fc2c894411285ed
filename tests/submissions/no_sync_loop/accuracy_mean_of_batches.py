# why: averages each batch's accuracy instead of counting right predictions over all samples: no synchronisation, but wrong when the last batch is smaller
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 0, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, accuracies, sizes = [], [], []
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        accuracies.append((logits.argmax(dim=1) == y).float().mean())
        sizes.append(len(y))
    values, accs = fetch(torch.stack(losses), torch.stack(accuracies))
    count = sum(sizes)
    return {"losses": values, "mean_loss": sum(v * n for v, n in zip(values, sizes)) / count,
            "accuracy": sum(accs) / len(accs), "best_step": values.index(min(values))}
