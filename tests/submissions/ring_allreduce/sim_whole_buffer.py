# why: passes the whole tensor around the ring (accumulate 0 -> 1 -> ... -> n-1, then pass the sum on): right values in 2(n-1) steps, but ranks send up to 2S instead of 2(n-1)/n S and only one link works per step
# expect: {"ring_allreduce-sim-test-values": 2, "ring_allreduce-sim-test-steps": 1, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 0, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-sim
import torch
from dlperf import cluster as C


def ring_allreduce(cluster, tensors):
    n = cluster.n
    acc = tensors[0].clone()
    for r in range(n - 1):  # accumulate along the ring
        (got,) = cluster.exchange([(r, r + 1, acc)])
        acc = got + tensors[r + 1]
    out = [None] * n
    out[n - 1] = acc
    for r in range(n - 1, 2 * n - 2):  # pass the sum on: n-1 -> 0 -> 1 -> ... -> n-2
        src, dst = r % n, (r + 1) % n
        (out[dst],) = cluster.exchange([(src, dst, out[src])])
    return out
