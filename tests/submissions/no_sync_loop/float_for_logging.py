# why: keeps the losses on the device but sums the weighted loss with float(loss) every step: float() of a tensor waits as .item() does
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, sizes, total = [], [], 0.0
    correct = torch.zeros((), dtype=torch.int64, device=batches[0][0].device)
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        total += float(loss) * len(y)
        correct += (logits.argmax(dim=1) == y).sum()
        sizes.append(len(y))
    values, right = fetch(torch.stack(losses), correct)
    count = sum(sizes)
    return {"losses": values, "mean_loss": total / count, "accuracy": right / count,
            "best_step": values.index(min(values))}
