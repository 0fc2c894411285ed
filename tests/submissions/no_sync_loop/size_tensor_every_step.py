# why: "keeps everything on the device" by multiplying each loss by torch.tensor(len(y), device=x.device): every step copies a Python number to the device, a blocking copy PyTorch waits for (a synchronisation per step); the meta device makes such a tensor without copying, so only the count in the student's process sees this one
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, count = [], 0
    total = torch.zeros((), dtype=torch.float64, device=batches[0][0].device)
    correct = torch.zeros((), dtype=torch.int64, device=batches[0][0].device)
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        total += loss.detach().double() * torch.tensor(len(y), dtype=torch.float64, device=x.device)
        correct += (logits.argmax(dim=1) == y).sum()
        count += len(y)
    values, weighted, right = fetch(torch.stack(losses), total, correct)
    return {"losses": values, "mean_loss": weighted / count, "accuracy": right / count,
            "best_step": values.index(min(values))}
