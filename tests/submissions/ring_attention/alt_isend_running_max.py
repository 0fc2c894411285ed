# why: correct, written differently: no merge of (out, lse) pairs but FlashAttention's running maximum, running sum and unnormalised accumulator, rescaled by exp(m_old - m_new) at every block; K and V as two dist.isend/dist.irecv pairs per step
# expect: {"ring_attention-test-full": 3, "ring_attention-test-causal": 4, "ring_attention-test-traffic": 3}
# %% ring_attention-blocks
import torch


def block_attention(q, k, v, q_start, k_start, causal):
    raise NotImplementedError


def merge(out_a, lse_a, out_b, lse_b):
    raise NotImplementedError
# %% ring_attention-ring
import math

import torch
import torch.distributed as dist


def ring_attention(q, k, v, causal):
    rank, n = dist.get_rank(), dist.get_world_size()
    heads, c, d = q.shape
    right, left = (rank + 1) % n, (rank - 1) % n
    m = torch.full((heads, c), float("-inf"))
    total = torch.zeros(heads, c)
    acc = torch.zeros(heads, c, d)
    rows = torch.arange(c)[:, None] + rank * c
    kb, vb = k, v
    for step in range(n):
        source = (rank - step) % n
        if step > 0:
            k_in, v_in = torch.empty_like(kb), torch.empty_like(vb)
            requests = [dist.isend(kb, right), dist.irecv(k_in, left), dist.isend(vb, right), dist.irecv(v_in, left)]
            for request in requests:
                request.wait()
            kb, vb = k_in, v_in
        if causal and source > rank:
            continue
        s = q @ kb.transpose(1, 2) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.arange(c)[None, :] + source * c > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1))
        rescale = torch.exp(m - m_new)
        p = torch.exp(s - m_new[..., None])
        total = total * rescale + p.sum(dim=-1)
        acc = acc * rescale[..., None] + p @ vb
        m = m_new
    return acc / total[..., None]
