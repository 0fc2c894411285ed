# why: preallocates the losses in a tensor made without device= and writes each step's loss into it: every write is a device-to-host copy on a GPU, one synchronisation per step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses = torch.zeros(len(batches))
    correct = torch.zeros((), dtype=torch.int64, device=batches[0][0].device)
    sizes = []
    for step, (x, y) in enumerate(batches):
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses[step] = loss.detach()
        correct += (logits.argmax(dim=1) == y).sum()
        sizes.append(len(y))
    values, right = fetch(losses, correct)
    count = sum(sizes)
    return {"losses": values, "mean_loss": sum(v * n for v, n in zip(values, sizes)) / count,
            "accuracy": right / count, "best_step": values.index(min(values))}
