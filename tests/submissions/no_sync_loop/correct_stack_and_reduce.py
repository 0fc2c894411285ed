# why: a correct alternative written differently: per-step counts kept in lists and reduced after the loop with torch.stack(...).sum(), the weighted losses summed on the device, accuracy counted under torch.no_grad(), loss.data instead of detach(), functools and itertools imported, the best step as min over the indices, and fetch as one .to('cpu') of a float64 tensor split with torch.split
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 3, "no_sync_loop-graphs-test": 2}
# %% no_sync_loop-fetch
import functools
import itertools

import torch


def _convert(t, values):
    if t.dtype is torch.bool:
        return [v != 0 for v in values]
    if t.is_floating_point():
        return values
    return [int(v) for v in values]


def fetch(*tensors):
    if not tensors:
        return []
    sizes = [t.numel() for t in tensors]
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors])
    pieces = torch.split(flat.to("cpu"), sizes)
    result = []
    for t, piece in zip(tensors, pieces):
        values = _convert(t, piece.tolist())
        result.append(values if t.ndim else values[0])
    return result
# %% no_sync_loop-train
import functools

import torch


def train_epoch(model, optimizer, loss_fn, batches):
    losses, weighted, hits, sizes = [], [], [], []
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.data)
        weighted.append(loss.data.double() * y.shape[0])
        with torch.no_grad():
            hits.append((logits.argmax(1) == y).sum())
        sizes.append(y.shape[0])
    count = functools.reduce(lambda a, b: a + b, sizes)
    stacked = torch.stack(losses)
    mean = torch.stack(weighted).sum() / count
    values, mean_loss, right = fetch(stacked, mean, torch.stack(hits).sum())
    best = min(range(len(values)), key=lambda i: values[i])
    return {"losses": values, "mean_loss": mean_loss, "accuracy": right / count, "best_step": best}
