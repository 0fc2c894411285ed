# why: reads every loss with .item() but switches the grader's counter off in its own process first: the count may say 1, but the reading refuses the import and the assignments to the library (which costs the points observed in that process: synchronisations and graphs), and the meta run, counted in the grader's process, stops at the first step
# expect: {"no_sync_loop-fetch-test": 2, "no_sync_loop-results-test": 3, "no_sync_loop-syncs-test": 0, "no_sync_loop-graphs-test": 0}
# %% no_sync_loop-fetch: solution
# %% no_sync_loop-train
import torch

import dlperf.grading.probes.no_sync_loop as counter

counter.SyncCounter.__enter__ = lambda self: self
counter.SyncCounter.__exit__ = lambda self, *exc: None


def train_epoch(model, optimizer, loss_fn, batches):
    losses, sizes, right = [], [], 0
    for x, y in batches:
        optimizer.zero_grad()
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        right += (logits.argmax(dim=1) == y).sum().item()
        sizes.append(len(y))
    count = sum(sizes)
    return {"losses": losses, "mean_loss": sum(v * n for v, n in zip(losses, sizes)) / count,
            "accuracy": right / count, "best_step": losses.index(min(losses))}
