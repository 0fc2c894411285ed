"""The checker's side of the ``ssp_server`` exercise: the workers, the arrival orders, the trusted copy, the verdicts.

The student writes the *server* of stale-synchronous parallel training (Ho et
al., NIPS 2013): ``SSPServer(w, workers, staleness, lr)`` and its one method
``push(worker, grad)``.  A push is the gradient of the worker's clock ``c``
and carries its pull of clock ``c + 1`` (as the chapter's server,
:mod:`dlperf.staleness`); it returns every pull the server answers now, as
``[(worker, weights), ...]``.  The server is kept in a host
(:meth:`~autograder.trusted.Student.keep`); the *workers are the grader's*:
this process computes every gradient (a tiny least-squares problem, float64)
on the weights the server answered, and decides which worker pushes next: the
**arrival order** (:data:`ORDERS`: round robin, a straggler, a random order
drawn per submission).  Everything graded is observed here, not reported by
the student's process:

* the clocks (the pushes this process made), so *which pulls the bound
  allows*: a pull of clock ``c`` may be answered iff ``min(clocks) >= c - s``;
* the trusted copy of the weights: ``w0`` minus ``lr / workers`` times every
  gradient pushed so far, in the order they were pushed (the reference run
  with the same arrival order);
* synchronous SGD in one process (``s = 0``): ``w_{c+1} = w_c - lr mean_k g_k(w_c)``.

Verdicts, one per hidden cell (:func:`check`'s ``what``); a run in which the
server stops answering (no worker left with weights to compute on, pulls
pending) fails every cell that grades it:

* ``values``: in the runs with ``s >= 1``, every answered pull holds the trusted
  copy at that moment (within :data:`TOLERANCE`);
* ``bound``: in those runs, no pull answered while the bound forbids it;
* ``waits``: in every run, no pull left waiting once the bound allows it (the
  waits counted here equal the minimum for the arrival order), graded when the
  bound holds;
* ``sync``: in the runs with ``s = 0``, every pull of clock ``c`` holds
  synchronous SGD's ``w_c``.

Every hidden cell also applies the reading of the cell
(:data:`dlperf.grading.probes.ssp_server.RULES`, the self-check's too).  The
runs are made once per submission, in one host, and shared by the four
hidden cells (:class:`~autograder.exercises.runs.RunsOnce`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from dlperf.grading.probes import ssp_server as probe
from dlperf.grading.reading import read

from autograder.exercises import self_check_case
from autograder.exercises.runs import RunsOnce
from autograder.trusted import CheckFailed, Student, StudentRaised, seed

__all__ = ["FEATURES", "LR", "ORDERS", "SELF_CHECK_RUNS", "STEPS", "TOLERANCE", "WORKERS", "case", "check", "drive",
           "gradient", "order_pattern", "problem", "synchronous_sgd"]

WORKERS, STEPS, FEATURES, LR = 3, 4, 4, 0.3
TOLERANCE = {"rtol": 1e-9, "atol": 1e-12}
# the arrival orders: a pattern of worker ids, repeated; the next push is made by the first worker in it (from where
# the last one was found) that holds weights to compute on.  "random" is drawn per submission (trusted.seed).
ORDERS = {
    "round robin": [0, 1, 2],
    "worker 0 straggles": [1, 2, 1, 2, 1, 2, 0],
    "worker 2 straggles": [0, 1, 0, 1, 2, 0, 1, 0, 1],
}
# (staleness s, order, case id)
SELF_CHECK_RUNS = [(0, "worker 0 straggles", "s1"), (1, "worker 0 straggles", "s2"), (2, "random", "s3")]


def problem(seed_: int, features: int = FEATURES, samples: int = 24) -> tuple[torch.Tensor, torch.Tensor]:
    """Least squares ``0.5 mean((X w - y)^2)``, float64, seeded."""
    gen = torch.Generator().manual_seed(seed_)
    X = torch.randn(samples, features, generator=gen, dtype=torch.float64)
    y = X @ torch.randn(features, generator=gen, dtype=torch.float64) + 0.1 * torch.randn(
        samples, generator=gen, dtype=torch.float64)
    return X, y


def gradient(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor, worker: int, clock: int, seed_: int) -> torch.Tensor:
    """Worker ``worker``'s minibatch gradient at ``clock`` (4 samples drawn from ``(seed_, worker, clock)``)."""
    idx = torch.randint(len(y), (4,), generator=torch.Generator().manual_seed(seed_ * 7919 + worker * 101 + clock))
    Xb = X[idx]
    return Xb.T @ (Xb @ w - y[idx]) / len(idx)


def synchronous_sgd(X: torch.Tensor, y: torch.Tensor, seed_: int, workers: int = WORKERS, steps: int = STEPS,
                    lr: float = LR) -> list[torch.Tensor]:
    """``[w_0, ..., w_steps]``: per clock, every worker's gradient at the same weights, their mean, one step."""
    w = [torch.zeros(X.shape[1], dtype=torch.float64)]
    for c in range(steps):
        mean = sum(gradient(w[-1], X, y, k, c, seed_) for k in range(workers)) / workers
        w.append(w[-1] - lr * mean)
    return w


