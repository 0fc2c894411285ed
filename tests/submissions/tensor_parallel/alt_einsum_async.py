# why: correct, written differently: f and g with asynchronous all-reduces (async_op=True, then wait), f's forward a clone; the heads computed one by one with einsum and concatenated, the bias added with a broadcast after g
# expect: {"tensor_parallel-test-values": 3, "tensor_parallel-test-gradients": 4, "tensor_parallel-test-traffic": 3}
# %% tensor_parallel-fg
import torch
import torch.distributed as dist


class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        out = grad.contiguous().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, async_op=True).wait()
        return out


class G(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.contiguous().clone()
        dist.all_reduce(out, async_op=True).wait()
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad.clone()


def copy_to_parallel(x):
    return F.apply(x)


def reduce_from_parallel(x):
    return G.apply(x)
# %% tensor_parallel-block
import math

import torch


def parallel_attention(x, wq, bq, wk, bk, wv, bv, wo, bo, heads):
    d = wq.shape[0] // heads
    xf = copy_to_parallel(x)
    q, k, v = (torch.einsum("th,oh->to", xf, w) + b for w, b in ((wq, bq), (wk, bk), (wv, bv)))
    outs = []
    for j in range(heads):
        cols = slice(j * d, (j + 1) * d)
        scores = torch.einsum("id,jd->ij", q[:, cols], k[:, cols]) * (1.0 / math.sqrt(d))
        weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
        weights = weights / weights.sum(dim=-1, keepdim=True)
        outs.append(weights @ v[:, cols])
    partial = torch.einsum("tc,hc->th", torch.cat(outs, dim=1), wo)
    return reduce_from_parallel(partial) + bo.unsqueeze(0)
