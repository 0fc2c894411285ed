# why: adds into views of the inputs (+=), so the caller's tensors are overwritten; the values, steps and bytes are right
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 1, "ring_allreduce-sim-test-bytes": 2, "ring_allreduce-p2p-test-values": 0, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-sim
import torch
from dlperf import cluster as C


def ring_allreduce(cluster, tensors):
    n, shape = cluster.n, tensors[0].shape
    held = [list(t.reshape(-1).tensor_split(n)) for t in tensors]
    for k in range(n - 1):
        got = cluster.exchange([(r, (r + 1) % n, held[r][(r - k - 1) % n]) for r in range(n)])
        for r in range(n):
            held[(r + 1) % n][(r - k - 1) % n] += got[r]
    for k in range(n - 1):
        got = cluster.exchange([(r, (r + 1) % n, held[r][(r - k) % n]) for r in range(n)])
        for r in range(n):
            held[(r + 1) % n][(r - k) % n] = got[r]
    return [torch.cat(row).reshape(shape) for row in held]
