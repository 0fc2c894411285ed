# why: an attack, not a mistake: reads each loss with .item() inside torch._C.DisableTorchFunction() and a dispatch guard, so the modes that count in its process see nothing; the reading refuses the private names (costing the points observed in that process) and the meta run, whose steps the grader counts, stops at the first read
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 0}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, sizes, right = [], [], 0
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            losses.append(loss.item())
            right += (logits.argmax(dim=1) == y).sum().item()
        sizes.append(len(y))
    count = sum(sizes)
    return {"losses": losses, "mean_loss": sum(v * n for v, n in zip(losses, sizes)) / count,
            "accuracy": right / count, "best_step": losses.index(min(losses))}
