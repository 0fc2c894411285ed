# why: reduce to rank 0, then broadcast from it, with point-to-point calls: right values, but rank 0 sends (n-1) S (time is not graded without the right traffic: on a 2-core machine it runs about as fast as the ring)
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 2, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-p2p
import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        buffers = [torch.empty_like(tensor) for _ in range(1, n)]
        for request in [dist.irecv(b, src) for src, b in enumerate(buffers, 1)]:
            request.wait()
        for b in buffers:
            tensor.add_(b)
        for request in [dist.isend(tensor, dst) for dst in range(1, n)]:
            request.wait()
    else:
        dist.send(tensor, 0)
        dist.recv(tensor, 0)
