# why: correct, written differently: the rule written by opening a new bucket when the current one already holds the cap, one record (a dict) per bucket keyed by the parameter tensors, hooks that receive the parameter, torch.split to write back, ReduceOp.SUM named, a parameter without a gradient left at None
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign
def assign_buckets(nbytes, cap_bytes):
    buckets = [[]]
    for i in list(range(len(nbytes)))[::-1]:
        if buckets[-1] and sum(nbytes[j] for j in buckets[-1]) >= cap_bytes:
            buckets.append([])
        buckets[-1].append(i)
    return [b for b in buckets if b]
# %% ddp_buckets-wrapper
import torch
import torch.distributed as dist


class BucketedDDP(torch.nn.Module):
    def __init__(self, module, bucket_cap_bytes):
        super().__init__()
        self.module = module
        params = list(module.parameters())
        for p in params:
            with torch.no_grad():
                dist.broadcast(p.data, 0)
        sizes = [p.numel() * p.element_size() for p in params]
        self.buckets = [{"params": [params[i] for i in members], "ready": 0, "work": None, "flat": None}
                        for members in assign_buckets(sizes, bucket_cap_bytes)]
        self.owner = {}
        for bucket in self.buckets:
            for p in bucket["params"]:
                self.owner[p] = bucket
        self.launched = 0
        for p in params:
            p.register_post_accumulate_grad_hook(self.on_grad)

    def on_grad(self, p):
        self.owner[p]["ready"] += 1
        while self.launched < len(self.buckets):
            bucket = self.buckets[self.launched]
            if bucket["ready"] < len(bucket["params"]):
                break
            self.start(bucket)

    def start(self, bucket):
        parts = [p.grad.flatten() if p.grad is not None else p.new_zeros(p.numel()) for p in bucket["params"]]
        bucket["flat"] = torch.cat(parts)
        bucket["work"] = dist.all_reduce(bucket["flat"], op=dist.ReduceOp.SUM, async_op=True)
        self.launched += 1

    def forward(self, x):
        return self.module(x)

    def finish_gradient_synchronization(self):
        for bucket in self.buckets[self.launched:]:
            self.start(bucket)
        world = dist.get_world_size()
        for bucket in self.buckets:
            bucket["work"].wait()
            pieces = torch.split(bucket["flat"] / world, [p.numel() for p in bucket["params"]])
            for p, g in zip(bucket["params"], pieces):
                if p.grad is not None:
                    p.grad.copy_(g.view_as(p))
            bucket["ready"], bucket["work"], bucket["flat"] = 0, None, None
        self.launched = 0
