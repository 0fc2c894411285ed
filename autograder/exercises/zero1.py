"""The checker's side of the ``zero1`` exercise: the partition, the reference training, the verdicts.

The student's ``ShardedOptimizer`` runs on 2 or 3 ranks, each a host joined to
the others only by the relay, opened with collectives
(:class:`~autograder.trusted.Ranks`, ``collectives=True``).  The public probe
(:mod:`dlperf.grading.probes.zero1`) drives it one call at a time: ``start``
(the model and the optimizer), ``step`` three times (``zero_grad`` -- every
second step ``zero_grad(set_to_none=False)`` --, forward, backward, one
``all_reduce`` of the flattened gradients, then ``/ n``, the student's
``step``), ``finish``.  Everything expected is computed here:

* values: the same model and batches (the probe's public ``build``/``batch``,
  same seed) trained unsharded with ``torch.optim`` in this process, the
  gradients summed in rank order as the relay sums them; and what each
  ``zero_grad`` left (``None``; zeros with ``set_to_none=False``);
* the partition (:func:`partition`), also tested directly: the student's
  ``partition`` on many seeded cases (:func:`partition_cases`: random sizes,
  totals not divisible by the number of ranks, ranks that own nothing);
* memory, **measured outside the student's process**: on the wide runs (a model
  of tens of MB), between two calls, while the rank is idle with its optimizer
  alive, this process reads each rank's resident memory from the kernel
  (``VmRSS`` in ``/proc/<pid>/status``, summed over the rank's processes).  A
  calibration rank in the same kind of host (an empty module; the probe's
  stand-in keeps the model and its gradients, and steps ``torch.optim`` over the
  last parameter only), plus the bytes of ``torch.optim``'s state for the rank's
  own shard instead of that parameter's (computed here),
  says what a ZeRO-1 rank holds; a rank may hold at most :data:`SLACK` more,
  and may grow from the first step to the last at most :data:`GROWTH` more
  than the calibration rank.  A full optimizer however it is hidden, moments
  kept by hand outside any optimizer, copies of the parameters and a list that
  grows every step are all memory;
* traffic: the relay's log of every collective, in order.  The probe's
  gradient all-reduces (one per step, of every parameter's elements) mark the
  steps; between two of them the relay must see exactly one broadcast per
  parameter, rooted at its owner, and nothing else but barriers; no
  point-to-point message.

What the student's process reports that this side cannot observe: the final
parameters (compared with the reference: a forged answer can only be a correct
one), which parameters the optimizers alive in it hold and the bytes of their
state (a census the probe takes there).  The census is graded only when the
reading of the cells (:data:`dlperf.grading.probes.zero1.RULES`, an allow-list,
the same in the self-check) refuses nothing, and beside it stand the memory
measured from outside and the relay's count of the bytes each rank broadcast
as a root (its own shard's, every step).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
from dlperf.grading.probes import zero1 as probe
from dlperf.grading.reading import read

from autograder.exercises.data_parallel import train_averaged
from autograder.exercises import self_check_case
from autograder.exercises.runs import RunsOnce
from autograder.trusted import CheckFailed, Ranks, StudentRaised, seed

__all__ = ["GROWTH", "SELF_CHECK_RUNS", "SLACK", "WIDE", "case", "check", "expected_state_bytes", "partition",
           "partition_cases", "reference", "resident", "sizes_of"]

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
STEPS = 3
MIB = 1 << 20
WIDE = 4 * MIB            # parameter bytes from which a run's memory is measured (and compared)
# Resident memory moves in 2 MiB steps where malloc's heap is in transparent huge pages (the sandbox asks for
# them: autograder.sandbox), so a rank and the calibration rank may differ by a page or two with nothing kept:
# the reference once grew 2.3 MiB more than its calibration rank, under a 2 MiB bound.  Three pages each; the
# smallest violation of the fixtures is a whole copy of the wide model's gradients, 12 MiB a step.
SLACK = 6 * MIB           # a rank may hold this much more than the calibration rank
GROWTH = 6 * MIB          # ... and grow this much more than it from the first step to the last
PARTITION_CASES = 300
CALIBRATION_OWNS = [-1]   # the calibration rank's optimizer holds the last parameter (a bias) only

# What the self-check runs (the hidden cells run other seeds and more): a small model for the values, a
# wide one for the memory.
SELF_CHECK_RUNS = [(2, [([5, 7, 3], "sgd", {"lr": 0.1, "momentum": 0.9}, 1), ([5, 7, 3], "adam", {"lr": 0.01}, 2),
                        ([512, 2048, 1024], "adam", {"lr": 0.01}, 3)])]


def sizes_of(dims: Sequence[int]) -> list[int]:
    """Element counts of the probe's model's parameters, in order (weight, bias per layer)."""
    sizes = []
    for a, b in zip(dims[:-1], dims[1:]):
        sizes += [a * b, b]
    return sizes


def partition(sizes: Sequence[int], n: int) -> list[int]:
    """The owner of each parameter: ``n * start // total``, ``start`` = elements of the parameters before it."""
    total, start, owners = sum(sizes), 0, []
    for size in sizes:
        owners.append(n * start // total)
        start += size
    return owners


def partition_cases(seed_: int, count: int = PARTITION_CASES) -> list[tuple[list[int], int]]:
    """Cases for the student's ``partition``: the spec's examples, edge cases, equal sizes (shares that end
    exactly at a parameter), then ``count`` random ones (1 to 40 parameters of 1 to 10^9 elements, 1 to 9
    ranks; totals rarely divisible by the ranks)."""
    cases: list[tuple[list[int], int]] = [
        ([35, 7, 21, 3], 2), ([35, 7, 21, 3], 3), ([8, 1], 3), ([21, 7, 14, 2], 3), ([5], 4), ([1] * 6, 4),
        ([1], 1), ([7, 7], 1), ([1, 1], 5), ([2, 1], 3), ([3, 3, 3], 3), ([4, 4, 4, 4], 2), ([1] * 10, 3),
        ([10 ** 9, 1, 10 ** 9], 4), ([1, 10 ** 8, 1, 1], 3), ([6, 1, 1, 1, 1, 1, 1], 4), ([5, 4, 3, 2, 1], 5),
        ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 7), ([100, 1, 1, 100], 8), ([33, 33, 34], 3), ([5, 5], 6),
    ]
    # equal sizes: shares that end exactly on a parameter's first element (float shares round there)
    cases += [([size] * count, n) for count in (6, 10, 12, 21) for n in (2, 3, 4, 5, 6, 7, 8, 9)
              for size in (1, 3)]
    rng = random.Random(seed_)
    for _ in range(count):
        length = rng.choice([1, 2, 3, rng.randint(1, 12), rng.randint(1, 40)])
        scale = rng.choice([10, 1000, 10 ** 6, 10 ** 9])
        sizes = [rng.randint(1, scale) if rng.random() < 0.8 else rng.randint(1, 4) for _ in range(length)]
        cases.append((sizes, rng.randint(1, 9)))
    return cases


