"""A worker for tests/test_planner.py: the expert-parallel layer of dlperf.parallel.experts with routing made even."""

from __future__ import annotations

import torch
import torch.distributed as dist

from dlperf.parallel import experts as EP
from dlperf.parallel.tensor import Traffic


def balanced_moe(tokens: int, d: int, ffn: int, experts: int, k: int) -> dict:
    """Token ``j`` of every rank goes to experts ``j, j+1, .. j+k-1 (mod E)``, so that each expert gets ``T k / E``
    of each rank's assignments and none is dropped (capacity factor 1): the traffic the planner assumes.  Returns
    this rank's ``Traffic`` calls of one forward pass and the kept assignments."""
    rank, world = dist.get_rank(), dist.get_world_size()
    x = EP.moe_inputs(tokens * world, d)[0].chunk(world)[rank]
    moe = EP.MoE(d, ffn, experts, k, 1.0)
    logits = torch.full((tokens, experts), -10.0)
    for j in range(tokens):
        for c in range(k):
            logits[j, (j + c) % experts] = 10.0 - c               # first choice j, then j + 1, ...
    routing = EP.route(logits, k, 1.0)
    moe.route = lambda _x: routing
    traffic = Traffic()
    EP.ep_forward(moe, x, traffic)
    return {"traffic": list(traffic.calls), "kept": int(routing.kept.sum())}
