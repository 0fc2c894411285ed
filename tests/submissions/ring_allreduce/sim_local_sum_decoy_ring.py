# why: sums every rank's tensor directly (they all sit in the same Python list) and runs 2(n-1) exchanges of right-sized chunks of each rank's own input beside it, whose contents it never uses: the steps and bytes look like a ring, but the sum never travelled (the cluster sees every message: rank r receives only rank r-1's raw input, so for n >= 3 it cannot have computed the sum); the imitated control is sim_local_sum
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 2, "ring_allreduce-p2p-test-traffic": 2, "ring_allreduce-p2p-test-time": 1}
# %% ring_allreduce-sim
import torch
from dlperf import cluster as C


def ring_allreduce(cluster, tensors):
    n = cluster.n
    total = torch.stack([t.detach() for t in tensors]).sum(0)
    if n == 1:
        return [total.clone()]
    chunks = [t.detach().reshape(-1).tensor_split(n) for t in tensors]
    for k in range(2 * (n - 1)):   # the ring's traffic, for the counters
        cluster.exchange([(r, (r + 1) % n, chunks[r][(r - k - 1) % n]) for r in range(n)])
    return [total.clone() for _ in range(n)]
# %% ring_allreduce-p2p: solution
