# why: sends each chunk with cluster.send outside a `with cluster.step():` block, so every message is a step of its own: n times too many steps (values and bytes right)
# expect: {"ring_allreduce-sim-test-values": 2, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 2, "ring_allreduce-p2p-test-values": 0, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-sim
import torch
from dlperf import cluster as C


def ring_allreduce(cluster, tensors):
    n, shape = cluster.n, tensors[0].shape
    held = [list(t.reshape(-1).tensor_split(n)) for t in tensors]
    for k in range(n - 1):
        for r in range(n):
            cluster.send(r, (r + 1) % n, held[r][(r - k - 1) % n])
        for r in range(n):
            dst, c = (r + 1) % n, (r - k - 1) % n
            held[dst][c] = held[dst][c] + cluster.recv(r, dst)
    for k in range(n - 1):
        for r in range(n):
            cluster.send(r, (r + 1) % n, held[r][(r - k) % n])
        for r in range(n):
            held[(r + 1) % n][(r - k) % n] = cluster.recv(r, (r + 1) % n)
    return [torch.cat(row).reshape(shape) for row in held]
