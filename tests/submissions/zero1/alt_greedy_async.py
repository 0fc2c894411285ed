# why: a correct solution written differently: the partition walks the ranks' boundaries with integer comparisons (a while loop, no division), the class keeps the owned indices, zero_grad branches once, and step() starts every broadcast with async_op=True and then waits for each handle; a TA gives full marks
# expect: {"zero1-test-values": 4, "zero1-test-state": 3, "zero1-test-traffic": 3}
# %% zero1-partition
def partition(sizes, world_size):
    total = sum(sizes)
    owners, rank, before = [], 0, 0
    for size in sizes:
        # move on while this parameter's first element lies at or past the end of rank's share
        while rank < world_size - 1 and before * world_size >= (rank + 1) * total:
            rank += 1
        owners.append(rank)
        before += size
    return owners
# %% zero1-optimizer
import torch
import torch.distributed as dist


class ShardedOptimizer:
    def __init__(self, params, optimizer_class, **kwargs):
        self.params = list(params)
        self.owners = partition([p.numel() for p in self.params], dist.get_world_size())
        self.rank = dist.get_rank()
        self.owned = [i for i, owner in enumerate(self.owners) if owner == self.rank]
        if self.owned:
            self.optimizer = optimizer_class([self.params[i] for i in self.owned], **kwargs)
        else:
            self.optimizer = None

    def zero_grad(self, set_to_none=True):
        if set_to_none:
            for p in self.params:
                p.grad = None
            return
        for p in self.params:
            if p.grad is not None:
                p.grad.detach_()
                p.grad.zero_()

    @torch.no_grad()
    def step(self):
        if self.optimizer is not None:
            self.optimizer.step()
        handles = [dist.broadcast(p.data, src=owner, async_op=True) for p, owner in zip(self.params, self.owners)]
        for handle in handles:
            handle.wait()
