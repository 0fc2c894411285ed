# why: correct, written differently: one flattened broadcast (torch._utils' flatten/unflatten, which the rules allow), hooks on the gradient itself (register_hook) that keep the gradient they are given, private attributes of its own, the average taken before the all-reduce, and a parameter without a gradient given the zero average
# expect: {"ddp_buckets-test-values": 4, "ddp_buckets-test-buckets": 3, "ddp_buckets-test-overlap": 3}
# %% ddp_buckets-assign: solution
# %% ddp_buckets-wrapper
import torch
import torch.distributed as dist
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors


class BucketedDDP(torch.nn.Module):
    """Buckets all-reduced from gradient hooks, in bucket order."""

    def __init__(self, module, bucket_cap_bytes):
        super().__init__()
        self.module = module
        self._params = list(module.parameters())
        with torch.no_grad():
            flat = _flatten_dense_tensors([p.data for p in self._params])
            dist.broadcast(flat, src=0)
            for p, value in zip(self._params, _unflatten_dense_tensors(flat, [p.data for p in self._params])):
                p.copy_(value)
        self._buckets = assign_buckets([p.numel() * p.element_size() for p in self._params], bucket_cap_bytes)
        self._where = {i: b for b, members in enumerate(self._buckets) for i in members}
        self._start_step()
        for i, p in enumerate(self._params):
            p.register_hook(self._hook_for(i))

    def _start_step(self):
        self._grads = {}
        self._waiting = [set(members) for members in self._buckets]
        self._sent = []

    def _hook_for(self, i):
        def hook(grad):
            self._grads[i] = grad
            self._waiting[self._where[i]].discard(i)
            while len(self._sent) < len(self._buckets) and not self._waiting[len(self._sent)]:
                self._send(len(self._sent))
            return grad
        return hook

    def _send(self, b):
        members = self._buckets[b]
        grads = [self._grads.get(i, torch.zeros_like(self._params[i])) for i in members]
        flat = _flatten_dense_tensors(grads) / dist.get_world_size()
        self._sent.append((members, flat, dist.all_reduce(flat, async_op=True)))

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def finish_gradient_synchronization(self):
        while len(self._sent) < len(self._buckets):
            self._send(len(self._sent))
        for members, flat, handle in self._sent:
            handle.wait()
            like = [self._params[i] for i in members]
            for i, g in zip(members, _unflatten_dense_tensors(flat, like)):
                if self._params[i].grad is None:
                    self._params[i].grad = g.clone()
                else:
                    self._params[i].grad.copy_(g)
        self._start_step()
