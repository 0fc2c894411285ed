# why: computes the sum from all the tensors directly, without sending anything (the data never moves between ranks)
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 0, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-sim
import torch
from dlperf import cluster as C


def ring_allreduce(cluster, tensors):
    total = torch.stack(list(tensors)).sum(0)
    return [total.clone() for _ in tensors]
