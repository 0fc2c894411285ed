# why: calls the collective dist.all_reduce instead of writing the ring with point-to-point operations
# expect: {"ring_allreduce-sim-test-values": 0, "ring_allreduce-sim-test-steps": 0, "ring_allreduce-sim-test-bytes": 0, "ring_allreduce-p2p-test-values": 0, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-p2p
import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    dist.all_reduce(tensor)
