# why: a correct alternative: one helper runs a phase of the ring for both halves (reduce-scatter adds, all-gather replaces: the combine step is a parameter), results built by torch.cat of per-chunk tensors; the process-group ring posts each step with dist.batch_isend_irecv; every property holds
# expect: {"ring_allreduce-sim-test-values": 2, "ring_allreduce-sim-test-steps": 1, "ring_allreduce-sim-test-bytes": 2, "ring_allreduce-p2p-test-values": 2, "ring_allreduce-p2p-test-traffic": 2, "ring_allreduce-p2p-test-time": 1}
# %% ring_allreduce-sim
import torch
from dlperf import cluster as C


def _phase(cluster, held, first, combine):
    """n - 1 steps; at step k rank r sends its chunk first(r) - k to r + 1, which combines it with its own."""
    n = cluster.n
    for k in range(n - 1):
        which = [(first(r) - k) % n for r in range(n)]
        got = cluster.exchange([(r, (r + 1) % n, held[r][which[r]]) for r in range(n)])
        for r in range(n):
            right = (r + 1) % n
            held[right][which[r]] = combine(held[right][which[r]], got[r])


def ring_allreduce(cluster, tensors):
    n = cluster.n
    held = [[c.clone() for c in t.detach().reshape(-1).tensor_split(n)] for t in tensors]
    _phase(cluster, held, lambda r: r - 1, lambda mine, theirs: mine + theirs)   # rank r ends with chunk r
    _phase(cluster, held, lambda r: r, lambda mine, theirs: theirs)
    return [torch.cat(row).view(tensors[0].shape) for row in held]
# %% ring_allreduce-p2p
import torch
import torch.distributed as dist


def ring_allreduce_p2p(tensor):
    rank, n = dist.get_rank(), dist.get_world_size()
    if n == 1:
        return
    chunks = tensor.view(-1).tensor_split(n)
    right, left = (rank + 1) % n, (rank - 1) % n
    buffer = torch.empty_like(chunks[0])
    for step in range(2 * (n - 1)):
        reduce = step < n - 1
        k = step if reduce else step - (n - 1)
        send_c = (rank - k) % n if reduce else (rank + 1 - k) % n
        recv_c = (send_c - 1) % n
        target = buffer[: chunks[recv_c].numel()] if reduce else chunks[recv_c]
        ops = [dist.P2POp(dist.isend, chunks[send_c], right), dist.P2POp(dist.irecv, target, left)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        if reduce:
            chunks[recv_c].add_(target)
