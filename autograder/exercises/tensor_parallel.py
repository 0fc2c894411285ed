"""The checker's side of the ``tensor_parallel`` exercise: the inputs, the unsharded block, the verdicts.

The student's ``parallel_attention`` (a self-attention block whose heads are
split over the ranks, Megatron's ``f`` before the three projections and ``g``
after the output projection) runs on 2 and 3 ranks, each a host of its own
joined to the others only by the relay (:class:`~autograder.trusted.Ranks`,
opened with collectives so that any collective computes and is *counted*).  The
public probe (:mod:`dlperf.grading.probes.tensor_parallel`) drives it in two
calls, the forward pass and the backward pass, so that the relay's log of each
call holds one pass's collectives.  Everything expected is computed here:

* values: the unsharded block in this process, in float64 (``softmax(q k^T /
  sqrt(d)) v`` per head, the heads concatenated, the output projection), on the
  whole ``x``; every rank must return all of it;
* gradients: the same block's backward in float64 for the same output gradient;
  every rank's ``x`` and ``bo`` (replicated) must get the whole gradient, and
  each weight and bias shard the rows (``wq``, ``wk``, ``wv`` and their biases)
  or columns (``wo``) of the whole gradient that belong to the rank's heads;
* traffic, from the relay's log (outside the student's processes): exactly one
  ``all_reduce`` of ``tokens x hidden`` float32 values in the forward pass and
  one in the backward pass, no other collective (a barrier is allowed), no
  point-to-point message.

The values and gradients come from the student's processes (a forged answer can
only be a correct one); the shards are made here, so a rank sees only its own
heads' weights.  Every hidden cell also applies the reading of the cells
(:data:`dlperf.grading.probes.tensor_parallel.RULES`, the self-check's too).  The
runs are made once per submission (two rank groups) and shared by the three
hidden cells (:class:`RunsOnce`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from dlperf.grading.probes import tensor_parallel as probe
from dlperf.grading.reading import read

from autograder.exercises import self_check_case
from autograder.exercises.runs import RunsOnce, relayed
from autograder.trusted import CheckFailed, StudentRaised, seed

__all__ = ["SELF_CHECK_RUNS", "TOLERANCE", "case", "check", "inputs", "reference", "shard"]

TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# (n ranks, [(tokens, heads, head_dim, case id), ...]): sizes that are not powers of two, one head per rank and more
SELF_CHECK_RUNS = [(2, [(5, 4, 3, "s1")])]
NAMES = probe.NAMES


def inputs(tokens: int, heads: int, head_dim: int, seed_: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The whole block's tensors (``x``: tokens x hidden; the weights hidden x hidden, ``nn.Linear``'s layout,
    rows are outputs; the biases), float32, and the output's gradient."""
    gen = torch.Generator().manual_seed(seed_)
    hidden = heads * head_dim

    def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * scale

    w = 1 / math.sqrt(hidden)
    tensors = [rand(tokens, hidden), rand(hidden, hidden, scale=2 * w), rand(hidden, scale=0.1),
               rand(hidden, hidden, scale=2 * w), rand(hidden, scale=0.1), rand(hidden, hidden, scale=w),
               rand(hidden, scale=0.1), rand(hidden, hidden, scale=w), rand(hidden, scale=0.5)]
    return tensors, rand(tokens, hidden)


