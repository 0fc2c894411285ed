"""Synchronous, asynchronous and stale-synchronous (SSP) parameter-server training on real processes.

The chapter's :class:`dlperf.kvstore.KVStore` is *collective*: every rank
pushes and pulls the same keys at the same moment, which is exactly the
synchronous scheme and nothing else.  A worker that may run ahead needs a
server that answers whoever asks, whenever they ask.  This module is that
server: rank 0 holds the weights and serves requests in their order of
arrival (``recv`` from any source), ranks ``1..W`` are workers.  The wire
format is the store's (CPU tensors, tagged ``gloo`` point-to-point messages);
the server applies the same :func:`dlperf.kvstore.sgd` updater.

Clocks and the consistency rule
-------------------------------
A worker's *clock* is the number of gradients it has pushed.  At clock ``c``
a worker pulls the weights, computes one minibatch gradient and pushes it.
The server knows every worker's clock; ``slowest`` is the smallest.  A pull
at clock ``c`` is answered only when :func:`ssp_ready` holds::

    slowest >= c - s          (Ho et al., 2013: stale synchronous parallel)

so the weights a worker reads contain every update of clocks ``< c - s`` of
every worker (and possibly more).  The *observed staleness* of a pull is
``c - slowest`` at the moment it is answered: by construction ``<= s``.

* ``mode="sync"``: ``s = 0``, and the server sums the ``W`` gradients of a
  clock in worker order before one update (a barrier per clock; the result is
  :func:`sequential_reference`'s, bit for bit);
* ``mode="ssp"``: bound ``s``, each gradient applied on arrival;
* ``mode="async"``: no bound (``s = inf``), each gradient applied on arrival
  (Dean et al., 2012, "Downpour SGD"; Hogwild!, Recht et al., 2011, does the
  same lock-free in shared memory).

With ``s = 0`` SSP reads exactly the weights sync reads; only the order in
which the ``W`` gradients of a clock are added differs (arrival vs worker
order), a rounding difference.

Every run stops when the server has applied ``target`` gradients (the same
amount of work in every mode); later pushes are discarded.  The server
records each pull (when it was asked and answered, the version read, the
observed staleness) and each update (time, gradients applied so far, the
*delay* of the gradient -- updates applied between its pull and its push --
and the full-data loss after the update).

Stragglers and compute time
---------------------------
A gradient of the small problem takes microseconds; to play the part of a
real training step the worker pads it with ``sleep`` to ``step_s`` seconds
(times :class:`Straggler`'s factor when slowed).  Sleeping workers leave the
cores to the others, so 4 processes behave on 2 cores as on 4.

:func:`simulate` replays the same rule without processes: given the step
times and the message costs, it gives each mode's time and staleness.

The chapter "Parameter servers" (section "Asynchronous and bounded-staleness
updates") runs all three modes side by side; ``tests/test_staleness.py``
checks the bound, sync against :func:`sequential_reference` and async's
independence from the straggler.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from .kvstore import sgd

__all__ = [
    "Config",
    "Straggler",
    "check_bound",
    "make_problem",
    "minibatch",
    "round_trip",
    "run",
    "sequential_reference",
    "simulate",
    "ssp_ready",
    "staleness_worker",
    "summarize",
    "time_to_loss",
    "loss_after",
]

_PULL, _PUSH = 0, 1
_REQUEST, _REPLY = 11, 12  # message tags


def ssp_ready(clock: int, slowest: int, bound: float) -> bool:
    """May a worker at ``clock`` read the weights while the slowest is at ``slowest``?

    Stale synchronous parallel with bound ``s``: yes iff ``slowest >= clock - s``.
    ``bound=0`` is a barrier per clock, ``bound=math.inf`` never waits.
    """
    return slowest >= clock - bound


@dataclass(frozen=True)
class Straggler:
    """Which steps run slow: worker ``w`` at clock ``c`` is slowed by ``factor`` with probability ``prob``.

    ``workers``: the workers that may be slowed (default: worker 0).  ``prob=1``
    is a persistent straggler; ``prob < 1`` on all workers is transient
    jitter.  Deterministic: the draw depends on ``(seed, w, c)`` only.
    """

    factor: float = 1.0
    workers: tuple[int, ...] = (0,)
    prob: float = 1.0
    seed: int = 0

    def slow(self, worker: int, clock: int) -> bool:
        """Is this step slowed?"""
        if worker not in self.workers or self.factor == 1.0:
            return False
        return self.prob >= 1.0 or random.Random(f"{self.seed}/{worker}/{clock}").random() < self.prob

    def step_s(self, base: float, worker: int, clock: int) -> float:
        """The duration of worker ``worker``'s step at ``clock`` (seconds)."""
        return base * (self.factor if self.slow(worker, clock) else 1.0)


