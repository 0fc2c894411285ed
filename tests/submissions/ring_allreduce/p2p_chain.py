# why: passes the whole tensor along the ring (accumulate 0 -> 1 -> ... -> n-1, then pass the sum on) with blocking send/recv: right values, but ranks send up to 2S (time is not graded without the right traffic: on a 2-core machine this chain runs about as fast as the ring)
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 2, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-p2p
import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = torch.empty_like(tensor)
    if rank > 0:  # accumulate along the ring
        dist.recv(incoming, left)
        tensor.add_(incoming)
    if rank < n - 1:
        dist.send(tensor, right)
    # the sum is at rank n-1: pass it on to 0, 1, ..., n-2
    if rank == n - 1:
        dist.send(tensor, right)
    else:
        dist.recv(tensor, left)
        if rank < n - 2:
            dist.send(tensor, right)
