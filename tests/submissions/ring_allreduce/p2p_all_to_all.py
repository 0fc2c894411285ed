# why: a direct all-to-all (each rank sends chunk c straight to rank c, which sums, then sends its summed chunk straight to everyone): right values and exactly a ring's bytes, but not the ring the spec asks for (rank r talks to every rank, not only to (r + 1) % n and (r - 1) % n); the relay's log shows the peers
# expect: {"ring_allreduce-sim-test-values": 2, "ring_allreduce-sim-test-steps": 1, "ring_allreduce-sim-test-bytes": 2, "ring_allreduce-p2p-test-values": 2, "ring_allreduce-p2p-test-traffic": 0, "ring_allreduce-p2p-test-time": 0}
# %% ring_allreduce-sim: solution
# %% ring_allreduce-p2p
import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    if n == 1:
        return
    chunks = tensor.view(-1).tensor_split(n)
    mine = chunks[rank]
    incoming = {peer: torch.empty_like(mine) for peer in range(n) if peer != rank}
    requests = []
    for peer, buffer in incoming.items():   # scatter-reduce: chunk c goes to rank c
        requests += [dist.isend(chunks[peer], peer), dist.irecv(buffer, peer)]
    for request in requests:
        request.wait()
    for buffer in incoming.values():
        mine.add_(buffer)
    requests = []
    for peer in incoming:                   # gather: my summed chunk to everyone
        requests += [dist.isend(mine, peer), dist.irecv(chunks[peer], peer)]
    for request in requests:
        request.wait()