def reference(tensors: Sequence[torch.Tensor], heads: int, grad_out: torch.Tensor
              ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The unsharded block in float64: its output and the gradient of every tensor for ``grad_out``."""
    leaves = [t.double().requires_grad_(True) for t in tensors]
    x, wq, bq, wk, bk, wv, bv, wo, bo = leaves
    tokens, hidden = x.shape
    d = hidden // heads

    def per_head(w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:      # heads x tokens x d
        return (x @ w.T + b).view(tokens, heads, d).transpose(0, 1)

    q, k, v = per_head(wq, bq), per_head(wk, bk), per_head(wv, bv)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d), dim=-1) @ v
    out = a.transpose(0, 1).reshape(tokens, hidden) @ wo.T + bo
    out.backward(grad_out.double())
    return out.detach(), [t.grad for t in leaves]  # type: ignore[misc]


def shard(tensors: Sequence[Any], heads: int, n: int, r: int) -> list[Any]:
    """Rank ``r``'s part of the block's tensors (or of their gradients): ``x`` and ``bo`` whole, the rows of
    ``wq``, ``wk``, ``wv`` and their biases for the rank's ``heads / n`` heads, the same columns of ``wo``."""
    x, wq, bq, wk, bk, wv, bv, wo, bo = tensors
    d = wq.shape[0] // heads
    rows = slice(r * heads // n * d, (r + 1) * heads // n * d)
    return [x, wq[rows], bq[rows], wk[rows], bk[rows], wv[rows], bv[rows], wo[:, rows], bo]


def _case(n: int, tokens: int, heads: int, head_dim: int) -> str:
    return (f"{n} ranks, {tokens} tokens, {heads} heads of {head_dim} ({heads // n} per rank), "
            f"hidden {heads * head_dim}")


def _group(solution: Any, source: Sequence[tuple[str, str]], n: int, cases: Sequence[Any]) -> list[dict[str, Any]]:
    done = []
    with relayed(solution, source, n) as ranks:
        for tokens, heads, head_dim, case_id in cases:
            seed_ = seed("tensor_parallel", n, tokens, heads, head_dim, case_id) % 2**31
            tensors, grad_out = inputs(tokens, heads, head_dim, seed_)
            case = _case(n, tokens, heads, head_dim)
            want, want_grads = reference(tensors, heads, grad_out)
            run: dict[str, Any] = {"n": n, "tokens": tokens, "heads": heads, "head_dim": head_dim, "case": case,
                                   "want": want, "want_grads": want_grads}
            try:
                run["out"] = ranks.probe("tensor_parallel:forward",
                                         [(heads // n, *shard(tensors, heads, n, r)) for r in range(n)])
                run["forward"] = (ranks.traffic, ranks.collective_log)
                run["grads"] = ranks.probe("tensor_parallel:backward", [(grad_out,)] * n)
                run["backward"] = (ranks.traffic, ranks.collective_log)
            except StudentRaised as exc:
                raise CheckFailed(f"{case}: your code raised {exc.type_name}: {exc.message}") from None
            except CheckFailed as exc:
                raise CheckFailed(f"{case}: {exc}") from None
            done.append(run)
    return done


# -- the verdicts ---------------------------------------------------------------------------------------------

def _mismatch(got: torch.Tensor, want: torch.Tensor) -> str | None:
    close = torch.isclose(got.double(), want, **TOLERANCE)
    if bool(close.all()):
        return None
    where = tuple(int(i) for i in (~close).nonzero()[0])
    return (f"at {list(where)}: got {float(got[where]):.6g}, expected {float(want[where]):.6g} (tolerance "
            f"{TOLERANCE['atol']:g} + {TOLERANCE['rtol']:g} x |value|; {int((~close).sum())} of {close.numel()} "
            "values differ)")


def _values(run: dict[str, Any], gate: str = "") -> None:
    want = run["want"]
    for r, got in enumerate(run["out"]):
        if type(got) is not torch.Tensor:
            raise CheckFailed(f"{run['case']}: {gate}rank {r} returned a {type(got).__name__}; parallel_attention "
                              "returns the block's output, a torch.Tensor")
        if got.shape != want.shape or got.dtype != torch.float32:
            raise CheckFailed(f"{run['case']}: {gate}rank {r} returned shape {tuple(got.shape)} "
                              f"{str(got.dtype).replace('torch.', '')}; expected {tuple(want.shape)} float32 (tokens x "
                              "hidden: the whole block's output, on every rank)")
        bad = _mismatch(got, want)
        if bad:
            raise CheckFailed(f"{run['case']}: {gate}rank {r}'s output differs from the unsharded block computed in "
                              f"one process, {bad}")


def _gradients(run: dict[str, Any]) -> None:
    n, heads = run["n"], run["heads"]
    for r, got in enumerate(run["grads"]):
        for name, g, w in zip(NAMES, got, shard(run["want_grads"], heads, n, r)):
            what = {"x": "the input x (every rank needs the whole gradient)",
                    "bo": "bo (replicated: every rank's copy gets the whole gradient)"}.get(
                name, f"{name}, rank {r}'s shard (the rows, or for wo the columns, of its heads)")
            if g is None:
                raise CheckFailed(f"{run['case']}: after the backward pass rank {r}'s {name} has no gradient: {what}"
                                  " must get one")
            if g.shape != w.shape:
                raise CheckFailed(f"{run['case']}: rank {r}'s gradient of {name} has shape {tuple(g.shape)}, "
                                  f"expected {tuple(w.shape)}")
            bad = _mismatch(g, w)
            if bad:
                raise CheckFailed(f"{run['case']}: rank {r}'s gradient of {what} differs from the unsharded block's, "
                                  f"{bad}")


def _traffic(run: dict[str, Any]) -> None:
    gate = "(traffic is graded on correct outputs only) "
    _values(run, gate)
    numel = run["tokens"] * run["heads"] * run["head_dim"]
    for phase in ("forward", "backward"):
        traffic, log = run[phase]
        for r, t in enumerate(traffic):
            if t["messages_sent"]:
                raise CheckFailed(f"{run['case']}: in the {phase} pass rank {r} sent {t['messages_sent']} "
                                  "point-to-point message(s) (counted by the relay); the block needs one all_reduce "
                                  "per pass and nothing else")
        calls = [c for c in log if c["op"] != "barrier"]
        shown = ", ".join(f"{c['op']} of {c['numel']} {c['dtype']}" for c in calls) or "none"
        if len(calls) != 1 or calls[0]["op"] != "allreduce" or calls[0]["numel"] != numel:
            raise CheckFailed(
                f"{run['case']}: the {phase} pass made the collective(s) {shown} (the relay's log, each counted once "
                f"for all ranks); Megatron's block makes exactly one all_reduce of tokens x hidden = {numel} values "
                f"in each pass: {'g, after the output projection' if phase == 'forward' else 'f, of the gradient of x'}"
                + ("; f once before the three projections, not once per projection" if len(calls) > 1
                   and all(c["op"] == "allreduce" for c in calls) else ""))


_RUNS = RunsOnce()


def check(*solution: Any, source: Sequence[tuple[str, str]], runs: Sequence[Any], what: str) -> None:
    """``runs``: ``[(n, [(tokens, heads, head_dim, case), ...]), ...]``, one process group of ``n`` ranks each;
    ``what``: ``values`` (every rank's output), ``gradients`` (every rank's gradients) or ``traffic`` (each
    pass's collectives, on correct outputs).

    ``solution``: the solution cells' placeholders (none: run ``source`` itself); ``source``: their
    ``solution_parts``, read with :data:`~dlperf.grading.probes.tensor_parallel.RULES` first.  The runs are
    made once and kept for the other cells (same solution, same runs)."""
    found = read(source, probe.RULES)
    if found:
        raise CheckFailed("the grader's reading of your cells refuses (the self-check's reading row shows the "
                          "same):\n" + "\n".join(found))
    for run in _RUNS.each(source, runs, lambda group: _group(solution, source, *group)):
        {"values": _values, "gradients": _gradients, "traffic": _traffic}[what](run)


def fg_check(*solution: Any, source: Sequence[tuple[str, str]], n: int = 2) -> None:
    """Part 1 alone: ``copy_to_parallel`` and ``reduce_from_parallel`` on ``n`` relayed ranks (the self-check)."""
    gen = torch.Generator().manual_seed(5)
    xs = [torch.randn(3, 4, generator=gen) for _ in range(n)]
    gs = [torch.randn(3, 4, generator=gen) for _ in range(n)]
    with relayed(solution, source, n) as ranks:
        try:
            got = ranks.probe("tensor_parallel:fg", [(xs[r], gs[r]) for r in range(n)])
        except StudentRaised as exc:
            raise CheckFailed(f"your code raised {exc.type_name}: {exc.message}") from None
    total_x, total_g = sum(xs), sum(gs)
    for r, out in enumerate(got):
        for key, want, what in (("copy_to_parallel", xs[r], "the identity: this rank's x"),
                                ("copy_to_parallel.grad", total_g, "the sum over the ranks of the gradient"),
                                ("reduce_from_parallel", total_x, "the sum over the ranks of x"),
                                ("reduce_from_parallel.grad", gs[r], "the identity: this rank's gradient")):
            value = out[key]
            if value is None or value.shape != want.shape or not torch.allclose(value, want, atol=1e-6):
                raise CheckFailed(f"rank {r}: {key.replace('.grad', ' backward')} gave "
                                  f"{'no gradient' if value is None else value.tolist()}; expected {what}")


def case(*solution: Any, runs: Sequence[Any] = SELF_CHECK_RUNS, what: str) -> Callable[[], tuple[Any, Any, bool]]:
    """A self-check case: :func:`check` on ``runs``, or part 1 alone (``what="fg"``)
    (:func:`autograder.exercises.self_check_case`)."""
    if what == "fg":
        return self_check_case(lambda *s, source, runs, what: fg_check(*s, source=source), solution, runs, what)
    return self_check_case(check, solution, runs, what)
