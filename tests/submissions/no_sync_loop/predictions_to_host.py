# why: collects each batch's predictions and labels with .tolist() and counts the right ones on the host: two reads per step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, sizes, predicted, labels = [], [], [], []
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        predicted += logits.argmax(dim=1).tolist()
        labels += y.tolist()
        sizes.append(len(y))
    values, = fetch(torch.stack(losses))
    count = sum(sizes)
    right = sum(p == t for p, t in zip(predicted, labels))
    return {"losses": values, "mean_loss": sum(v * n for v, n in zip(values, sizes)) / count,
            "accuracy": right / count, "best_step": values.index(min(values))}
