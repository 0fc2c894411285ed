"""The checker's side of the ``ring_allreduce`` exercise: the simulated ring and the relayed process group.

Part (a): the student's ``ring_allreduce(cluster, tensors)`` gets a cluster that
lives *here* (:class:`~autograder.trusted.Remote`): every ``exchange``, ``send``
and ``recv`` it makes runs in this process, so the steps and bytes are the
cluster's own counters, which the student's code cannot reach.  The inputs
are in this process's memory (their being left untouched is read here); the
library's collectives are switched off in the student's process.  Every rank's
data are in the student's process, so a result could be summed there directly
while the messages carry anything of the right size: the cluster here also
keeps every message's contents (:class:`Watched`), and :func:`provenance`
checks that the data really travelled.  Each input element is a random number,
so a message element is recognised as the sum of a subset of the ranks' inputs
at one position of the flattened tensor; every message rank ``r`` sends must
hold only sums that rank ``r`` can compute from what it holds (its input and
what it has received so far: any linear combination of them, position by
position), and every element of every rank's result must be computable that way
at the end.  A result summed locally from data that never reached the rank
fails, whatever travelled beside it.

Part (b): the ranks are processes of their own joined only by the relay
(:class:`~autograder.trusted.Ranks`): the relay counts every byte each rank
sends and receives and the peers it sends to (so the ring is checked as a
ring: rank ``r`` sends only to ``(r + 1) % n``, hence receives only from
``(r - 1) % n``), the group has no collective at all, each rank's tensor is
in this process's memory (in-place results are read here), and the time is
taken here, against the reference ring run by processes that never saw the
student's code, through the same relay, alternating, each side stopped while
the other is timed.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from dlperf import cluster as C

from autograder.trusted import CheckFailed, Ranks, Remote, Student, StudentRaised, seed

__all__ = ["FORBID", "Watched", "p2p_runs", "provenance", "ring_topology", "simulated", "timed"]

FORBID = ["dlperf.cluster._run"]   # every reference collective of dlperf.cluster runs through it
CLUSTER_METHODS = ["exchange", "send", "recv", "step", "summary", "memory_bytes"]
CLUSTER_ATTRS = ["n", "steps", "bytes_sent", "bytes_received", "messages_sent", "messages_received", "clocks", "time",
                 "link_bytes", "link_messages"]
DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64}


def _show(t: torch.Tensor) -> str:
    flat = t.detach().reshape(-1)
    head = [round(v, 4) if isinstance(v, float) else v for v in flat[:4].tolist()]
    return f"{head}{' ...' if flat.numel() > 4 else ''}"


def _inputs(n: int, shape: Sequence[int], dtype: torch.dtype, case: Any) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed("ring-sim", case) % 2**63)
    if dtype.is_floating_point:
        return [torch.randn(tuple(shape), generator=gen, dtype=torch.float64).to(dtype) for _ in range(n)]
    return [torch.randint(-1000, 1000, tuple(shape), generator=gen, dtype=dtype) for _ in range(n)]


class Watched(C.Cluster):
    """The simulated cluster, keeping every step's messages: ``log[t]`` is ``[(src, dst, contents)]`` of step ``t``
    (the contents as the cluster copied them at ``send``, before delivery)."""

    def __init__(self, topology: C.Topology):
        self.log: list[list[tuple[int, int, torch.Tensor]]] = []
        super().__init__(topology)

    def _commit(self, pending: list[Any], label: str) -> Any:
        if pending and all(p.payload is not None for p in pending):
            self.log.append([(p.src, p.dst, p.payload) for p in pending])
        return super()._commit(pending, label)


@functools.lru_cache(maxsize=1 << 16)
def _in_span(basis: frozenset[int], mask: int) -> bool:
    """Whether the subset ``mask`` (bit q: rank q's input) is a linear combination of the subsets in ``basis``."""
    if mask == 0 or mask in basis:
        return True
    if not basis:
        return False
    bits = max(max(basis), mask).bit_length()
    rows = np.array([[(m >> q) & 1 for q in range(bits)] for m in basis], dtype=np.float64)
    more = np.vstack([rows, [(mask >> q) & 1 for q in range(bits)]])
    return int(np.linalg.matrix_rank(more)) == int(np.linalg.matrix_rank(rows))


def _learn(basis: frozenset[int], mask: int) -> frozenset[int]:
    return basis if _in_span(basis, mask) else basis | {mask}


def _subset_sums(inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    """``[2**n, numel]``: row ``mask`` holds the sum of the inputs of the ranks in ``mask``, per flat position."""
    flat = torch.stack([t.reshape(-1) for t in inputs])
    exact = not flat.dtype.is_floating_point
    flat = flat.to(torch.int64 if exact else torch.float64)
    n = len(inputs)
    masks = torch.arange(2 ** n)
    member = ((masks[:, None] >> torch.arange(n)[None, :]) & 1).to(flat.dtype)
    return member @ flat


def _matches(window: torch.Tensor, values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``window == values`` elementwise: exactly for integers, within the values check's tolerance for floats
    (``dtype``: the inputs')."""
    if not dtype.is_floating_point and not values.dtype.is_floating_point:
        return window == values.to(torch.int64)
    tol = {torch.float32: 1e-5, torch.float64: 1e-12}.get(dtype, 0.0)
    return torch.isclose(window.double(), values.double(), rtol=tol, atol=tol)


def provenance(inputs: Sequence[torch.Tensor], log: Sequence[Sequence[tuple[int, int, torch.Tensor]]],
               outputs: Sequence[torch.Tensor], case: str, gate: str = "") -> None:
    """That the data travelled: every message rank r sent holds, element by element, a sum that rank r could
    compute from what it held (its input and what it had received in earlier steps), and every rank's result can be
    computed that way at the end.  Raises :class:`CheckFailed` naming the step, the ranks and the element."""
    n = len(inputs)
    dtype = inputs[0].dtype
    sums = _subset_sums(inputs)
    numel = sums.shape[1]
    known = [[frozenset({1 << r})] * numel for r in range(n)]
    for t, step in enumerate(log):
        learned: list[tuple[int, int, int]] = []
        for src, dst, contents in step:
            values = contents.detach().reshape(-1)
            size = values.numel()
            if size == 0 or (size >= 4 and not bool(values.any())):
                continue    # zeros carry nothing and any rank can compute them (a short chunk's sum may be 0: matched)
            where = (f"{case}: {gate}step {t + 1}: rank {src} sent rank {dst} {size} element(s)")
            if size > numel:
                raise CheckFailed(f"{where}, more than one rank's tensor holds ({numel}): a message carries a chunk")
            anchor = int(values.double().abs().argmax())         # an element that is not 0, if any
            at = _matches(sums, values[anchor], dtype).any(0).nonzero().reshape(-1) - anchor
            offsets = at[(at >= 0) & (at <= numel - size)].tolist()
            credited = False
            for offset in offsets:
                hit = _matches(sums[:, offset:offset + size], values, dtype)    # [masks, size]
                if not bool(hit.any(0).all()):
                    continue
                usable: list[list[int]] = [[] for _ in range(size)]
                for mask, k in hit.nonzero().tolist():
                    if _in_span(known[src][offset + k], mask):
                        usable[k].append(mask)
                if all(usable):
                    credited = True
                    learned += [(dst, offset + k, m) for k, masks in enumerate(usable) for m in masks]
            if not credited:
                example = ""
                if offsets:
                    example = (" (its contents are sums of the ranks' inputs, but of inputs rank "
                               f"{src} has not received)")
                raise CheckFailed(f"{where} that rank {src} could not have computed from what it held at that point "
                                  f"(its own input and what it had received){example}: a rank may only send what it "
                                  "holds and the sums of it; all the data must travel through the cluster")
        for dst, j, mask in learned:
            known[dst][j] = _learn(known[dst][j], mask)
    everyone = (1 << n) - 1
    for r, out in enumerate(outputs):
        for j in range(min(numel, out.numel())):
            if not _in_span(known[r][j], everyone):
                have = functools.reduce(lambda a, b: a | b, known[r][j], 0)
                missing = [q for q in range(n) if not have >> q & 1]
                why = (f"the data of rank(s) {missing} at that element never reached rank {r}" if missing else
                       f"the partial sums rank {r} received there do not add up to the total")
                raise CheckFailed(f"{case}: {gate}rank {r}'s result is the sum, but rank {r} could not have computed "
                                  f"it from what it held and received through the cluster: at flat index {j}, {why}. "
                                  "The sum must be built from the messages (reduce-scatter, then all-gather), not "
                                  "read from the other ranks' tensors")


def simulated(student: Student, cases: Sequence[Sequence[Any]], what: str) -> None:
    """Part (a) on each ``(n, shape, dtype name, case)``; ``what``: ``values``, ``steps`` or ``bytes``."""
    tolerance = {torch.float32: 1e-5, torch.float64: 1e-12}
    for n, shape, dtype_name, case_id in cases:
        shape, dtype = tuple(shape), DTYPES[dtype_name]
        inputs = _inputs(n, shape, dtype, (case_id, what))
        numel, size = inputs[0].numel(), inputs[0].element_size()
        nbytes = numel * size
        case = f"n={n} ranks, shape {shape} {dtype_name}"
        cluster = Watched(C.ring(n))
        sent = [student.share(t) for t in inputs]
        try:
            seen = student.probe("ring_allreduce:simulated", Remote(cluster, CLUSTER_METHODS, CLUSTER_ATTRS, "Cluster"),
                                 sent)
        except StudentRaised as exc:
            if "dlperf.cluster._run" in exc.message:
                raise CheckFailed(f"{case}: your code calls one of the library's collectives (C.ring_allreduce, "
                                  "C.ring_reduce_scatter, C.ring_all_gather, ...); write the steps yourself with "
                                  "cluster.exchange or send/recv") from None
            raise
        out = seen["out"]
        gate = "" if what == "values" else "(steps and bytes are graded on a correct result only) "
        if not (isinstance(out, (list, tuple)) and len(out) == n):
            raise CheckFailed(f"{case}: {gate}expected a list of {n} tensors, one per rank; got {type(out).__name__}"
                              + (f" of length {len(out)}" if isinstance(out, (list, tuple)) else ""))
        expected = (torch.stack([t.double() for t in inputs]).sum(0) if dtype.is_floating_point
                    else torch.stack(inputs).sum(0))
        for r, o in enumerate(out):
            if type(o) is not torch.Tensor:
                raise CheckFailed(f"{case}: {gate}rank {r}'s result is a {type(o).__name__}, not a torch.Tensor")
            if o.dtype != dtype or tuple(o.shape) != shape:
                raise CheckFailed(f"{case}: {gate}rank {r}'s result has shape {tuple(o.shape)} and dtype "
                                  f"{str(o.dtype).replace('torch.', '')}; expected the inputs' shape {shape} and dtype "
                                  f"{dtype_name}")
            got = o.detach().reshape(-1)
            if dtype.is_floating_point:
                tol = tolerance[dtype]
                close = torch.isclose(got.double(), expected.reshape(-1), rtol=tol, atol=tol)
            else:
                close = got == expected.reshape(-1)
            if not bool(close.all()):
                i = int((~close).nonzero()[0])
                raise CheckFailed(f"{case}: {gate}rank {r} got {_show(o)}, expected the sum {_show(expected)}; first "
                                  f"wrong element: flat index {i}, got {got[i].item():.6g}, expected "
                                  f"{expected.reshape(-1)[i].item():.6g}")
        provenance(inputs, cluster.log, out, case, gate)
        if what == "values":
            for r in range(n):
                if not torch.equal(sent[r].read(), inputs[r]):
                    raise CheckFailed(f"{case}: rank {r}'s input tensor was modified; leave the inputs as they are (add "
                                      "into new tensors, not into views of the inputs)")
            for r in range(n):
                if seen["shares_an_input"][r]:
                    raise CheckFailed(f"{case}: rank {r}'s result shares memory with an input tensor; return new tensors")
                if seen["shares_another_result"][r]:
                    raise CheckFailed(f"{case}: rank {r}'s result shares memory with another rank's result; each rank "
                                      "holds its own tensor")
            floor = (n - 1) * nbytes / n - (n - 1) * size
            for r in range(n):
                if cluster.bytes_received[r] < floor:
                    raise CheckFailed(f"{case}: rank {r} received only {cluster.bytes_received[r]} bytes through the "
                                      f"cluster, but the other ranks' data ({nbytes} bytes per rank) must reach it: at "
                                      f"least (n-1)/n * S = {(n - 1) * nbytes / n:.0f} bytes. Move the data with the "
                                      "cluster's send/recv/exchange; reading another rank's tensor directly is not "
                                      "communication")
        elif what == "steps":
            want = 2 * (n - 1)
            if cluster.steps != want:
                raise CheckFailed(f"{case}: {cluster.steps} steps, expected exactly 2(n-1) = {want}: n-1 steps of "
                                  "reduce-scatter, n-1 of all-gather, and in each step every rank sends one chunk to its "
                                  "neighbour at the same time (all n sends of a step in one cluster.exchange or one "
                                  "`with cluster.step():` block)")
        else:
            target = 2 * (n - 1) / n * nbytes
            slack = 2 * (n - 1) * size
            for r in range(n):
                sent_bytes = cluster.bytes_sent[r]
                if abs(sent_bytes - target) > slack:
                    raise CheckFailed(f"{case} (S = {nbytes} bytes): rank {r} sent {sent_bytes} bytes, expected "
                                      f"2(n-1)/n * S = {target:.0f} (give or take {slack} for uneven chunks). In each "
                                      "step a rank sends one chunk of about S/n, never a whole tensor, and every rank "
                                      "does the same amount of work")


# ---------------------------------------------------------------------------------------------
# Part (b)
# ---------------------------------------------------------------------------------------------


def _rank_tensor(numel: int, dtype: torch.dtype, rank: int, case: Any) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed("ring-p2p", case, rank) % 2**63)
    if dtype.is_floating_point:
        return torch.randn(numel, generator=gen).to(dtype)
    return torch.randint(-1000, 1000, (numel,), generator=gen, dtype=dtype)


def _hint(exc: CheckFailed) -> str:
    text = str(exc)
    if "RuntimeError" in text and "collective operation" in text:
        return (" (it called a collective operation; only point-to-point operations are allowed: dist.send, "
                "dist.recv, dist.isend, dist.irecv, dist.batch_isend_irecv)")
    if "deadlock" in text:
        return (" (on gloo, as here, a blocking dist.send waits until the receiver has posted the matching recv, so "
                "if every rank sends first, every rank waits forever: post the send and the receive together with "
                "dist.isend + dist.irecv and wait on both, or let even ranks send first and odd ranks receive first)")
    return ""


def ring_topology(traffic: Sequence[dict[str, Any]], case: str, gate: str = "") -> None:
    """From the relay's counts (``Ranks.traffic``): rank ``r`` sent only to ``(r + 1) % n``, so every rank received
    only from ``(r - 1) % n``.  A direct all-to-all moves the same bytes as a ring; the spec asks for the ring."""
    n = len(traffic)
    for r, t in enumerate(traffic):
        others = sorted(set(t["peers_sent"]) - {(r + 1) % n})
        if others:
            raise CheckFailed(f"{case}: {gate}rank {r} sent to rank(s) {others}: in a ring, rank r sends only to its "
                              f"right neighbour (r + 1) % n = {(r + 1) % n} and receives only from (r - 1) % n = "
                              f"{(r - 1) % n} (the bytes alone would be those of a ring; the topology is part of it)")


def p2p_runs(solution: Any, runs: Sequence[Sequence[Any]], what: str) -> None:
    """Part (b): ``runs`` of ``(n, [(numel, dtype name, case), ...])``; ``what``: ``values`` or ``traffic``."""
    gate = {"values": "", "traffic": "(traffic is graded on a correct result only) "}[what]
    for n, cases in runs:
        with Ranks(solution, n=n, timeout=45) as ranks:
            for numel, dtype_name, case_id in cases:
                dtype = DTYPES[dtype_name]
                data = [_rank_tensor(numel, dtype, r, case_id) for r in range(n)]
                sent = [ranks[r].share(data[r]) for r in range(n)]
                try:
                    ranks.call("ring_allreduce_p2p", [(s,) for s in sent])
                except CheckFailed as exc:
                    raise CheckFailed(f"{exc}{_hint(exc)}") from None
                expected = (torch.stack([d.double() for d in data]).sum(0) if dtype.is_floating_point
                            else torch.stack(data).sum(0))
                case = f"{n} ranks, {numel} {dtype_name} elements"
                for r, s in enumerate(sent):
                    got = s.read()
                    if dtype.is_floating_point:
                        scale = float(expected.abs().max()) if numel else 1.0
                        error = float((got.double() - expected).abs().max()) if numel else 0.0
                        correct = error <= 1e-5 * max(scale, 1.0)
                    else:
                        error = float((got - expected).abs().max()) if numel else 0.0
                        correct = bool(torch.equal(got, expected))
                    if not correct:
                        raise CheckFailed(f"{case}: {gate}rank {r}'s tensor does not hold the sum after "
                                          f"ring_allreduce_p2p returned (largest error {error:.3g}). The function must "
                                          "change the tensor it is given, in place, in its own memory (copy_, add_, "
                                          "recv into views); a returned tensor, a rebound name or a replaced storage "
                                          "(tensor.data = ...) is lost")
                if what != "traffic":
                    continue
                nbytes = numel * data[0].element_size()
                size = data[0].element_size()
                case = f"{n} ranks, {numel} {dtype_name} elements (S = {nbytes} bytes)"
                target, slack = 2 * (n - 1) / n * nbytes, 2 * (n - 1) * size
                ring_topology(ranks.traffic, case, gate)
                for r, t in enumerate(ranks.traffic):
                    if t["bytes_received"] < (n - 1) / n * nbytes - slack:
                        raise CheckFailed(f"{case}: {gate}rank {r} received only {t['bytes_received']} bytes through "
                                          f"point-to-point operations, fewer than the (n-1)/n * S = "
                                          f"{(n - 1) * nbytes / n:.0f} bytes any allreduce needs: the data did not come "
                                          "through send/recv")
                    if abs(t["bytes_sent"] - target) > slack:
                        raise CheckFailed(f"{case}: {gate}rank {r} sent {t['bytes_sent']} bytes in {t['messages_sent']} "
                                          f"messages, expected 2(n-1)/n * S = {target:.0f} (give or take {slack} for "
                                          "uneven chunks). A rank sends one chunk of about S/n per step, 2(n-1) steps, "
                                          "to its right neighbour")


def timed(solution: Any, reference: str, n: int, numel: int, repeats: int, bound: float) -> None:
    """Part (b), time: the student's ring against ``reference`` (source of a ``ring_allreduce_p2p``) on ``n``
    ranks and ``numel`` float32 elements, ``repeats`` times each, alternating; the median ratio must be at most
    ``bound``.  Values and traffic are checked on every timed run.  Returns nothing: a test cell whose last
    value is a number gets that fraction of its points from nbgrader."""
    gate = "(time is graded only for a correct ring: right values and traffic) "
    data = [_rank_tensor(numel, torch.float32, r, "timed") for r in range(n)]
    expected = torch.stack([d.double() for d in data]).sum(0)
    nbytes = numel * 4
    mine, theirs = [], []
    with Ranks(solution, n=n, timeout=60) as ranks, Ranks(parts=[("<reference ring>", reference)], n=n,
                                                         timeout=60) as ref:
        sent = [ranks[r].share(data[r]) for r in range(n)]
        ref_sent = [ref[r].share(data[r]) for r in range(n)]
        for _ in range(repeats):
            for group, shared, times in ((ranks, sent, mine), (ref, ref_sent, theirs)):
                other = ref if group is ranks else ranks
                for s, d in zip(shared, data):
                    s.tensor.copy_(d)
                other.freeze()
                try:
                    group.call("ring_allreduce_p2p", [(s,) for s in shared])
                except CheckFailed as exc:
                    raise CheckFailed(f"{gate}{exc}{_hint(exc)}") from None
                finally:
                    other.thaw()
                times.append(group.seconds)
                if group is ranks:
                    for r, s in enumerate(shared):
                        if not torch.allclose(s.read().double(), expected, atol=1e-4, rtol=1e-5):
                            raise CheckFailed(f"{gate}{n} ranks, {nbytes / 1e6:.0f} MB: rank {r}'s tensor does not hold "
                                              "the sum")
                    target, slack = 2 * (n - 1) / n * nbytes, 2 * (n - 1) * 4
                    if any(abs(t["bytes_sent"] - target) > slack for t in group.traffic):
                        raise CheckFailed(f"{gate}{n} ranks, {nbytes / 1e6:.0f} MB: the bytes sent are not those of a "
                                          "ring")
                    ring_topology(group.traffic, f"{n} ranks, {nbytes / 1e6:.0f} MB", gate)
    ratio = statistics.median(mine) / statistics.median(theirs)
    if ratio > bound:
        raise CheckFailed(f"{n} ranks, {nbytes / 1e6:.0f} MB of float32: your allreduce took {ratio:.1f} times as long as "
                          f"the reference ring through the same process group in the same job (median of {repeats} runs "
                          f"each: {statistics.median(mine) * 1e3:.0f} ms against {statistics.median(theirs) * 1e3:.0f} "
                          f"ms); at most {bound:g} times is accepted. Your bytes are right, so look for what else costs "
                          "time: sleeps, ranks taking turns on blocking calls, extra copies of the whole tensor, Python "
                          "loops over elements")
