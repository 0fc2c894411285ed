"""What the pipeline tests share: one-process training of the stages' model, written out independently of
the library's own reference (``dlperf.parallel.pipeline.reference``)."""

from __future__ import annotations

import torch

from dlperf.parallel import pipeline as P


def one_process_training(width: int, depth: int, rows: int, steps: int) -> list[torch.Tensor]:
    """One process, the whole batch: SGD on the mean squared error; the parameters after ``steps`` steps."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Tanh())
                                  for _ in range(depth)])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in P.batches(steps, rows, width):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach() for p in model.parameters()]
