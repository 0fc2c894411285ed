# why: correct, written differently: the three projections as one matrix product of the stacked shards (x @ [wq; wk; wv]^T), the heads as a batch dimension with torch.bmm and permute
# expect: {"tensor_parallel-test-values": 3, "tensor_parallel-test-gradients": 4, "tensor_parallel-test-traffic": 3}
# %% tensor_parallel-fg: solution
# %% tensor_parallel-block
import math

import torch


def parallel_attention(x, wq, bq, wk, bk, wv, bv, wo, bo, heads):
    tokens, width = x.shape[0], wq.shape[0]
    d = width // heads
    x = copy_to_parallel(x)
    qkv = x @ torch.cat([wq, wk, wv]).T + torch.cat([bq, bk, bv])
    q, k, v = (t.reshape(tokens, heads, d).permute(1, 0, 2) for t in qkv.split(width, dim=1))
    probs = torch.softmax(torch.bmm(q, k.transpose(1, 2)) / math.sqrt(d), dim=-1)
    a = torch.bmm(probs, v).permute(1, 0, 2).reshape(tokens, width)
    return reduce_from_parallel(torch.matmul(a, wo.T)) + bo
