# why: a correct alternative: the simulated ring with `with cluster.step(): cluster.send(...)` and recv by hand, summing in place into a copy of each rank's tensor (views of the copy, never of the input), chunk r - k sent at step k; the process-group ring with isend and a blocking recv, then the send's wait; every property holds
# expect: {"ring_allreduce-sim-test-values": 2, "ring_allreduce-sim-test-steps": 1, "ring_allreduce-sim-test-bytes": 2, "ring_allreduce-p2p-test-values": 2, "ring_allreduce-p2p-test-traffic": 2, "ring_allreduce-p2p-test-time": 1}
# %% ring_allreduce-sim
import torch
from dlperf import cluster as C


def ring_allreduce(cluster, tensors):
    n = cluster.n
    result = [t.detach().reshape(-1).clone() for t in tensors]     # each rank's own copy
    if n > 1:
        chunks = [row.tensor_split(n) for row in result]             # views of the copies
        for k in range(n - 1):                                      # reduce-scatter
            with cluster.step():
                for r in range(n):
                    cluster.send(r, (r + 1) % n, chunks[r][(r - k) % n])
            for r in range(n):
                chunks[(r + 1) % n][(r - k) % n].add_(cluster.recv(r, (r + 1) % n))
        for k in range(n - 1):                                      # all-gather: rank r holds chunk r + 1
            with cluster.step():
                for r in range(n):
                    cluster.send(r, (r + 1) % n, chunks[r][(r + 1 - k) % n])
            for r in range(n):
                chunks[(r + 1) % n][(r + 1 - k) % n].copy_(cluster.recv(r, (r + 1) % n))
    return [row.reshape(tensors[0].shape) for row in result]
# %% ring_allreduce-p2p
import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).tensor_split(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    for k in range(n - 1):
        send_c, recv_c = (rank - k) % n, (rank - k - 1) % n
        request = dist.isend(chunks[send_c], right)
        incoming = torch.empty_like(chunks[recv_c])
        dist.recv(incoming, left)
        request.wait()
        chunks[recv_c].add_(incoming)
    for k in range(n - 1):
        send_c, recv_c = (rank + 1 - k) % n, (rank - k) % n
        request = dist.isend(chunks[send_c], right)
        dist.recv(chunks[recv_c], left)
        request.wait()
