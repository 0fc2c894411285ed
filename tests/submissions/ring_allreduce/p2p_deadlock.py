# why: blocking dist.send then dist.recv on every rank: on gloo each send waits for the neighbour's recv, so every rank waits for ever (caught by the 5 s process-group timeout)
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 0, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-p2p
import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).tensor_split(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    for k in range(n - 1):
        send_c, recv_c = (rank - k) % n, (rank - k - 1) % n
        incoming = torch.empty_like(chunks[recv_c])
        dist.send(chunks[send_c], right)
        dist.recv(incoming, left)
        chunks[recv_c].add_(incoming)
    for k in range(n - 1):
        send_c, recv_c = (rank + 1 - k) % n, (rank - k) % n
        dist.send(chunks[send_c], right)
        dist.recv(chunks[recv_c], left)
