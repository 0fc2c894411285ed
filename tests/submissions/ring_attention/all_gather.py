# why: gathers every rank's K and V with dist.all_gather and attends over the whole sequence at once: right values, but every rank holds the whole sequence's keys, which context parallelism exists to avoid (the relay counts the collectives)
# expect: {"ring_attention-test-full": 3, "ring_attention-test-causal": 4, "ring_attention-test-traffic": 0}
# %% ring_attention-blocks: solution
# %% ring_attention-ring
import torch
import torch.distributed as dist


def ring_attention(q, k, v, causal):
    rank, n = dist.get_rank(), dist.get_world_size()
    ks = [torch.empty_like(k) for _ in range(n)]
    vs = [torch.empty_like(v) for _ in range(n)]
    dist.all_gather(ks, k.contiguous())
    dist.all_gather(vs, v.contiguous())
    out, lse = block_attention(q, torch.cat(ks, dim=1), torch.cat(vs, dim=1), rank * q.shape[1], 0, causal)
    return out
