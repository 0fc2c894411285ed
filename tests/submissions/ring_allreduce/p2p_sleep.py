# why: a correct chunked ring that sleeps 400 ms after every step "to let the neighbours catch up": right values and traffic, but several times slower than the reference ring (400 ms, not 50 ms, so that a loaded grading machine, which slows the reference too, cannot bring it under 3x)
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 2, "ring_allreduce-p2p-test-traffic": 2, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-p2p
import time

import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = tensor.view(-1).tensor_split(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    for k in range(n - 1):
        send_c, recv_c = (rank - k) % n, (rank - k - 1) % n
        incoming = torch.empty_like(chunks[recv_c])
        requests = [dist.isend(chunks[send_c], right), dist.irecv(incoming, left)]
        for request in requests:
            request.wait()
        chunks[recv_c].add_(incoming)
        time.sleep(0.4)  # let the neighbours catch up
    for k in range(n - 1):
        send_c, recv_c = (rank + 1 - k) % n, (rank - k) % n
        requests = [dist.isend(chunks[send_c], right), dist.irecv(chunks[recv_c], left)]
        for request in requests:
            request.wait()
        time.sleep(0.4)
