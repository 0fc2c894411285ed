# why: reuses the input tensors k and v as the ring's buffers (each arriving block copied into them): right values and traffic, but the caller's k and v are overwritten
# expect: {"ring_attention-test-full": 0, "ring_attention-test-causal": 0, "ring_attention-test-traffic": 3}
# %% ring_attention-blocks: solution
# %% ring_attention-ring
import torch
import torch.distributed as dist


def ring_attention(q, k, v, causal):
    rank, n = dist.get_rank(), dist.get_world_size()
    c = q.shape[-2]
    out, lse = block_attention(q, k, v, rank * c, rank * c, causal)
    k_in, v_in = torch.empty_like(k), torch.empty_like(v)
    for step in range(1, n):
        requests = [dist.isend(k, (rank + 1) % n), dist.isend(v, (rank + 1) % n),
                    dist.irecv(k_in, (rank - 1) % n), dist.irecv(v_in, (rank - 1) % n)]
        for request in requests:
            request.wait()
        k.copy_(k_in)
        v.copy_(v_in)
        source = (rank - step) % n
        if not (causal and source > rank):
            out, lse = merge(out, lse, *block_attention(q, k, v, rank * c, source * c, causal))
    return out