def reference(dims: Sequence[int], seed_: int, n: int, steps: int, optimizer: str, kwargs: dict[str, Any]
              ) -> list[torch.Tensor]:
    """The parameters after ``steps`` steps of unsharded training with ``torch.optim`` (this process)."""
    model = probe.build(dims, seed_)
    opt = probe.OPTIMIZERS[optimizer](model.parameters(), **kwargs)
    return train_averaged(model, opt, lambda rank, step: probe.batch(dims, seed_, rank, step), n, steps)


def expected_state_bytes(dims: Sequence[int], owned: Sequence[int], optimizer: str, kwargs: dict[str, Any]) -> int:
    """Bytes of the state ``torch.optim`` keeps for the parameters ``owned`` after a step (0 if none)."""
    sizes = sizes_of(dims)
    mine = [sizes[i] for i in set(owned)]
    if not mine:
        return 0
    params = [torch.zeros(1, requires_grad=True) for _ in mine]
    opt = probe.OPTIMIZERS[optimizer](params, **kwargs)
    for p in params:
        p.grad = torch.ones_like(p)
    opt.step()
    per_element = 0   # the state's tensors the size of the parameter, and the scalars (Adam's step)
    scalars = 0
    for entry in opt.state.values():
        for value in entry.values():
            if isinstance(value, torch.Tensor):
                if value.dim():
                    per_element += value.element_size()
                else:
                    scalars += value.element_size()
        break
    return per_element * sum(mine) + scalars * len(mine)


