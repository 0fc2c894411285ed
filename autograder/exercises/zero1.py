"""The checker's side of the ``zero1`` exercise: the partition, the reference training, the verdicts.

The student's ``ShardedOptimizer`` runs on 2 or 3 ranks, each a host joined to
the others only by the relay, opened with collectives
(:class:`~autograder.trusted.Ranks`, ``collectives=True``).  The public probe
:func:`dlperf.grading.probes.zero1.train` drives it: ``zero_grad``, forward,
backward, one ``all_reduce`` of the flattened gradients (then ``/ n``), the
student's ``step``.  Everything expected is computed here:

* values: the same model and batches (the probe's public ``build``/``batch``,
  same seed) trained unsharded with ``torch.optim`` in this process, the
  gradients summed in rank order as the relay sums them;
* the partition (:func:`partition`) and, from it, each rank's optimizer-state
  bytes: ``torch.optim`` run here on tensors of the owned shapes (the probe
  reports every ``torch.optim.Optimizer`` alive in the rank's process, not only
  ``self.optimizer``: a second optimizer over all the parameters is counted);
* traffic: the relay's log of every collective, in order.  The probe's
  gradient all-reduces (one per step, of every parameter's elements) mark the
  steps; between two of them the relay must see exactly one broadcast per
  parameter, rooted at its owner, and nothing else but barriers.

What the student's process reports that this side cannot observe: the final
parameters (compared with the reference: a forged answer can only be a correct
one), which parameters the inner optimizer holds and the bytes of its state.
The last two are cross-checked by the relay (the bytes each rank broadcast as a
root in each step must be its own shard's) and by :func:`static_findings`, a
reading of the cell that refuses what a forgery would need.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
from dlperf.grading.probes import zero1 as probe

from autograder.exercises.data_parallel import train_averaged
from autograder.exercises.runs import RunsOnce
from autograder.trusted import CheckFailed, Ranks, StudentRaised, seed
from autograder.trusted.reading import parse_cells, refuse_hiding

__all__ = ["ALLOWED_IMPORTS", "check", "expected_state_bytes", "partition", "reference", "static_findings"]

ALLOWED_IMPORTS = {"torch", "math"}
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
STEPS = 3


def sizes_of(dims: Sequence[int]) -> list[int]:
    """Element counts of the probe's model's parameters, in order (weight, bias per layer)."""
    return [p.numel() for p in probe.build(dims, 0).parameters()]


def partition(sizes: Sequence[int], n: int) -> list[int]:
    """The owner of each parameter: ``n * start // total``, ``start`` = elements of the parameters before it."""
    total, start, owners = sum(sizes), 0, []
    for size in sizes:
        owners.append(n * start // total)
        start += size
    return owners


def reference(dims: Sequence[int], seed_: int, n: int, steps: int, optimizer: str, kwargs: dict[str, Any]
              ) -> list[torch.Tensor]:
    """The parameters after ``steps`` steps of unsharded training with ``torch.optim`` (this process)."""
    model = probe.build(dims, seed_)
    opt = probe.OPTIMIZERS[optimizer](model.parameters(), **kwargs)
    return train_averaged(model, opt, lambda rank, step: probe.batch(dims, seed_, rank, step), n, steps)


def expected_state_bytes(dims: Sequence[int], owned: Sequence[int], optimizer: str, kwargs: dict[str, Any]) -> int:
    """Bytes of the state ``torch.optim`` keeps for the parameters ``owned`` after a step (0 if none)."""
    params = [p for i, p in enumerate(probe.build(dims, 0).parameters()) if i in set(owned)]
    if not params:
        return 0
    opt = probe.OPTIMIZERS[optimizer](params, **kwargs)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    return probe.state_bytes(opt)


def _names(optimizer: str, kwargs: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    return f"{probe.OPTIMIZERS[optimizer].__name__}({args})"


def _run(solution: Any, source: Sequence[tuple[str, str]], n: int, dims: Sequence[int], cases: Sequence[Any]
         ) -> list[dict[str, Any]]:
    done = []
    given = {} if solution else {"parts": source}
    with Ranks(*(solution or ()), n=n, timeout=45, collectives=True, **given) as ranks:
        for optimizer, kwargs, case_id in cases:
            seed_ = seed("zero1", n, tuple(dims), case_id) % 2**31
            case = f"{n} ranks, parameter sizes {sizes_of(dims)}, {_names(optimizer, kwargs)}"
            try:
                results = ranks.probe("zero1:train", [(list(dims), seed_, STEPS, optimizer, dict(kwargs))] * n)
            except StudentRaised as exc:
                raise CheckFailed(f"{case}: your code raised {exc.type_name}: {exc.message}") from None
            except CheckFailed as exc:
                raise CheckFailed(f"{case}: {exc}") from None
            done.append({"n": n, "dims": list(dims), "seed": seed_, "optimizer": optimizer, "kwargs": dict(kwargs),
                         "case": case, "results": results, "log": ranks.collective_log, "traffic": ranks.traffic})
    return done


def _values(run: dict[str, Any]) -> None:
    want = reference(run["dims"], run["seed"], run["n"], STEPS, run["optimizer"], run["kwargs"])
    for r, result in enumerate(run["results"]):
        got = result.get("params") if isinstance(result, dict) else None
        if not (isinstance(got, list) and len(got) == len(want)):
            raise CheckFailed(f"{run['case']}: the probe could not read rank {r}'s parameters")
        for i, (g, w) in enumerate(zip(got, want)):
            if not (isinstance(g, torch.Tensor) and g.shape == w.shape and torch.allclose(g, w, **TOLERANCE)):
                error = float((g - w).abs().max()) if isinstance(g, torch.Tensor) and g.shape == w.shape else None
                owner = partition(sizes_of(run["dims"]), run["n"])[i]
                raise CheckFailed(f"{run['case']}: after {STEPS} steps rank {r}'s parameter {i} (owned by rank {owner}) "
                                  f"differs from unsharded training with torch.optim"
                                  + (f" (largest difference {error:.3g}; tolerance {TOLERANCE['atol']:g} + "
                                     f"{TOLERANCE['rtol']:g} x |value|)" if error is not None else "")
                                  + ". Every rank must end each step with every parameter as its owner updated it")


def _steps(run: dict[str, Any]) -> list[list[dict[str, Any]]]:
    """The relay's log cut at the probe's gradient all-reduces: [before step 1, step 1, ..., step K]."""
    total = sum(sizes_of(run["dims"]))
    allreduces = [c for c in run["log"] if c["op"] == "allreduce"]
    if len(allreduces) != STEPS or any(c["numel"] != total for c in allreduces):
        extra = len(allreduces) - STEPS
        raise CheckFailed(f"{run['case']}: the relay counted {len(allreduces)} all_reduce calls per rank in {STEPS} "
                          f"steps; the probe's gradient all_reduce (one per step, {total} elements) accounts for "
                          f"{STEPS}, so your optimizer issued {extra}. The gradients arrive already averaged: step() "
                          "sends parameters only, one broadcast each, from its owner")
    segments: list[list[dict[str, Any]]] = [[]]
    for c in run["log"]:
        if c["op"] == "allreduce":
            segments.append([])
        elif c["op"] != "barrier":
            segments[-1].append(c)
    return segments


def _traffic(run: dict[str, Any]) -> None:
    sizes = sizes_of(run["dims"])
    owners = partition(sizes, run["n"])
    want = Counter(zip(sizes, owners))
    segments = _steps(run)
    if segments[0]:
        raise CheckFailed(f"{run['case']}: the relay saw {_show(segments[0])} before the first step; the constructor "
                          "and zero_grad communicate nothing")
    for k, segment in enumerate(segments[1:], 1):
        others = [c for c in segment if c["op"] != "broadcast"]
        if others:
            raise CheckFailed(f"{run['case']}: step {k}: your step() called {_show(others)}; it may only broadcast "
                              "(one broadcast per parameter, from its owner)")
        seen = Counter((c["numel"], c["root"]) for c in segment)
        if seen != want:
            raise CheckFailed(f"{run['case']}: step {k}: the relay saw the broadcasts {_pairs(seen)} (elements from "
                              f"root); one per parameter from its owner is {_pairs(want)} (owners {owners}, the "
                              "partition rule n * start // total)")


def _show(calls: Sequence[dict[str, Any]]) -> str:
    names = Counter(c["op"] for c in calls)
    return ", ".join(f"{k} x{v}" for k, v in names.items())


def _pairs(counter: Counter[Any]) -> str:
    items = sorted(counter.elements(), key=lambda p: (p[1], -p[0]))
    return "[" + ", ".join(f"{numel} from {root}" for numel, root in items) + "]"


def _state(run: dict[str, Any], findings: Sequence[str]) -> None:
    if findings:
        raise CheckFailed("the optimizer state is measured in your process, so it is graded only when the reading of "
                          "your cell finds nothing to object to: " + "; ".join(findings[:3]))
    sizes = sizes_of(run["dims"])
    owners = partition(sizes, run["n"])
    for r, result in enumerate(run["results"]):
        mine = [i for i, o in enumerate(owners) if o == r]
        owned = result.get("owned") if isinstance(result, dict) else None
        if owned != mine:
            raise CheckFailed(f"{run['case']}: on rank {r} the optimizers hold the parameters {owned}; the partition "
                              f"gives rank {r} the parameters {mine} (owners {owners}). Build the inner optimizer over "
                              "the owned parameters only (None when a rank owns none), and no other optimizer")
        want = expected_state_bytes(run["dims"], mine, run["optimizer"], run["kwargs"])
        got = result.get("state_bytes")
        if got != want:
            raise CheckFailed(f"{run['case']}: rank {r}'s optimizer state holds {got} bytes after {STEPS} steps; the "
                              f"state of its own parameters {mine} is {want} bytes")
    for r in range(run["n"]):
        rooted = sum(c["contributed"][r] for c in run["log"] if c["op"] == "broadcast")
        shard = 4 * sum(s for s, o in zip(sizes, owners) if o == r)
        if rooted != STEPS * shard:
            raise CheckFailed(f"{run['case']}: in {STEPS} steps rank {r} broadcast {rooted} bytes as a root (counted by "
                              f"the relay), but its shard holds {shard} bytes of parameters, {STEPS * shard} in "
                              f"{STEPS} steps: each rank updates and broadcasts its own shard, so what the relay sees "
                              "must match the state it reports")


_RUNS = RunsOnce()


def check(*solution: Any, source: Sequence[tuple[str, str]], runs: Sequence[Any], what: str) -> None:
    """``runs``: ``[(n, dims, [(optimizer, kwargs, case), ...]), ...]``; ``what``: values, state or traffic.

    ``solution``: the solution cells' placeholders (none: run ``source`` itself); ``source``: their
    ``solution_parts``, read by :func:`static_findings`.  The runs are made once and kept for the
    other cells (same solution, same runs)."""
    findings = static_findings(source) if what == "state" else []
    for run in _RUNS.each(source, runs, lambda group: _run(solution, source, *group)):
        if what == "values":
            _values(run)
        elif what == "traffic":
            _traffic(run)
        else:
            _state(run, findings)


def static_findings(parts: Sequence[tuple[str, str]]) -> list[str]:
    """What the solution cell's source uses that the exercise does not need and a forged report would.

    Imports beyond ``torch`` and ``math`` (and ``torch.distributed.optim``), ``ZeroRedundancyOptimizer``,
    private attributes (``self._name`` is allowed, and ``__init__``), ``getattr`` and friends.
    """
    cells, found = parse_cells(parts)
    why = "uses torch's ZeroRedundancyOptimizer (write the sharding yourself)"
    for cell in cells:
        refuse_hiding(cell, ALLOWED_IMPORTS, "torch, torch.distributed and math",
                      refused={"ZeroRedundancyOptimizer": why,
                               "torch.distributed.optim": "imports torch.distributed.optim (the exercise needs "
                                                          "only torch, torch.distributed and math)"})
    return found
