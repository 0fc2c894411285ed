# why: a correct alternative: sums the weighted loss and the right predictions in float64 and int64 tensors on the batches' device (total += loss.detach() * n), finds the best step with argmin on the device, and reads everything once with .cpu() then .tolist() on the host copy: one synchronisation, no kept graph
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch
import torch


def fetch(*tensors):
    if len(tensors) == 0:
        return []
    host = torch.cat([t.detach().to(torch.float64).reshape(-1) for t in tensors]).cpu()
    numbers = host.tolist()
    out = []
    for t in tensors:
        chunk, numbers = numbers[:t.numel()], numbers[t.numel():]
        if t.dtype == torch.bool:
            chunk = [bool(v) for v in chunk]
        elif t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8):
            chunk = [int(v) for v in chunk]
        out.append(chunk if t.dim() == 1 else chunk[0])
    return out
# %% no_sync_loop-train
import torch


def train_epoch(model, optimizer, loss_fn, batches):
    device = batches[0][0].device
    total = torch.zeros((), dtype=torch.float64, device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    losses = []
    count = 0
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        loss = loss.detach()
        losses.append(loss)
        total += loss.double() * len(y)
        correct += (logits.argmax(dim=1) == y).sum()
        count += len(y)
    stacked = torch.stack(losses)
    values, weighted, right, best = fetch(stacked, total, correct, stacked.argmin())
    return {"losses": values, "mean_loss": weighted / count, "accuracy": right / count, "best_step": best}