def order_pattern(order: str, seed_: int, workers: int = WORKERS) -> list[int]:
    """The pattern of the arrival order ``order`` (``random``: 40 draws, worker 0 half as likely as the others)."""
    if order == "random":
        rng = random.Random(seed_)
        return rng.choices(range(workers), weights=[1] + [2] * (workers - 1), k=40)
    return ORDERS[order]


def drive(push: Callable[[int, torch.Tensor], Any], s: int, order: str, seed_: int, workers: int = WORKERS,
          steps: int = STEPS, lr: float = LR) -> dict[str, Any]:
    """One run: the grader's workers push ``steps`` gradients each, in the arrival order, to ``push`` (the
    server's method); what happened, observed here.

    ``answers``: one row per answered pull (worker, clock, slowest clock when answered, the weights, the trusted
    copy, synchronous SGD's weights of that clock); ``late``: pulls left waiting when the bound allowed them;
    ``waits`` / ``needed``: pulls not answered at once / of those, how many the bound held back;
    ``stuck``: the pulls pending when no worker had weights to compute on (else ``None``)."""
    X, y = problem(seed_)
    sync = synchronous_sgd(X, y, seed_, workers, steps, lr) if s == 0 else None
    trusted = torch.zeros(FEATURES, dtype=torch.float64)
    clocks = [0] * workers
    holding = {k: trusted.clone() for k in range(workers)}   # the weights each computing worker read
    pending: dict[int, int] = {}                              # worker -> the clock of its pull
    pattern, at = order_pattern(order, seed_, workers), 0
    run: dict[str, Any] = {"s": s, "order": order, "answers": [], "late": [], "waits": 0, "needed": 0,
                           "stuck": None, "protocol": None}
    while holding:
        for i in range(len(pattern)):                         # the next worker of the order that can push
            k = pattern[(at + i) % len(pattern)]
            if k in holding:
                at = (at + i + 1) % len(pattern)
                break
        else:
            k = min(holding)
        g = gradient(holding.pop(k), X, y, k, clocks[k], seed_)
        trusted = trusted - (lr / workers) * g
        clocks[k] += 1
        pending[k] = clocks[k]
        slowest = min(clocks)
        allowed = {j for j, c in pending.items() if slowest >= c - s}
        run["needed"] += k not in allowed
        answers = push(k, g.clone())
        got = _answers(answers, pending, run)
        if got is None:
            return run
        run["waits"] += k not in got
        for j, weights in got.items():
            c = pending.pop(j)
            run["answers"].append({"worker": j, "clock": c, "slowest": slowest, "allowed": j in allowed,
                                   "weights": weights, "trusted": trusted.clone(),
                                   "sync": sync[c] if sync is not None else None})
            if c < steps:
                holding[j] = weights
        run["late"] += [{"worker": j, "clock": pending[j], "slowest": slowest} for j in sorted(allowed - set(got))]
    if pending:
        run["stuck"] = dict(pending)
    return run


def _answers(answers: Any, pending: dict[int, int], run: dict[str, Any]) -> dict[int, torch.Tensor] | None:
    """``push``'s return value as {worker: weights}, or None (and ``run["protocol"]`` says why)."""
    ok = isinstance(answers, (list, tuple)) and all(
        isinstance(a, (list, tuple)) and len(a) == 2 and type(a[0]) is int for a in answers)
    if not ok:
        run["protocol"] = (f"push returned {type(answers).__name__} {str(answers)[:80]}; it returns a list of "
                           "(worker, weights) pairs, one per pull answered now (an empty list when none)")
        return None
    got: dict[int, torch.Tensor] = {}
    for worker, weights in answers:
        if worker not in pending or worker in got:
            run["protocol"] = (f"push answered worker {worker}'s pull, but worker {worker} has no pull waiting "
                               f"(waiting: {sorted(pending)}); answer each pull once")
            return None
        if type(weights) is not torch.Tensor or weights.shape != (FEATURES,) or weights.dtype != torch.float64:
            what = (f"shape {tuple(weights.shape)} {weights.dtype}" if type(weights) is torch.Tensor
                    else type(weights).__name__)
            run["protocol"] = (f"the weights answered to worker {worker} are a {what}; expected a torch.Tensor "
                               f"like w ({FEATURES} float64 values)")
            return None
        got[worker] = weights
    return got


# -- the runs, made in the student's host -----------------------------------------------------------------------

def _label(s: int, order: str) -> str:
    return f"s={s}{' (fully asynchronous)' if s >= STEPS else ''}, {WORKERS} workers x {STEPS} clocks, order: {order}"


