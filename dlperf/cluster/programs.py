"""Reference collectives, written as step programs that run on a :class:`~dlperf.cluster.Cluster`."""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

import torch

from .machine import Cluster, Message, _add, _cat


# --------------------------------------------------------------------------------------------
# Reference collectives, written as step programs
# --------------------------------------------------------------------------------------------
#
# A program is a generator that yields (label, messages) for its next step and is sent back
# the tensors they delivered; it returns its result.  _run drives several programs in lockstep
# (their step k shares one cluster step), which is how the double ring runs its two rings at once.

Program = Generator[tuple[str, list[Message]], list[torch.Tensor], Any]


def _run(cluster: Cluster, programs: Sequence[Program]) -> list[Any]:
    results: list[Any] = [None] * len(programs)
    current: dict[int, tuple[str, list[Message]]] = {}
    for i, program in enumerate(programs):
        try:
            current[i] = next(program)
        except StopIteration as stop:
            results[i] = stop.value
    while current:
        label = next(iter(current.values()))[0]
        flat = [m for _, msgs in current.values() for m in msgs]
        delivered = cluster.exchange(flat, label=label)
        following: dict[int, tuple[str, list[Message]]] = {}
        pos = 0
        for i, (_, msgs) in current.items():
            part, pos = delivered[pos:pos + len(msgs)], pos + len(msgs)
            try:
                following[i] = programs[i].send(part)
            except StopIteration as stop:
                results[i] = stop.value
        current = following
    return results


def _ranks(cluster: Cluster, count: int, ranks: Sequence[int] | None, what: str = "tensors") -> tuple[int, ...]:
    chosen = tuple(range(cluster.n)) if ranks is None else tuple(ranks)
    if len(chosen) != count:
        raise ValueError(f"{count} {what} for {len(chosen)} ranks {chosen}: give one per rank")
    if len(set(chosen)) != len(chosen) or any(not 0 <= r < cluster.n for r in chosen):
        raise ValueError(f"ranks must be distinct ranks of the cluster, got {chosen}")
    if count == 0:
        raise ValueError("a collective needs at least one rank")
    return chosen


def _check_same(tensors: Sequence[torch.Tensor]) -> None:
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(f"all ranks need the same shape and dtype: {tuple(first.shape)} {first.dtype} "
                             f"vs {tuple(t.shape)} {t.dtype}")


def _reduce_scatter_program(chunks: list[list[torch.Tensor]], ranks: tuple[int, ...]) -> Program:
    """Ring reduce-scatter: ``chunks[p][c]`` is chunk ``c`` held by ``ranks[p]``; returns chunk ``p`` summed, per ``p``.

    Step ``k`` (``0 .. n-2``): position ``p`` sends its partial sum of chunk
    ``(p - k - 1) mod n`` to position ``p + 1``, which adds its own.  After
    ``n - 1`` steps position ``p`` holds chunk ``p`` summed over all ranks.
    """
    n = len(ranks)
    acc = [list(row) for row in chunks]
    for k in range(n - 1):
        msgs = []
        for p in range(n):
            c = (p - k - 1) % n
            note = f"chunk {c}, sum of {k + 1} rank{'s' if k else ''}"
            msgs.append(Message(ranks[p], ranks[(p + 1) % n], acc[p][c], note))
        got = yield f"reduce-scatter {k + 1}/{n - 1}", msgs
        for p in range(n):  # got[p] arrived at position p + 1
            q, c = (p + 1) % n, (p - k - 1) % n
            acc[q][c] = _add(acc[q][c], got[p])
    return [acc[p][p] for p in range(n)]


def _all_gather_program(owned: list[torch.Tensor], ranks: tuple[int, ...]) -> Program:
    """Ring all-gather: ``owned[p]`` is chunk ``p`` held by ``ranks[p]``; returns every position's list of chunks.

    Step ``k`` (``0 .. n-2``): position ``p`` forwards chunk ``(p - k) mod n``
    (its own at ``k = 0``, then the one it has just received) to ``p + 1``.
    """
    n = len(ranks)
    have: list[list[torch.Tensor | None]] = [[None] * n for _ in range(n)]
    for p in range(n):
        have[p][p] = owned[p]
    for k in range(n - 1):
        msgs = []
        for p in range(n):
            c = (p - k) % n
            msgs.append(Message(ranks[p], ranks[(p + 1) % n], have[p][c], f"chunk {c}, final"))
        got = yield f"all-gather {k + 1}/{n - 1}", msgs
        for p in range(n):
            have[(p + 1) % n][(p - k) % n] = got[p]
    return have


