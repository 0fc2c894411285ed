# why: the running maximum grows but the running sum and the accumulator are not rescaled by exp(m_old - m_new): the blocks seen before the maximum changed are weighted wrongly (the classic online-softmax bug)
# expect: {"ring_attention-test-full": 0, "ring_attention-test-causal": 0, "ring_attention-test-traffic": 0}
# %% ring_attention-blocks: solution
# %% ring_attention-ring
import math

import torch
import torch.distributed as dist


def ring_attention(q, k, v, causal):
    rank, n = dist.get_rank(), dist.get_world_size()
    heads, c, d = q.shape
    m = torch.full((heads, c), float("-inf"))
    total = torch.zeros(heads, c)
    acc = torch.zeros(heads, c, d)
    rows = torch.arange(c)[:, None] + rank * c
    kv = torch.stack([k, v])
    for step in range(n):
        source = (rank - step) % n
        if step > 0:
            incoming = torch.empty_like(kv)
            for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, kv, (rank + 1) % n),
                                                   dist.P2POp(dist.irecv, incoming, (rank - 1) % n)]):
                request.wait()
            kv = incoming
        if causal and source > rank:
            continue
        s = q @ kv[0].transpose(1, 2) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.arange(c)[None, :] + source * c > rows, float("-inf"))
        m = torch.maximum(m, s.amax(dim=-1))
        p = torch.exp(s - m[..., None])
        total = total + p.sum(dim=-1)
        acc = acc + p @ kv[1]
    return acc / total[..., None]
