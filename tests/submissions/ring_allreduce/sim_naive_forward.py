# why: reduce to rank 0 and broadcast, forwarding whole tensors through the neighbours: right values, 2(n-1) steps, but the ranks next to rank 0 forward (n-1) S
# expect: {"ring_allreduce-sim-test-values": 2, "ring_allreduce-sim-test-steps": 1, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 0, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-sim
import torch
from dlperf import cluster as C


def ring_allreduce(cluster, tensors):
    n = cluster.n
    if n == 1:
        return [tensors[0].clone()]
    # rank r > 0 queues the tensors it must pass towards rank 0 (to r - 1)
    queue = [[] if r == 0 else [tensors[r]] for r in range(n)]
    received = []
    for _ in range(n - 1):
        msgs = [(r, r - 1, queue[r].pop(0)) for r in range(1, n) if queue[r]]
        got = cluster.exchange(msgs)
        for (src, dst, _), t in zip(msgs, got):
            (received if dst == 0 else queue[dst]).append(t)
    total = tensors[0] + sum(received)
    out = [None] * n
    out[0] = total
    for r in range(n - 1):  # broadcast 0 -> 1 -> ... -> n-1
        (out[r + 1],) = cluster.exchange([(r, r + 1, out[r])])
    return out