def resident(process: Any) -> int:
    """Bytes resident in memory of a host and every process below it, as the kernel counts them (``VmRSS``)."""
    total = 0
    for pid in process.descendants():
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            continue
    return total


def _names(optimizer: str, kwargs: dict[str, Any]) -> str:
    args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
    return f"{probe.OPTIMIZERS[optimizer].__name__}({args})"


def _measured(dims: Sequence[int]) -> bool:
    return 4 * sum(sizes_of(dims)) >= WIDE


def _drive(ranks: Ranks, n: int, args: tuple[Any, ...], case: str, measure: bool) -> dict[str, Any]:
    """``measure``: start, STEPS x step, finish on every rank, and the ranks' resident memory after each step
    (read here, while the ranks wait for the next call); else train (the same in one call).  The relay's
    log and traffic of all the calls, the ranks' results."""
    log: list[dict[str, Any]] = []
    p2p = [0] * n
    processes = [s.process for s in ranks.students]

    def call(name: str, per_rank: Sequence[Any]) -> list[Any]:
        try:
            out = ranks.probe(name, [tuple(a) for a in per_rank])
        except StudentRaised as exc:
            raise CheckFailed(f"{case}: your code raised {exc.type_name}: {exc.message}") from None
        except CheckFailed as exc:
            raise CheckFailed(f"{case}: {exc}") from None
        log.extend(ranks.collective_log)
        for r, t in enumerate(ranks.traffic):
            p2p[r] += int(t.get("messages_sent", 0))
        return out

    memory = []
    if measure:
        call("zero1:start", [args[r] for r in range(n)])
        for _ in range(STEPS):
            call("zero1:step", [()] * n)
            memory.append([resident(p) for p in processes])
        results = call("zero1:finish", [()] * n)
    else:
        results = call("zero1:train", [(*args[r][:2], STEPS, *args[r][2:]) for r in range(n)])
    return {"results": results, "log": log, "p2p": p2p, "memory": memory}


def _run(solution: Any, source: Sequence[tuple[str, str]], n: int, cases: Sequence[Any]) -> list[dict[str, Any]]:
    """One process group of ``n`` ranks running the student's cells: each case ``(dims, optimizer, kwargs,
    case id)`` in turn (the wide ones first), the partition's direct cases; then, if a case was wide, the
    calibration."""
    done = []
    given = {} if solution else {"parts": source}
    # The wide cases first: their ranks' memory is read when the hosts have done nothing else yet, as the
    # calibration host has not.
    cases = sorted(cases, key=lambda c: not _measured(c[0]))
    with Ranks(*(solution or ()), n=n, timeout=60, collectives=True, **given) as ranks:
        for dims, optimizer, kwargs, case_id in cases:
            seed_ = seed("zero1", n, tuple(dims), case_id) % 2**31
            case = f"{n} ranks, parameter sizes {_sizes(sizes_of(dims))}, {_names(optimizer, kwargs)}"
            args = (list(dims), seed_, optimizer, dict(kwargs))
            run = _drive(ranks, n, tuple(args for _ in range(n)), case, _measured(dims))
            done.append({"n": n, "dims": list(dims), "seed": seed_, "optimizer": optimizer, "kwargs": dict(kwargs),
                         "case": case, **run})
        tried = partition_cases(seed("zero1", "partition", n) % 2**31)
        try:
            got = ranks[0].probe("zero1:partitions", tried, _timeout=30)
        except StudentRaised as exc:
            raise CheckFailed(f"partition: your code raised {exc.type_name}: {exc.message}") from None
        for run in done:
            run["partitions"] = (tried, got)
    if any(run["memory"] for run in done):
        # The calibration: the same probe in the same kind of host with no student code (an empty module), a
        # process group of one rank whose steps skip the all-reduce: the model, its gradients, torch.optim over
        # the last parameter only (the probe's stand-in; the first step imports what torch.optim needs); a rank
        # holds that plus the state of its own shard instead of the last parameter's, computed here.
        with Ranks(n=1, timeout=60, collectives=True, parts=[("<calibration>", "")]) as ranks:
            host = ranks[0]
            for run in done:
                if run["memory"]:
                    host.probe("zero1:start", run["dims"], run["seed"], run["optimizer"], run["kwargs"],
                               CALIBRATION_OWNS, True, True)
                    run["calibration"] = []
                    for _ in range(STEPS):
                        host.probe("zero1:step")
                        run["calibration"].append(resident(host.process))
                    host.probe("zero1:finish")
    return done


