# why: passes whole tensors around the ring (each rank forwards what it received and adds it): right values, but (n-1) S bytes per rank in n-1 steps
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 2, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-p2p
import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    right, left = (rank + 1) % n, (rank - 1) % n
    passing = tensor.clone()
    incoming = torch.empty_like(tensor)
    for k in range(n - 1):
        requests = [dist.isend(passing, right), dist.irecv(incoming, left)]
        for request in requests:
            request.wait()
        tensor.add_(incoming)
        passing, incoming = incoming, passing
