# why: correct, written differently: merge with torch.logaddexp and a softmax per block, blocking dist.send/dist.recv ordered by parity (even ranks send first, odd ranks receive first) so no rank waits for ever, K and V in two messages
# expect: {"ring_attention-test-full": 3, "ring_attention-test-causal": 4, "ring_attention-test-traffic": 3}
# %% ring_attention-blocks
import math

import torch


def block_attention(q, k, v, q_start, k_start, causal):
    s = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        pos_q = torch.arange(q_start, q_start + q.shape[-2])
        pos_k = torch.arange(k_start, k_start + k.shape[-2])
        s = torch.where(pos_k[None, :] <= pos_q[:, None], s, torch.full_like(s, -math.inf))
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)


def merge(out_a, lse_a, out_b, lse_b):
    lse = torch.logaddexp(lse_a, lse_b)
    return torch.exp(lse_a - lse).unsqueeze(-1) * out_a + torch.exp(lse_b - lse).unsqueeze(-1) * out_b, lse
# %% ring_attention-ring
import torch
import torch.distributed as dist


def ring_attention(q, k, v, causal):
    rank, n = dist.get_rank(), dist.get_world_size()
    c = q.shape[1]
    result = None
    k_cur, v_cur = k, v
    for step in range(n):
        if step:
            k_next, v_next = torch.empty_like(k_cur), torch.empty_like(v_cur)
            if rank % 2 == 0:
                dist.send(k_cur, (rank + 1) % n)
                dist.send(v_cur, (rank + 1) % n)
                dist.recv(k_next, (rank - 1) % n)
                dist.recv(v_next, (rank - 1) % n)
            else:
                dist.recv(k_next, (rank - 1) % n)
                dist.recv(v_next, (rank - 1) % n)
                dist.send(k_cur, (rank + 1) % n)
                dist.send(v_cur, (rank + 1) % n)
            k_cur, v_cur = k_next, v_next
        src = (rank - step) % n
        if causal and src > rank:
            continue
        part = block_attention(q, k_cur, v_cur, rank * c, src * c, causal)
        result = part if result is None else merge(*result, *part)
    return result[0]