def _sizes(sizes: Sequence[int]) -> str:
    return str(list(sizes)) if len(sizes) <= 8 else f"[{', '.join(map(str, sizes[:6]))}, ...] ({len(sizes)})"


# ---------------------------------------------------------------------------------------------
# The verdicts
# ---------------------------------------------------------------------------------------------


def _values(run: dict[str, Any]) -> None:
    _zero_grad(run)
    if run["memory"]:
        return      # the wide runs are for the memory: their values differ from one process's by rounding
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


def _zero_grad(run: dict[str, Any]) -> None:
    for r, result in enumerate(run["results"]):
        steps = result.get("zero_grad") if isinstance(result, dict) else None
        if not (isinstance(steps, list) and len(steps) == STEPS and all(isinstance(s, dict) for s in steps)):
            raise CheckFailed(f"{run['case']}: the probe could not read what zero_grad did on rank {r}")
        for k, seen in enumerate(steps):
            if not seen.get("had_grads"):
                continue    # the first step, or a step() that freed the gradients: nothing to clear
            after = seen.get("after")
            if seen.get("set_to_none") and after != "none":
                raise CheckFailed(f"{run['case']}: step {k + 1}: after zero_grad() the gradients on rank {r} are "
                                  f"{_said(after)}; zero_grad(set_to_none=True) sets every parameter's .grad to None")
            if not seen.get("set_to_none") and after != "zero":
                raise CheckFailed(f"{run['case']}: step {k + 1}: after zero_grad(set_to_none=False) the gradients "
                                  f"on rank {r} are {_said(after)}; with set_to_none=False every parameter's "
                                  "gradient stays a tensor, filled with zeros")


def _said(after: Any) -> str:
    return {"none": "None", "zero": "tensors of zeros", "not zero": "tensors, not all zero",
            "some none": "None for some parameters and tensors for others"}.get(after, repr(after)[:40])


def _partition(run: dict[str, Any]) -> None:
    tried, got = run["partitions"]
    if not (isinstance(got, list) and len(got) == len(tried)):
        raise CheckFailed("partition: the probe could not read your partition's results")
    for (sizes, n), owners in zip(tried, got):
        want = partition(sizes, n)
        if owners != want:
            raise CheckFailed(f"partition({_sizes(sizes)}, {n}) returned {str(owners)[:120]}; the rule "
                              f"n * start // total gives {str(want)[:120]} (tested directly on {len(tried)} cases: "
                              "random sizes, totals not divisible by the number of ranks, ranks that own nothing)")


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
    _partition(run)
    sizes = sizes_of(run["dims"])
    owners = partition(sizes, run["n"])
    want = Counter(zip(sizes, owners))
    if any(run["p2p"]):
        raise CheckFailed(f"{run['case']}: the relay carried point-to-point messages from ranks "
                          f"{[r for r, m in enumerate(run['p2p']) if m]}; ZeRO-1 needs one broadcast per parameter "
                          "and nothing else")
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


def _mib(nbytes: float) -> str:
    return f"{nbytes / MIB:.1f} MiB"


