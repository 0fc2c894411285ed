# why: a correct solution written differently: the partition from itertools.accumulate (exclusive prefix sums) in one comprehension, the class keeps its bookkeeping in private attributes of its own (self._shards, a dict from rank to parameters) and exposes the inner optimizer as self.optimizer, broadcasts the parameters rank by rank with a barrier after each step; a TA gives full marks
# expect: {"zero1-test-values": 4, "zero1-test-state": 3, "zero1-test-traffic": 3}
# %% zero1-partition
import itertools


def partition(sizes, world_size):
    total = sum(sizes)
    starts = itertools.accumulate(sizes, initial=0)
    return [world_size * start // total for start, _ in zip(starts, sizes)]
# %% zero1-optimizer
import math

import torch
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_class, **kwargs):
        self._params = list(params)
        world = dist.get_world_size()
        owners = partition([math.prod(p.shape) for p in self._params], world)
        self._shards = {r: [] for r in range(world)}
        for p, owner in zip(self._params, owners):
            self._shards[owner].append(p)
        mine = self._shards[dist.get_rank()]
        self.optimizer = optimizer_class(mine, **kwargs) if len(mine) > 0 else None

    def zero_grad(self, set_to_none=True):
        for p in self._params:
            if p.grad is None:
                continue
            if set_to_none:
                p.grad = None
            else:
                p.grad.zero_()

    def step(self):
        if self.optimizer is not None:
            self.optimizer.step()
        with torch.no_grad():
            for owner, shard in self._shards.items():
                for p in shard:
                    dist.broadcast(p, owner)
        dist.barrier()
