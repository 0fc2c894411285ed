# why: submits train_epoch_slow itself, renamed: right in every value, four synchronisations per step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import math


def train_epoch(model, optimizer, loss_fn, batches):
    losses, total, correct, count = [], 0.0, 0, 0
    best, best_step = math.inf, -1
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        total += loss.item() * len(y)
        correct += (logits.argmax(dim=1) == y).sum().item()
        count += len(y)
        if loss < best:
            best, best_step = loss.item(), step
    return {"losses": losses, "mean_loss": total / count, "accuracy": correct / count, "best_step": best_step}