def _memory(run: dict[str, Any]) -> None:
    """The ranks' resident memory, read from outside their processes, against the calibration rank's."""
    if not run["memory"]:
        return
    sizes = sizes_of(run["dims"])
    owners = partition(sizes, run["n"])
    full = expected_state_bytes(run["dims"], range(len(sizes)), run["optimizer"], run["kwargs"])
    calibration = run["calibration"]
    calibrated = expected_state_bytes(run["dims"], [len(sizes) - 1], run["optimizer"], run["kwargs"])
    for r in range(run["n"]):
        mine = [i for i, o in enumerate(owners) if o == r]
        shard = expected_state_bytes(run["dims"], mine, run["optimizer"], run["kwargs"])
        held, base = max(step[r] for step in run["memory"]), max(calibration) + shard - calibrated
        if min(min(step[r] for step in run["memory"]), min(calibration)) <= 0:
            # fail closed, and not as the student's fault: /proc could not be read here
            raise RuntimeError(f"{run['case']}: the grader could not read rank {r}'s resident memory")
        if held > base + SLACK:
            raise CheckFailed(
                f"{run['case']}: between steps rank {r} holds {_mib(held - base)} more memory than a ZeRO-1 rank "
                f"(measured by the grader outside your process: the rank's resident memory, against a calibration "
                f"rank that keeps the same model and its gradients, plus torch.optim's state for rank {r}'s shard, "
                f"{_mib(shard)}; a full optimizer's state is {_mib(full)}). At most {_mib(SLACK)} more is allowed: "
                "keep optimizer state, and copies of parameters or gradients, for the owned parameters only")
        grown = (run["memory"][-1][r] - run["memory"][0][r]) - (calibration[-1] - calibration[0])
        if grown > GROWTH:
            raise CheckFailed(f"{run['case']}: rank {r}'s resident memory grew by {_mib(grown)} more than a ZeRO-1 "
                              f"rank's from step 1 to step {STEPS} (measured by the grader outside your process): "
                              "keep nothing that accumulates from step to step")


def _state(run: dict[str, Any], findings: Sequence[str]) -> None:
    _partition(run)
    _memory(run)
    sizes = sizes_of(run["dims"])
    owners = partition(sizes, run["n"])
    for r in range(run["n"]):
        rooted = sum(c["contributed"][r] for c in run["log"] if c["op"] == "broadcast")
        shard = 4 * sum(s for s, o in zip(sizes, owners) if o == r)
        if rooted != STEPS * shard:
            raise CheckFailed(f"{run['case']}: in {STEPS} steps rank {r} broadcast {rooted} bytes as a root (counted by "
                              f"the relay), but its shard holds {shard} bytes of parameters, {STEPS * shard} in "
                              f"{STEPS} steps: each rank updates and broadcasts its own shard, so what the relay sees "
                              "must match the state it keeps")
    if findings:
        raise CheckFailed("which optimizers hold which parameters is counted in your process, so it is graded only "
                          "when the reading of your cells refuses nothing: " + "; ".join(findings[:3]))
    for r, result in enumerate(run["results"]):
        mine = [i for i, o in enumerate(owners) if o == r]
        if isinstance(result, dict) and result.get("cuda"):
            raise CheckFailed(f"{run['case']}: rank {r} started CUDA; the exercise runs on the CPU, where the "
                              "grader measures each rank's memory: keep every tensor on the parameters' device")
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


_RUNS = RunsOnce()


def check(*solution: Any, source: Sequence[tuple[str, str]], runs: Sequence[Any], what: str) -> None:
    """``runs``: ``[(n, [(dims, optimizer, kwargs, case), ...]), ...]``, one process group of ``n`` ranks
    each; ``what``: values, state or traffic.

    ``solution``: the solution cells' placeholders (none: run ``source`` itself); ``source``: their
    ``solution_parts``, read with :data:`dlperf.grading.probes.zero1.RULES`.  The runs are made once and
    kept for the other cells (same solution, same runs)."""
    findings = read(source, probe.RULES) if what == "state" else []
    for run in _RUNS.each(source, runs, lambda group: _run(solution, source, *group)):
        if what == "values":
            _values(run)
        elif what == "traffic":
            _traffic(run)
        else:
            _state(run, findings)


def case(*solution: Any, runs: Sequence[Any] = SELF_CHECK_RUNS, what: str) -> Callable[[], tuple[Any, Any, bool]]:
    """A self-check case: :func:`check` on ``runs`` (:func:`autograder.exercises.self_check_case`)."""
    return self_check_case(check, solution, runs, what)

