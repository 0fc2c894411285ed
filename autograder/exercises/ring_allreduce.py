"""The checker's side of the ``ring_allreduce`` exercise: the simulated ring and the relayed process group.

Part (a): the student's ``ring_allreduce(cluster, tensors)`` gets a cluster that
lives *here* (:class:`~autograder.trusted.Remote`): every ``exchange``, ``send``
and ``recv`` it makes runs in this process, so the steps and bytes are the
cluster's own counters, which the student's code cannot reach.  The inputs
are in this process's memory (their being left untouched is read here); the
library's collectives are switched off in the student's process.

Part (b): the ranks are processes of their own joined only by the relay
(:class:`~autograder.trusted.Ranks`): the relay counts every byte each rank
sends and receives, the group has no collective at all, each rank's tensor is
in this process's memory (in-place results are read here), and the time is
taken here, against the reference ring run by processes that never saw the
student's code, through the same relay, alternating, each side stopped while
the other is timed.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import torch
from dlperf import cluster as C

from autograder.trusted import CheckFailed, Ranks, Remote, Student, StudentRaised, seed

__all__ = ["FORBID", "p2p_runs", "simulated", "timed"]

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


def simulated(student: Student, cases: Sequence[Sequence[Any]], what: str) -> None:
    """Part (a) on each ``(n, shape, dtype name, case)``; ``what``: ``values``, ``steps`` or ``bytes``."""
    tolerance = {torch.float32: 1e-5, torch.float64: 1e-12}
    for n, shape, dtype_name, case_id in cases:
        shape, dtype = tuple(shape), DTYPES[dtype_name]
        inputs = _inputs(n, shape, dtype, (case_id, what))
        numel, size = inputs[0].numel(), inputs[0].element_size()
        nbytes = numel * size
        case = f"n={n} ranks, shape {shape} {dtype_name}"
        cluster = C.Cluster(C.ring(n))
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
    ratio = statistics.median(mine) / statistics.median(theirs)
    if ratio > bound:
        raise CheckFailed(f"{n} ranks, {nbytes / 1e6:.0f} MB of float32: your allreduce took {ratio:.1f} times as long as "
                          f"the reference ring through the same process group in the same job (median of {repeats} runs "
                          f"each: {statistics.median(mine) * 1e3:.0f} ms against {statistics.median(theirs) * 1e3:.0f} "
                          f"ms); at most {bound:g} times is accepted. Your bytes are right, so look for what else costs "
                          "time: sleeps, ranks taking turns on blocking calls, extra copies of the whole tensor, Python "
                          "loops over elements")