def _group(solution: Any, source: Sequence[tuple[str, str]], runs: Sequence[Any]) -> list[dict[str, Any]]:
    done = []
    given = {} if solution else {"parts": source}
    with Student(*(solution or ()), timeout=30, **given) as student:
        for s, order, case_id in runs:
            seed_ = seed("ssp_server", s, order, case_id) % 2**31
            label = _label(s, order)
            try:
                server = student.keep("SSPServer", torch.zeros(FEATURES, dtype=torch.float64), WORKERS, s, LR)
                run = drive(lambda k, g: server.call("push", k, g), s, order, seed_)
            except StudentRaised as exc:
                raise CheckFailed(f"{label}: your code raised {exc.type_name}: {exc.message}") from None
            except CheckFailed as exc:
                raise CheckFailed(f"{label}: {exc}") from None
            run["case"] = label
            done.append(run)
    return done


# -- the verdicts ---------------------------------------------------------------------------------------------

def _vec(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{float(x):.6g}" for x in t) + "]"


def _ended(run: dict[str, Any]) -> None:
    if run["protocol"]:
        raise CheckFailed(f"{run['case']}: {run['protocol']}")
    if run["stuck"]:
        waiting = ", ".join(f"worker {k} at clock {c}" for k, c in sorted(run["stuck"].items()))
        raise CheckFailed(f"{run['case']}: the run stopped: no worker had weights to compute on, and the server "
                          f"never answered the pulls of {waiting}, although every worker had pushed (a pull "
                          "waiting for a clock that no push can now advance: check the bound, and answer every "
                          "waiting pull the bound allows after each push, not only the pusher's)")


def _values(run: dict[str, Any]) -> None:
    _ended(run)
    for a in run["answers"]:
        if not torch.allclose(a["weights"], a["trusted"], **TOLERANCE):
            raise CheckFailed(
                f"{run['case']}: the weights answered to worker {a['worker']} at clock {a['clock']} are "
                f"{_vec(a['weights'])}; the server's copy at that moment is {_vec(a['trusted'])} (w0 minus lr / "
                f"workers times every gradient pushed so far, this worker's last one included, in the order "
                "they arrived; answer a copy of the server's current weights)")


def _bound(run: dict[str, Any]) -> None:
    _ended(run)
    for a in run["answers"]:
        if not a["allowed"]:
            raise CheckFailed(
                f"{run['case']}: worker {a['worker']}'s pull of clock {a['clock']} was answered while the slowest "
                f"worker was at clock {a['slowest']} (the grader's count of pushes): the bound allows it only once "
                f"the slowest is at clock >= c - s = {a['clock'] - run['s']}")


def _waits(run: dict[str, Any]) -> None:
    _ended(run)
    try:
        _bound(run)
    except CheckFailed as exc:
        raise CheckFailed(f"(waits are graded when the bound holds) {exc}") from None
    if run["late"]:
        a = run["late"][0]
        raise CheckFailed(
            f"{run['case']}: worker {a['worker']}'s pull of clock {a['clock']} was left waiting while the slowest "
            f"worker was at clock {a['slowest']} >= c - s = {a['clock'] - run['s']}: the bound allowed it "
            f"(pulls not answered at once: {run['waits']}; the minimum for this arrival order: {run['needed']})")


def _sync(run: dict[str, Any]) -> None:
    _ended(run)
    for a in run["answers"]:
        if not torch.allclose(a["weights"], a["sync"], **TOLERANCE):
            raise CheckFailed(
                f"{run['case']}: with s = 0 worker {a['worker']} read at clock {a['clock']} the weights "
                f"{_vec(a['weights'])}; synchronous SGD's after {a['clock']} steps (every worker's gradient of "
                f"each earlier clock, at the same weights, their mean) are {_vec(a['sync'])}")


_VERDICTS = {"values": _values, "bound": _bound, "waits": _waits, "sync": _sync}
_RUNS = RunsOnce()


def check(*solution: Any, source: Sequence[tuple[str, str]], runs: Sequence[Any], what: str) -> None:
    """``runs``: ``[(s, order, case id), ...]``, all made in one host; ``what``: ``values`` and ``bound`` (the runs
    with ``s >= 1``), ``waits`` (every run) or ``sync`` (the runs with ``s = 0``).

    ``solution``: the solution cell's placeholder ``SSPServer`` (none: run ``source`` itself); ``source``: its
    ``solution_parts``, read with :data:`~dlperf.grading.probes.ssp_server.RULES` first.  The runs are made once
    and kept for the other cells (same solution, same runs)."""
    found = read(source, probe.RULES)
    if found:
        raise CheckFailed("the grader's reading of your cell refuses (the self-check's reading row shows the "
                          "same):\n" + "\n".join(found))
    for run in _RUNS.each(source, [runs], lambda group: _group(solution, source, group)):
        if what == "waits" or (what == "sync") == (run["s"] == 0):
            _VERDICTS[what](run)


def case(*solution: Any, runs: Sequence[Any] = SELF_CHECK_RUNS, what: str) -> Callable[[], tuple[Any, Any, bool]]:
    """A self-check case: :func:`check` on ``runs`` (:func:`autograder.exercises.self_check_case`)."""
    return self_check_case(check, solution, runs, what)