def _allreduce_program(flat: list[torch.Tensor], ranks: tuple[int, ...]) -> Program:
    n = len(ranks)
    chunks = [list(t.tensor_split(n)) for t in flat]
    owned = yield from _reduce_scatter_program(chunks, ranks)
    have = yield from _all_gather_program(owned, ranks)
    return [_cat(row) for row in have]


def ring_reduce_scatter(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Ring reduce-scatter: ``result[p]`` is chunk ``p`` of the flattened sum, held by ``ranks[p]``.

    ``tensors[p]`` is held by ``ranks[p]`` (default: rank ``p``); the ring runs
    ``ranks[0] -> ranks[1] -> ... -> ranks[0]``.  Chunks are
    ``flatten().tensor_split(n)`` (uneven when ``n`` does not divide the size:
    the first ``numel % n`` chunks have one element more).

    Cost: ``n - 1`` steps; each rank sends ``n - 1`` chunks, ``(n-1)/n * S``
    bytes when ``n`` divides the size; on a ring of ``(alpha, beta)`` links,
    ``(n-1) alpha + (n-1)/n * S / beta`` (:func:`ring_reduce_scatter_time`).
    """
    order = _ranks(cluster, len(tensors), ranks)
    _check_same(tensors)
    n = len(order)
    if n == 1:
        return [tensors[0].detach().reshape(-1).clone()]
    chunks = [list(t.detach().reshape(-1).tensor_split(n)) for t in tensors]
    (out,) = _run(cluster, [_reduce_scatter_program(chunks, order)])
    return out


def ring_all_gather(
    cluster: Cluster, chunks: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Ring all-gather: every rank ends with ``torch.cat`` of all the (flattened) chunks, in order.

    ``chunks[p]`` is held by ``ranks[p]`` (default: rank ``p``); chunks may
    differ in size but not in dtype.  Cost: ``n - 1`` steps; each rank sends
    every chunk but one; with equal chunks of a total ``S`` bytes on a ring,
    ``(n-1) alpha + (n-1)/n * S / beta`` (:func:`ring_all_gather_time`).
    """
    order = _ranks(cluster, len(chunks), ranks, "chunks")
    if len({c.dtype for c in chunks}) != 1:
        raise ValueError("all chunks need the same dtype")
    owned = [c.detach().reshape(-1) for c in chunks]
    if len(order) == 1:
        return [owned[0].clone()]
    (have,) = _run(cluster, [_all_gather_program(owned, order)])
    return [_cat(row) for row in have]


def ring_allreduce(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Ring allreduce = ring reduce-scatter then ring all-gather, ``n`` chunks (bandwidth-optimal).

    ``tensors[p]`` is held by ``ranks[p]`` (default: rank ``p``), the ring runs
    in that order.  Returns one tensor per rank, the sum, with the input's
    shape and dtype; inputs are not modified and outputs do not alias them.
    Every rank gets bit-identical values (each chunk is summed once, by its
    owner, and then copied).

    Cost: exactly ``2(n-1)`` steps; position ``p`` sends ``2S - c_p - c_{p+1}``
    bytes (``c_i`` = bytes of chunk ``i``; :func:`ring_allreduce_bytes_sent`),
    that is ``2(n-1)/n * S`` when ``n`` divides the size; on a ring of
    ``(alpha, beta)`` links ``T = 2(n-1) alpha + 2(n-1)/n * S / beta``
    (:func:`ring_allreduce_time`).  ``n = 1``: no communication, 0 steps.
    """
    order = _ranks(cluster, len(tensors), ranks)
    _check_same(tensors)
    shape = tensors[0].shape
    if len(order) == 1:
        return [tensors[0].detach().clone()]
    flat = [t.detach().reshape(-1) for t in tensors]
    (out,) = _run(cluster, [_allreduce_program(flat, order)])
    return [t.reshape(shape) for t in out]


def multi_ring_allreduce(
    cluster: Cluster,
    tensors: Sequence[torch.Tensor],
    *,
    rings: Sequence[Sequence[int]] | None = None,
    weights: Sequence[float] | None = None,
) -> list[torch.Tensor]:
    """Allreduce over several rings at once (the double ring of :func:`dgx1_double_ring`).

    ``tensors[r]`` is held by rank ``r``; ``rings`` (default:
    ``topology.rings``) are orders of all ranks.  The flattened tensor is cut
    into one part per ring, in proportion to ``weights`` (default: each ring's
    bottleneck bandwidth, :meth:`Topology.ring_bandwidth`), and each part is
    ring-allreduced on its ring; step ``k`` of every ring shares one cluster
    step.  With parts proportional to bandwidths and disjoint rings the time
    is that of one ring whose bandwidth is the sum:
    ``2(n-1) alpha + 2(n-1)/n * S / sum(beta_ring)``.
    """
    n = cluster.n
    order = _ranks(cluster, len(tensors), None)
    _check_same(tensors)
    rings = [tuple(r) for r in (rings if rings is not None else cluster.topology.rings)]
    if not rings:
        raise ValueError("no rings: pass rings= or use a topology that names its rings")
    for r in rings:
        if sorted(r) != list(order):
            raise ValueError(f"each ring must visit every rank once, got {r}")
    if weights is None:
        weights = [cluster.topology.ring_bandwidth(r) for r in rings]
    if len(weights) != len(rings) or any(not w > 0 for w in weights):
        raise ValueError(f"one positive weight per ring, got {weights}")
    shape = tensors[0].shape
    if n == 1:
        return [tensors[0].detach().clone()]
    numel = tensors[0].numel()
    total, cum, bounds = float(sum(weights)), 0.0, []
    for w in weights[:-1]:
        cum += w
        bounds.append(round(numel * cum / total))
    parts = [t.detach().reshape(-1).tensor_split(bounds) for t in tensors]
    programs = []
    for i, ring_order in enumerate(rings):
        # the program indexes by ring position; tensors are indexed by rank
        programs.append(_allreduce_program([parts[r][i] for r in ring_order], ring_order))
    results = _run(cluster, programs)
    out = []
    for r in range(n):
        pieces = [results[i][rings[i].index(r)] for i in range(len(rings))]
        out.append(_cat(pieces).reshape(shape))
    return out


def _naive_program(tensors: Sequence[torch.Tensor], ranks: tuple[int, ...]) -> Program:
    root, others = ranks[0], range(1, len(ranks))
    got = yield "reduce to the root", [Message(ranks[p], root, tensors[p], f"all of rank {ranks[p]}") for p in others]
    total = tensors[0]
    for t in got:
        total = _add(total, t)
    got = yield "broadcast from the root", [Message(root, ranks[p], total, "the sum") for p in others]
    return [total.clone()] + list(got)


def naive_allreduce(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Reduce to a root, then broadcast from it: the root is ``ranks[0]`` (default rank 0).

    Step 1: every other rank sends its whole tensor to the root, at once; the
    root sums.  Step 2: the root sends the sum to every other rank, at once.
    ``2`` steps (0 for ``n = 1``); the root receives and sends ``(n-1) S`` bytes
    each: ``2(n-1) S`` through one rank.  Behind a switch the root's port is
    the bottleneck: ``T = 2 alpha + 2(n-1) S / beta`` (:func:`naive_allreduce_time`).
    """
    order = _ranks(cluster, len(tensors), ranks)
    _check_same(tensors)
    if len(order) == 1:
        return [tensors[0].detach().clone()]
    (out,) = _run(cluster, [_naive_program([t.detach() for t in tensors], order)])
    return out


def _tree_program(tensors: Sequence[torch.Tensor], ranks: tuple[int, ...]) -> Program:
    n = len(ranks)
    depth = n.bit_length() - 1
    acc = list(tensors)
    level = lambda d: range(2**d - 1, min(2 ** (d + 1) - 1, n))  # noqa: E731  positions at depth d
    for d in range(depth, 0, -1):
        ps = list(level(d))
        got = yield f"tree reduce, depth {d}", [
            Message(ranks[p], ranks[(p - 1) // 2], acc[p], f"subtree sum of position {p}") for p in ps]
        for p, t in zip(ps, got):
            parent = (p - 1) // 2
            acc[parent] = _add(acc[parent], t)
    final: list[torch.Tensor | None] = [None] * n
    final[0] = acc[0]
    for d in range(1, depth + 1):
        ps = list(level(d))
        got = yield f"tree broadcast, depth {d}", [
            Message(ranks[(p - 1) // 2], ranks[p], final[(p - 1) // 2], "the sum") for p in ps]
        for p, t in zip(ps, got):
            final[p] = t
    final[0] = acc[0].clone()
    return final


def tree_allreduce(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Binary-tree reduce to ``ranks[0]``, then binary-tree broadcast back.

    Positions form a heap: position ``p``'s parent is ``(p - 1) // 2``; depth
    ``D = floor(log2 n)``.  Reduce: one step per level, deepest first, every
    node of the level sends its subtree's sum to its parent.  Broadcast: one
    step per level, parents send the sum to their children.  ``2D`` steps;
    a parent receives (then sends) ``2S`` per level.  On
    :func:`fully_connected` links ``T = 2D (alpha + S / beta)``
    (:func:`tree_allreduce_time`): fewer latencies than the ring (``2 log2 n``
    against ``2(n-1)``), more bytes per step.
    """
    order = _ranks(cluster, len(tensors), ranks)
    _check_same(tensors)
    if len(order) == 1:
        return [tensors[0].detach().clone()]
    (out,) = _run(cluster, [_tree_program([t.detach() for t in tensors], order)])
    return out


def _ps_program(tensors: Sequence[torch.Tensor], workers: tuple[int, ...], servers: tuple[int, ...]) -> Program:
    k = len(servers)
    shards = [list(t.reshape(-1).tensor_split(k)) for t in tensors]
    push = [(w, j) for w in range(len(workers)) for j in range(k) if workers[w] != servers[j]]
    got = yield "push", [Message(workers[w], servers[j], shards[w][j], f"shard {j} of worker {workers[w]}")
                         for w, j in push]
    received = dict(zip(push, got))
    sums = []
    for j in range(k):
        parts = [received[(w, j)] if (w, j) in received else shards[w][j] for w in range(len(workers))]
        total = parts[0]
        for t in parts[1:]:
            total = _add(total, t)
        sums.append(total)
    got = yield "pull", [Message(servers[j], workers[w], sums[j], f"summed shard {j}") for w, j in push]
    pulled = dict(zip(push, got))
    return [_cat([pulled[(w, j)] if (w, j) in pulled else sums[j].clone() for j in range(k)])
            for w in range(len(workers))]


def parameter_server_allreduce(
    cluster: Cluster,
    tensors: Sequence[torch.Tensor],
    *,
    workers: Sequence[int] | None = None,
    servers: Sequence[int] | None = None,
) -> list[torch.Tensor]:
    """Sharded parameter server: server ``j`` of ``k`` owns shard ``j`` (1/k of the keys).

    ``tensors[i]`` is the gradient of worker ``workers[i]``; defaults:
    ``topology.groups["workers"]`` and ``["servers"]`` when the topology names
    them, else every rank is a worker and a server (the sharded scheme of the
    source notes, each GPU aggregating a quarter).  Shards are
    ``flatten().tensor_split(k)``.  Push (1 step): every worker sends shard
    ``j`` to server ``j`` -- unless it *is* server ``j``, which keeps it; the
    servers sum.  Pull (1 step): server ``j`` sends the summed shard ``j`` to
    every other worker.  Returns one tensor per worker, shaped like the input.
    Cost: :func:`parameter_server_time`.
    """
    groups = cluster.topology.groups
    if workers is None:
        workers = groups.get("workers", tuple(range(cluster.n)))
    w_ranks = _ranks(cluster, len(tensors), workers)
    if servers is None:
        servers = groups.get("servers", w_ranks)
    s_ranks = tuple(servers)
    if not s_ranks or len(set(s_ranks)) != len(s_ranks) or any(not 0 <= r < cluster.n for r in s_ranks):
        raise ValueError(f"servers must be distinct ranks, got {s_ranks}")
    _check_same(tensors)
    shape = tensors[0].shape
    (out,) = _run(cluster, [_ps_program([t.detach() for t in tensors], w_ranks, s_ranks)])
    return [t.reshape(shape) for t in out]


def _chain(cluster: Cluster, count: int, root: int) -> tuple[int, ...]:
    if not 0 <= root < cluster.n:
        raise ValueError(f"root {root} is not a rank")
    return tuple((root + i) % cluster.n for i in range(count))


def pipelined_broadcast(
    cluster: Cluster, tensor: torch.Tensor, *, root: int = 0, chunks: int = 8
) -> list[torch.Tensor]:
    """Broadcast from ``root`` along the chain ``root, root+1, ...`` (mod n), pipelined in ``chunks`` pieces.

    At step ``s`` the rank at chain position ``i`` forwards piece ``s - i``.
    ``chunks + n - 2`` steps; each link carries ``S`` bytes once, so for many
    pieces the time tends to ``S / beta`` whatever ``n``: busbw = algbw
    (factor 1).  Exactly: :func:`pipelined_broadcast_time`.  Returns one copy
    per rank (index = rank).
    """
    n = cluster.n
    if chunks < 1:
        raise ValueError("chunks must be at least 1")
    chain = _chain(cluster, n, root)
    pieces = list(tensor.detach().reshape(-1).tensor_split(chunks))
    if n == 1:
        return [tensor.detach().clone()]

    def program() -> Program:
        have: list[list[torch.Tensor | None]] = [[None] * chunks for _ in range(n)]
        have[0] = list(pieces)
        for s in range(chunks + n - 2):
            senders = [i for i in range(n - 1) if 0 <= s - i < chunks]
            got = yield "pipelined broadcast", [
                Message(chain[i], chain[i + 1], have[i][s - i], f"piece {s - i}") for i in senders]
            for i, t in zip(senders, got):
                have[i + 1][s - i] = t
        return have

    (have,) = _run(cluster, [program()])
    out: list[torch.Tensor] = [tensor] * n
    for i, r in enumerate(chain):
        out[r] = _cat(have[i]).reshape(tensor.shape) if i else tensor.detach().clone()
    return out


def pipelined_reduce(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, root: int = 0, chunks: int = 8
) -> torch.Tensor:
    """Sum ``tensors[r]`` (held by rank ``r``) onto ``root``, pipelined along the chain toward it.

    The mirror of :func:`pipelined_broadcast`: the chain's last rank sends piece
    ``c`` at step ``c``; every rank adds its own piece and passes it on.
    ``chunks + n - 2`` steps and the same time as the broadcast; busbw factor 1.
    Returns the sum held by ``root``.
    """
    n = cluster.n
    _ranks(cluster, len(tensors), None)
    _check_same(tensors)
    if chunks < 1:
        raise ValueError("chunks must be at least 1")
    chain = _chain(cluster, n, root)
    shape = tensors[0].shape
    if n == 1:
        return tensors[0].detach().clone()
    pieces = [list(tensors[r].detach().reshape(-1).tensor_split(chunks)) for r in chain]

    def program() -> Program:
        acc = [list(p) for p in pieces]
        for s in range(chunks + n - 2):
            # position i (n-1 .. 1) sends piece c at step c + (n - 1 - i)
            senders = [i for i in range(n - 1, 0, -1) if 0 <= s - (n - 1 - i) < chunks]
            got = yield "pipelined reduce", [Message(chain[i], chain[i - 1], acc[i][s - (n - 1 - i)],
                                                     f"piece {s - (n - 1 - i)}")
                         for i in senders]
            for i, t in zip(senders, got):
                c = s - (n - 1 - i)
                acc[i - 1][c] = _add(acc[i - 1][c], t)
        return _cat(acc[0])

    (total,) = _run(cluster, [program()])
    return total.reshape(shape)
