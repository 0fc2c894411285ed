"""The checker's side of the ``ring_attention`` exercise: the inputs, the one-process attention, the verdicts.

The student's ``ring_attention(q, k, v, causal)`` runs on 2 and 3 ranks, each a
host of its own joined to the others only by the relay
(:class:`~autograder.trusted.Ranks`, opened with collectives so that a
gathered sequence computes and is *counted*, not refused).  Rank ``r`` is
called with its contiguous chunk of the sequence (tokens ``r c .. (r + 1) c - 1``)
of queries, keys and values, ``heads x c x head_dim`` float32, each in memory
this process owns (:meth:`~autograder.trusted.Student.share`: what the
student's code writes into its inputs is read here).  Everything expected is
computed here:

* values: the whole sequence's attention in this process, in float64, with
  ``torch.softmax`` over the materialised scores (and the causal mask by global
  position), cut into the ranks' chunks;
* traffic, from the relay's counters (outside the student's processes): each
  rank sends exactly its K and V blocks ``n - 1`` times (``2 (n-1) heads c d``
  float32 elements, in ``n - 1`` messages with K and V together or ``2 (n-1)``
  messages with them apart), only to ``(r + 1) % n``, receives as much, and no
  collective (a barrier is allowed).

Every hidden cell also applies the reading of the cells
(:data:`dlperf.grading.probes.ring_attention.RULES`, the self-check's too): a
cell that calls the library's ring or fused attention gets no points.  The
runs are made once per submission (two rank groups, :data:`RUNS` of the
hidden cells) and shared by the three hidden cells (:class:`RunsOnce`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from dlperf.grading.probes import ring_attention as probe
from dlperf.grading.reading import read

from autograder.exercises import self_check_case
from autograder.exercises.runs import RunsOnce, relayed
from autograder.trusted import CheckFailed, StudentRaised, seed

__all__ = ["SELF_CHECK_RUNS", "TOLERANCE", "case", "check", "expected_traffic", "inputs", "reference"]

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# (n ranks, [(heads, chunk, head_dim, causal, case id), ...]): chunks and head sizes that are not powers of two
SELF_CHECK_RUNS = [(3, [(2, 3, 6, False, "s1"), (2, 3, 6, True, "s2")])]
FUNCTIONS = ("block_attention", "merge", "ring_attention")


def inputs(n: int, heads: int, chunk: int, head_dim: int, seed_: int) -> tuple[torch.Tensor, ...]:
    """The whole sequence's ``q``, ``k``, ``v``: ``heads x (n chunk) x head_dim`` float32, scores spread wide
    enough that the running maximum changes from block to block."""
    gen = torch.Generator().manual_seed(seed_)
    q, k, v = (torch.randn(heads, n * chunk, head_dim, generator=gen) for _ in range(3))
    return 2.0 * q, k, v


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """``softmax(q k^T / sqrt(d)) v`` over the whole sequence, in float64 (query ``i`` sees keys ``0..i`` if
    ``causal``)."""
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        n = q.shape[-2]
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(s, dim=-1) @ v.double()


def expected_traffic(n: int, heads: int, chunk: int, head_dim: int) -> int:
    """Bytes each rank sends (and receives): its K and V blocks passed on ``n - 1`` times, float32."""
    return (n - 1) * 2 * heads * chunk * head_dim * 4


def _case(n: int, heads: int, chunk: int, head_dim: int, causal: bool) -> str:
    return (f"{n} ranks, {'causal' if causal else 'not causal'}, heads={heads}, chunk={chunk} tokens per rank, "
            f"head_dim={head_dim}")


def _group(solution: Any, source: Sequence[tuple[str, str]], n: int, cases: Sequence[Any]) -> list[dict[str, Any]]:
    done = []
    with relayed(solution, source, n) as ranks:
        for heads, chunk, head_dim, causal, case_id in cases:
            seed_ = seed("ring_attention", n, heads, chunk, head_dim, causal, case_id) % 2**31
            q, k, v = inputs(n, heads, chunk, head_dim, seed_)
            mine = [[t[:, r * chunk:(r + 1) * chunk].contiguous() for t in (q, k, v)] for r in range(n)]
            shared = [[ranks[r].share(t) for t in mine[r]] for r in range(n)]
            case = _case(n, heads, chunk, head_dim, causal)
            try:
                out = ranks.call("ring_attention", [(*shared[r], causal) for r in range(n)])
            except StudentRaised as exc:
                raise CheckFailed(f"{case}: your code raised {exc.type_name}: {exc.message}") from None
            except CheckFailed as exc:
                raise CheckFailed(f"{case}: {exc}{_hint(exc)}") from None
            done.append({"n": n, "heads": heads, "chunk": chunk, "head_dim": head_dim, "causal": causal,
                         "case": case, "q": q, "k": k, "v": v, "out": out, "traffic": ranks.traffic,
                         "modified": [[not torch.equal(s.read(), t) for s, t in zip(shared[r], mine[r])]
                                      for r in range(n)]})
    return done


def _hint(exc: CheckFailed) -> str:
    text = str(exc)
    if "deadlock" in text:
        return ("\n(every rank waited for a message no rank sends. Rank r sends to (r + 1) % n and receives from "
                "(r - 1) % n; post the send and the receive together: dist.batch_isend_irecv, or dist.isend + "
                "dist.irecv and wait for both; a blocking dist.send first on every rank waits for ever)")
    return ""


# -- the verdicts ---------------------------------------------------------------------------------------------

def _values(run: dict[str, Any], gate: str = "") -> None:
    n, chunk = run["n"], run["chunk"]
    want = reference(run["q"], run["k"], run["v"], run["causal"])
    shape = (run["heads"], chunk, run["head_dim"])
    for r, got in enumerate(run["out"]):
        if type(got) is not torch.Tensor:
            raise CheckFailed(f"{run['case']}: {gate}rank {r} returned a {type(got).__name__}; ring_attention "
                              "returns this rank's output, a torch.Tensor")
        if tuple(got.shape) != shape or got.dtype != torch.float32:
            raise CheckFailed(f"{run['case']}: {gate}rank {r} returned shape {tuple(got.shape)} "
                              f"{str(got.dtype).replace('torch.', '')}; expected {shape} float32 (heads x chunk x "
                              "head_dim, this rank's queries only)")
        w = want[:, r * chunk:(r + 1) * chunk]
        close = torch.isclose(got.double(), w, **TOLERANCE)
        if not bool(close.all()):
            h, i, j = (int(x) for x in (~close).nonzero()[0])
            bad = (~close).any(-1)                     # heads x chunk: the queries with a wrong output
            rows = sorted({r * chunk + int(t) for t in bad.nonzero()[:, 1]})
            raise CheckFailed(f"{run['case']}: {gate}rank {r}'s output differs from attention over the whole "
                              f"sequence computed in one process: head {h}, the query at position {r * chunk + i} "
                              f"(global), element {j}: got {float(got[h, i, j]):.6g}, expected "
                              f"{float(w[h, i, j]):.6g} (tolerance {TOLERANCE['atol']:g} + {TOLERANCE['rtol']:g} x "
                              f"|value|); wrong queries (global positions): {rows[:12]}"
                              f"{' ...' if len(rows) > 12 else ''}")


def _unchanged(run: dict[str, Any]) -> None:
    for r, flags in enumerate(run["modified"]):
        names = [name for name, flag in zip("qkv", flags) if flag]
        if names:
            raise CheckFailed(f"{run['case']}: rank {r}'s input tensor(s) {', '.join(names)} were modified; leave the "
                              "inputs as they are (scale a copy, send a copy or the tensor itself, never write into it)")


def _traffic(run: dict[str, Any]) -> None:
    gate = "(traffic is graded on correct results only) "
    _values(run, gate)
    n = run["n"]
    want = expected_traffic(n, run["heads"], run["chunk"], run["head_dim"])
    block = want // (2 * (n - 1)) if n > 1 else 0
    for r, t in enumerate(run["traffic"]):
        calls = {op: c for op, c in t["collective_calls"].items() if op != "barrier" and c}
        if calls:
            names = ", ".join(f"{ {'allgather': 'all_gather', 'allreduce': 'all_reduce'}.get(op, op)} x{c}"
                              for op, c in calls.items())
            raise CheckFailed(f"{run['case']}: rank {r} called the collective(s) {names} (counted by the relay): "
                              "ring attention needs none. Gathering the whole sequence's K and V on every rank is "
                              "what context parallelism avoids (each rank would hold all n blocks at once); pass "
                              "the blocks around the ring with point-to-point messages")
        others = sorted(set(t["peers_sent"]) - {(r + 1) % n})
        if others:
            raise CheckFailed(f"{run['case']}: rank {r} sent to rank(s) {others}: in the ring rank r sends only to "
                              f"(r + 1) % n = {(r + 1) % n} and receives from (r - 1) % n = {(r - 1) % n}")
        for what, got in (("sent", t["bytes_sent"]), ("received", t["bytes_received"])):
            if got != want:
                raise CheckFailed(
                    f"{run['case']}: rank {r} {what} {got} bytes in {t['messages_' + what]} point-to-point "
                    f"message(s) (counted by the relay); a ring passes K and V on n - 1 = {n - 1} times: "
                    f"(n-1) x 2 x heads x chunk x head_dim x 4 = {want} bytes ({block} bytes per K or V block)"
                    + (": more than that travelled (the queries stay on their rank, and the last block a rank receives "
                       "is not passed on)" if got > want else "")
                    + (": a block did not travel" if got < want else ""))
        if t["messages_sent"] not in (n - 1, 2 * (n - 1)):
            raise CheckFailed(f"{run['case']}: rank {r} sent {t['messages_sent']} point-to-point messages (counted by "
                              f"the relay); per step of the ring one message with K and V together, or one for K "
                              f"and one for V: {n - 1} or {2 * (n - 1)} in all")


_RUNS = RunsOnce()


def check(*solution: Any, source: Sequence[tuple[str, str]], runs: Sequence[Any], what: str) -> None:
    """``runs``: ``[(n, [(heads, chunk, head_dim, causal, case), ...]), ...]``, one process group of ``n`` ranks
    each; ``what``: ``full`` (the runs without the causal mask: values, inputs untouched), ``causal`` (the same
    with it) or ``traffic`` (every run's relay counts, on correct values).

    ``solution``: the solution cells' placeholders (none: run ``source`` itself); ``source``: their
    ``solution_parts``, read with :data:`~dlperf.grading.probes.ring_attention.RULES` first.  The runs are
    made once and kept for the other cells (same solution, same runs)."""
    found = read(source, probe.RULES)
    if found:
        raise CheckFailed("the grader's reading of your cells refuses (the self-check's reading row shows the "
                          "same):\n" + "\n".join(found))
    for run in _RUNS.each(source, runs, lambda group: _group(solution, source, *group)):
        if what == "traffic":
            _traffic(run)
        elif run["causal"] == (what == "causal"):
            _values(run)
            _unchanged(run)


def case(*solution: Any, runs: Sequence[Any] = SELF_CHECK_RUNS, what: str) -> Callable[[], tuple[Any, Any, bool]]:
    """A self-check case: :func:`check` on ``runs`` (:func:`autograder.exercises.self_check_case`)."""
    return self_check_case(check, solution, runs, what)