@dataclass(frozen=True)
class Config:
    """One run: the mode, the bound, the work and the problem (all workers and the server share it)."""

    mode: str = "sync"                      # "sync", "ssp" or "async"
    bound: float = 0                        # SSP's s (sync: 0, async: inf)
    target: int = 120                       # gradients to apply, then stop
    lr: float = 0.2
    batch: int = 16
    step_s: float = 0.01                    # one step's compute time (padded with sleep)
    straggler: Straggler = field(default_factory=Straggler)
    samples: int = 480
    features: int = 32
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("sync", "ssp", "async"):
            raise ValueError(f"mode must be sync, ssp or async, not {self.mode!r}")

    @property
    def s(self) -> float:
        """The bound the server enforces."""
        return {"sync": 0, "async": math.inf}.get(self.mode, self.bound)

    @property
    def label(self) -> str:
        """``sync``, ``async`` or ``SSP s=...``."""
        return self.mode if self.mode != "ssp" else f"SSP s={self.bound:g}"


# -- the problem ----------------------------------------------------------------------------------


def make_problem(samples: int = 480, features: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Least squares ``y = X w* + 0.1 noise`` with correlated features (condition number about 20).

    The loss is ``0.5 * mean((X w - y)**2)``, convex; its minimum is near
    ``0.005`` (the noise).
    """
    g = torch.Generator().manual_seed(seed)
    scales = torch.logspace(0, -0.65, features)  # feature scales 1 .. 0.22: curvature 1 .. 0.05
    X = torch.randn(samples, features, generator=g) * scales
    w_star = torch.randn(features, generator=g)
    y = X @ w_star + 0.1 * torch.randn(samples, generator=g)
    return X, y


def loss_of(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor) -> float:
    """``0.5 * mean((X w - y)**2)``."""
    return 0.5 * float(((X @ w - y) ** 2).mean())


def minibatch(cfg: Config, worker: int, clock: int) -> torch.Tensor:
    """The sample indices worker ``worker`` uses at ``clock`` (the same in every mode and process)."""
    g = torch.Generator().manual_seed(cfg.seed * 1_000_003 + worker * 100_003 + clock)
    return torch.randint(cfg.samples, (cfg.batch,), generator=g)


def gradient(w: torch.Tensor, X: torch.Tensor, y: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """The gradient of the minibatch loss ``0.5 * mean((X[idx] w - y[idx])**2)``."""
    Xb = X[idx]
    return Xb.T @ (Xb @ w - y[idx]) / len(idx)


def sequential_reference(cfg: Config, workers: int) -> dict[str, Any]:
    """Sync's updates in one process: per clock, the ``workers`` gradients at the same weights, summed in order."""
    X, y = make_problem(cfg.samples, cfg.features, cfg.seed)
    w = torch.zeros(cfg.features)
    update = sgd(cfg.lr)
    losses = [loss_of(w, X, y)]
    for clock in range(cfg.target // workers):
        grads = [gradient(w, X, y, minibatch(cfg, k, clock)) for k in range(workers)]
        total = grads[0].clone()
        for g in grads[1:]:
            total += g
        update("w", total, w)
        losses.append(loss_of(w, X, y))
    return {"w": w, "losses": losses}


# -- the processes --------------------------------------------------------------------------------


def _serve(cfg: Config, workers: int, t0: float) -> dict[str, Any]:
    """Rank 0: hold the weights, answer pulls when :func:`ssp_ready` allows (the first ones once every worker
    has sent its first), apply pushes."""
    X, y = make_problem(cfg.samples, cfg.features, cfg.seed)
    w = torch.zeros(cfg.features)
    update = sgd(cfg.lr)
    clocks = [0] * workers          # gradients received from each worker
    applied = 0                     # gradients applied so far (the weights' version)
    read_version: dict[tuple[int, int], int] = {}
    waiting: list[tuple[int, int, float]] = []  # pulls not answered yet: (worker, clock, asked at)
    # workers whose first pull has come: the first pulls are answered together, so that every worker starts
    # from the initial weights (one worker's late start would otherwise read a fast one's first gradient)
    started: set[int] = set()
    sync_inbox: dict[int, dict[int, torch.Tensor]] = {}
    pulls, updates = [], [dict(t=0.0, applied=0, loss=loss_of(w, X, y), worker=-1, clock=-1, delay=0)]
    stopped, discarded = 0, 0
    request = torch.zeros(3 + cfg.features, dtype=torch.float64)  # op, clock, worker, gradient

    def answer(worker: int, clock: int, asked: float) -> None:
        nonlocal stopped
        stop = applied >= cfg.target
        head = torch.tensor([float(stop), applied, min(clocks)], dtype=torch.float64)
        dist.send(torch.cat([head, w.double()]), worker + 1, tag=_REPLY)
        if stop:
            stopped += 1
            return
        read_version[(worker, clock)] = applied
        pulls.append(dict(worker=worker, clock=clock, asked=asked, answered=time.perf_counter() - t0,
                          version=applied, slowest=min(clocks), staleness=clock - min(clocks)))

    def log_update(worker: int, clock: int, delay: int) -> None:
        updates.append(dict(t=time.perf_counter() - t0, applied=applied, loss=loss_of(w, X, y),
                            worker=worker, clock=clock, delay=delay))

    while stopped < workers:
        src = dist.recv(request, src=None, tag=_REQUEST)
        op, clock, worker = (int(v) for v in request[:3])
        assert worker == src - 1, (worker, src)
        if op == _PUSH:  # a push of `clock`, which is also the pull of `clock + 1`
            grad = request[3:].float()
            clocks[worker] = clock + 1
            if applied >= cfg.target:
                discarded += 1
            elif cfg.mode == "sync":
                inbox = sync_inbox.setdefault(clock, {})
                inbox[worker] = grad
                if len(inbox) == workers:  # the barrier: sum in worker order, one update
                    total = inbox[0].clone()
                    for k in range(1, workers):
                        total += inbox[k]
                    update("w", total, w)
                    applied += workers
                    del sync_inbox[clock]
                    log_update(-1, clock, 0)
            else:
                update("w", grad, w)
                applied += 1
                log_update(worker, clock, applied - 1 - read_version[(worker, clock)])
            clock += 1
        else:
            started.add(worker)
        waiting.append((worker, clock, time.perf_counter() - t0))
        still = []
        for worker_, clock_, asked in waiting:  # answer every pull the rule now allows, in arrival order
            if len(started) == workers and (applied >= cfg.target or ssp_ready(clock_, min(clocks), cfg.s)):
                answer(worker_, clock_, asked)
            else:
                still.append((worker_, clock_, asked))
        waiting = still
    return dict(pulls=pulls, updates=updates, discarded=discarded, w=w, seconds=time.perf_counter() - t0)


def _work(cfg: Config, worker: int) -> dict[str, Any]:
    """Ranks 1..W: pull, compute a minibatch gradient (padded to the step time), push; until told to stop.

    One message each way per step: the push of clock ``c`` carries the pull of
    clock ``c + 1``, and the answer carries the weights.
    """
    X, y = make_problem(cfg.samples, cfg.features, cfg.seed)
    reply = torch.zeros(3 + cfg.features, dtype=torch.float64)  # stop, version, slowest, weights
    clock, waited, computed = 0, 0.0, 0.0
    message = torch.zeros(3 + cfg.features, dtype=torch.float64)  # every request has the same size
    message[:3] = torch.tensor([_PULL, 0, worker])
    while True:
        asked = time.perf_counter()
        dist.send(message, 0, tag=_REQUEST)
        dist.recv(reply, 0, tag=_REPLY)
        if reply[0]:
            break
        start = time.perf_counter()
        waited += start - asked
        g = gradient(reply[3:].float(), X, y, minibatch(cfg, worker, clock))
        pause = cfg.straggler.step_s(cfg.step_s, worker, clock) - (time.perf_counter() - start)
        if pause > 0:
            time.sleep(pause)
        computed += time.perf_counter() - start
        message = torch.cat([torch.tensor([_PUSH, clock, worker], dtype=torch.float64), g.double()])
        clock += 1
    return dict(worker=worker, clocks=clock, waited_s=waited, computed_s=computed)


def run(cfg: Config) -> dict[str, Any]:
    """One run on the current process group (rank 0 serves, the others work); every rank returns its record."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if cfg.mode == "sync" and cfg.target % (world - 1):
        raise ValueError(f"sync applies {world - 1} gradients at a time: target {cfg.target} is not a multiple")
    dist.barrier()
    t0 = time.perf_counter()
    out = _serve(cfg, world - 1, t0) if rank == 0 else _work(cfg, rank - 1)
    dist.barrier()
    return out


def staleness_worker(configs: Sequence[Config]) -> list[dict[str, Any]]:
    """Worker for :func:`dlperf.launch.launch`: run every config in turn on one process group.

    Each rank returns its record of every run (the server's or the worker's);
    the launcher hands them back ordered by rank.
    """
    torch.set_num_threads(1)
    rtt = round_trip(3 + configs[0].features) if configs else float("nan")
    return [dict(run(cfg), round_trip_s=rtt) for cfg in configs]


def round_trip(numel: int, repeats: int = 30) -> float:
    """Median seconds for one request and one reply of ``numel`` float64 between rank 1 and rank 0.

    The other ranks wait.  This is the message cost :func:`simulate` needs, on
    this machine, now (a loaded machine makes it much larger than the wire's).
    """
    rank, buf, times = dist.get_rank(), torch.zeros(numel, dtype=torch.float64), []
    dist.barrier()
    for _ in range(repeats):
        start = time.perf_counter()
        if rank == 0:
            dist.recv(buf, 1, tag=_REQUEST)
            dist.send(buf, 1, tag=_REPLY)
        elif rank == 1:
            dist.send(buf, 0, tag=_REQUEST)
            dist.recv(buf, 0, tag=_REPLY)
        times.append(time.perf_counter() - start)
    times = torch.tensor([times if rank == 1 else [0.0] * repeats], dtype=torch.float64)
    dist.broadcast(times, src=1)
    return float(times.median())


# -- reading the records --------------------------------------------------------------------------


def check_bound(pulls: Sequence[dict[str, Any]], bound: float) -> list[dict[str, Any]]:
    """The pulls whose observed staleness exceeds ``bound`` (empty when the rule held)."""
    return [p for p in pulls if p["staleness"] > bound]


def time_to_loss(summary: dict[str, Any], loss: float) -> float:
    """Seconds until the full-data loss first fell to ``loss`` (``inf`` if it never did)."""
    return next((t for t, value in zip(summary["t"], summary["loss"]) if value <= loss), math.inf)


def loss_after(summary: dict[str, Any], gradients: int) -> float:
    """The full-data loss once ``gradients`` gradients had been applied."""
    return next(value for a, value in zip(summary["applied"], summary["loss"]) if a >= gradients)


def summarize(cfg: Config, results: Sequence[dict[str, Any]], epoch: int | None = None) -> dict[str, Any]:
    """One run's numbers, from the records of all ranks (``results[0]`` the server's).

    ``epoch``: gradients per epoch (default ``cfg.samples // cfg.batch``).
    """
    server, workers = results[0], results[1:]
    epoch = epoch or cfg.samples // cfg.batch
    ups = server["updates"]
    end = ups[-1]["t"]
    stale = [p["staleness"] for p in server["pulls"]]
    return dict(
        label=cfg.label, mode=cfg.mode, bound=cfg.s, seconds=end, epochs=ups[-1]["applied"] / epoch,
        s_per_epoch=end / (ups[-1]["applied"] / epoch), final_loss=ups[-1]["loss"],
        max_staleness=max(stale), staleness=stale, delays=[u["delay"] for u in ups[1:]],
        clocks=[w["clocks"] for w in workers], waited_s=[w["waited_s"] for w in workers],
        t=[u["t"] for u in ups], applied=[u["applied"] for u in ups], loss=[u["loss"] for u in ups],
        config=asdict(cfg),
    )


# -- the schedule without processes --------------------------------------------------------------


def simulate(
    workers: int, target: int, bound: float, step_s: float, straggler: Straggler,
    pull_s: float = 0.0, push_s: float = 0.0,
) -> dict[str, Any]:
    """The time the rule needs to apply ``target`` gradients, and the staleness of each pull.

    Worker ``k``'s push of clock ``c`` arrives at ``A[k][c] = R[k][c] + step + push_s``;
    its pull of clock ``c`` is answered at
    ``R[k][c] = max(A[k][c-1], time the slowest worker reached c - s) + pull_s``.
    The server and the network are never busy (each message costs its own
    ``pull_s``/``push_s``, e.g. from :func:`dlperf.cluster.transfer_time`).
    """
    arrive: list[list[float]] = [[] for _ in range(workers)]
    answered: list[list[float]] = [[] for _ in range(workers)]
    reached = [0.0]  # reached[k]: when every worker had pushed k gradients (non-decreasing)
    events: list[float] = []
    for c in range(target):  # no worker needs more than `target` clocks
        for k in range(workers):
            ready = arrive[k][c - 1] if c else 0.0
            need = c - bound
            if need > 0:  # the slowest worker must have reached clock `need`
                ready = max(ready, reached[int(need)])
            answered[k].append(ready + pull_s)
            arrive[k].append(answered[k][c] + straggler.step_s(step_s, k, c) + push_s)
            events.append(arrive[k][c])
        reached.append(max(arrive[k][c] for k in range(workers)))
        # every later push arrives after min_k arrive[k][c]: the first `target` are known
        horizon = min(arrive[k][c] for k in range(workers))
        if len(events) >= target and sum(t <= horizon for t in events) >= target:
            break
    events.sort()
    end = events[target - 1]
    times = events[:target]
    stale = [c - bisect.bisect_right(reached, t) + 1 for k in range(workers)
             for c, t in enumerate(answered[k]) if t < end]
    return dict(seconds=end, times=times, max_staleness=max(stale), staleness=stale)
