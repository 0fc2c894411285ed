"""The checker's side of the ``ddp_buckets`` exercise: the bucket rule, the reference training, the verdicts.

The student's ``BucketedDDP`` runs on 2 or 3 ranks, each a host joined to the
others only by the relay, opened with collectives
(:class:`~autograder.trusted.Ranks`, ``collectives=True``).  The public probe
:func:`dlperf.grading.probes.ddp_buckets.train` drives it: every rank builds the
model from its own seed (so that only rank 0's values reach training, through
the wrapper's broadcast), then per step forward, ``backward()``,
``finish_gradient_synchronization()`` and an SGD step.  Everything expected is
computed here:

* values: rank 0's model and every rank's batches (the probe's public
  ``build``/``batch``) trained in this process, the gradients summed in rank
  order as the relay sums them, then divided by the number of ranks;
* buckets (:func:`buckets`): the parameters from the last to the first, a
  bucket closed once it holds at least the cap's bytes; from them the
  all-reduces each step must show in the relay's log, in order, and nothing
  else (the constructor's broadcasts come from rank 0, before the first step);
* overlap, from each rank's timeline at the relay (its collectives in the order
  it posted them, the ones it waited for, and the probe's marks: ``grad i`` when
  the backward pass has computed parameter ``i``'s gradient, ``backward`` when it
  has ended).  No clock is involved: the relay receives one rank's frames in
  the order it sent them.

What the student's process reports that this side cannot observe: the final
parameters (a forged answer can only be a correct one) and the marks, which the
probe sends from that process; the overlap is therefore graded only when a
reading of the cells (:func:`static_findings`) finds nothing that could reach
the relay's socket or the probe.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from dlperf.grading.probes import ddp_buckets as probe

from autograder.exercises.data_parallel import train_averaged
from autograder.exercises.runs import RunsOnce
from autograder.trusted import CheckFailed, Ranks, StudentRaised, seed
from autograder.trusted.reading import parse_cells, refuse_hiding

__all__ = ["ALLOWED_IMPORTS", "LR", "STEPS", "buckets", "check", "describe_step", "reference", "sizes_of",
           "static_findings", "step_events"]

ALLOWED_IMPORTS = {"torch", "math"}
TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
STEPS = 3
LR = 0.1
ELEMENT = 4          # float32


def sizes_of(dims: Sequence[int]) -> list[int]:
    """Element counts of the probe's model's parameters, in order (weight, bias per layer)."""
    return [p.numel() for p in probe.build(dims, 0).parameters()]


def buckets(nbytes: Sequence[int], cap_bytes: int) -> list[list[int]]:
    """The rule graded: parameters taken from the last to the first; each joins the open bucket, which is
    closed as soon as it holds ``cap_bytes`` bytes or more; the last bucket holds what is left."""
    out: list[list[int]] = []
    current: list[int] = []
    held = 0
    for i in reversed(range(len(nbytes))):
        current.append(i)
        held += nbytes[i]
        if held >= cap_bytes:
            out.append(current)
            current, held = [], 0
    if current:
        out.append(current)
    return out


def layout_of(dims: Sequence[int], cap_bytes: int) -> tuple[list[int], list[list[int]], list[int]]:
    """The probe's model's parameter sizes, the rule's buckets (parameter indices) and their elements, in order."""
    sizes = sizes_of(dims)
    layout = buckets([ELEMENT * s for s in sizes], cap_bytes)
    return sizes, layout, [sum(sizes[i] for i in b) for b in layout]


def bucket_sizes(dims: Sequence[int], cap_bytes: int) -> list[int]:
    """Elements of each bucket of the rule, in order (what one step's all-reduces must be)."""
    return layout_of(dims, cap_bytes)[2]


def reference(dims: Sequence[int], seed_: int, n: int, steps: int = STEPS, lr: float = LR) -> list[torch.Tensor]:
    """Rank 0's parameters after ``steps`` steps of data-parallel SGD on ``n`` ranks, computed in one process."""
    model = probe.build(dims, seed_, 0)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    return train_averaged(model, opt, lambda rank, step: probe.batch(dims, seed_, rank, step), n, steps)


def step_events(timeline: Sequence[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
    """One rank's timeline cut at the probe's ``step k`` marks: [construction, step 0, step 1, ...]."""
    segments: list[list[tuple[Any, ...]]] = [[]]
    for event in timeline:
        if event[0] == "mark" and str(event[1]).startswith("step "):
            segments.append([])
        elif not (event[0] == "mark" and event[1] == "done"):
            segments[-1].append(event)
    return segments


def describe_step(events: Sequence[tuple[Any, ...]]) -> str:
    """One step of a rank's timeline as a line: ``grad 5, grad 4, grad 3 > all_reduce(44) ... | backward``."""
    words = []
    for event in events:
        if event[0] == "mark":
            words.append(str(event[1]))
        elif event[0] == "post":
            op = {"allreduce": "all_reduce", "allgather": "all_gather"}.get(event[2], event[2])
            words.append(f"[{op} {event[3]} posted]" if event[2] != "barrier" else "[barrier posted]")
        elif event[0] == "wait":
            words.append("(waits)")
    return ", ".join(words)


def _names(dims: Sequence[int], cap: int, n: int) -> str:
    return f"{n} ranks, parameter sizes {sizes_of(dims)} (float32), bucket_cap_bytes={cap}"


def _run(solution: Any, source: Sequence[tuple[str, str]], n: int, cases: Sequence[Any]) -> list[dict[str, Any]]:
    done = []
    given = {} if solution else {"parts": source}
    with Ranks(*(solution or ()), n=n, timeout=45, collectives=True, **given) as ranks:
        for dims, cap, case_id in cases:
            seed_ = seed("ddp_buckets", n, tuple(dims), cap, case_id) % 2**31
            case = _names(dims, cap, n)
            try:
                results = ranks.probe("ddp_buckets:train", [(list(dims), seed_, STEPS, cap, LR)] * n)
            except StudentRaised as exc:
                raise CheckFailed(f"{case}: your code raised {exc.type_name}: {exc.message}") from None
            except CheckFailed as exc:
                raise CheckFailed(f"{case}: {exc}") from None
            done.append({"n": n, "dims": list(dims), "cap": cap, "seed": seed_, "case": case, "results": results,
                         "log": ranks.collective_log, "timeline": ranks.timeline})
    return done


def _values(run: dict[str, Any]) -> None:
    want = reference(run["dims"], run["seed"], run["n"])
    for r, result in enumerate(run["results"]):
        got = result.get("params") if isinstance(result, dict) else None
        if not (isinstance(got, list) and len(got) == len(want)):
            raise CheckFailed(f"{run['case']}: the probe could not read rank {r}'s parameters")
        for i, (g, w) in enumerate(zip(got, want)):
            if not (isinstance(g, torch.Tensor) and g.shape == w.shape and torch.allclose(g, w, **TOLERANCE)):
                error = float((g - w).abs().max()) if isinstance(g, torch.Tensor) and g.shape == w.shape else None
                raise CheckFailed(f"{run['case']}: after {STEPS} SGD steps rank {r}'s parameter {i} differs from "
                                  "training on one process (rank 0's initial values, every rank's batch, the "
                                  "gradients averaged)"
                                  + (f": largest difference {error:.3g} (tolerance {TOLERANCE['atol']:g} + "
                                     f"{TOLERANCE['rtol']:g} x |value|)" if error is not None else "")
                                  + ". Broadcast rank 0's parameters in the constructor, and make each .grad the "
                                    "average over the ranks (the sum divided by the world size, once) before the "
                                    "optimizer's step")


def _ops(log: Sequence[dict[str, Any]], events: Sequence[tuple[Any, ...]]) -> list[dict[str, Any]]:
    """The collectives one rank posted in ``events``, with their log entries (the log is in posting order)."""
    return [log[e[1]] for e in events if e[0] == "post" and e[1] < len(log) and e[2] != "barrier"]


def _show(ops: Sequence[dict[str, Any]]) -> str:
    names = {"allreduce": "all_reduce", "allgather": "all_gather"}
    return ", ".join(f"{names.get(c['op'], c['op'])} of {c['numel']}"
                     + (f" from rank {c['root']}" if c["op"] == "broadcast" else "") for c in ops) or "nothing"


def _buckets(run: dict[str, Any]) -> None:
    sizes, layout, want = layout_of(run["dims"], run["cap"])
    log = run["log"]
    segments = step_events(run["timeline"][0])     # every rank posts the same collectives (the relay checks it)
    if len(segments) != STEPS + 1:
        raise CheckFailed(f"{run['case']}: the probe's marks for {STEPS} steps are missing from rank 0's timeline")
    built = _ops(log, segments[0])
    if any(c["op"] != "broadcast" or c["root"] != 0 for c in built) or sum(c["numel"] for c in built) != sum(sizes):
        raise CheckFailed(f"{run['case']}: before the first step the relay saw {_show(built)}; the constructor "
                          f"broadcasts the {sum(sizes)} parameter elements from rank 0 (one broadcast per parameter, "
                          "or flattened) and nothing else")
    for k, events in enumerate(segments[1:]):
        ops = _ops(log, events)
        got = [c["numel"] for c in ops if c["op"] == "allreduce"]
        others = [c for c in ops if c["op"] != "allreduce"]
        if others:
            raise CheckFailed(f"{run['case']}: step {k}: the relay saw {_show(others)} besides the all-reduces; a "
                              "step all-reduces the gradient buckets and nothing else")
        if got != want:
            raise CheckFailed(f"{run['case']}: step {k}: the relay saw all-reduces of {got} elements, in this order; "
                              f"the buckets of the rule are {layout} (parameter indices, the last parameter first), "
                              f"{want} elements: one all-reduce per bucket, bucket 0 first")


def _overlap(run: dict[str, Any], findings: Sequence[str]) -> None:
    if findings:
        raise CheckFailed("the order of events is reported by the probe in your process, so the overlap is graded only "
                          "when the reading of your cells finds nothing to object to: " + "; ".join(findings[:3]))
    _, layout, want = layout_of(run["dims"], run["cap"])
    for r, timeline in enumerate(run["timeline"]):
        segments = step_events(timeline)
        if len(segments) != STEPS + 1:
            raise CheckFailed(f"{run['case']}: the probe's marks for {STEPS} steps are missing from rank {r}'s "
                              "timeline")
        for k, events in enumerate(segments[1:]):
            _overlap_step(run, r, k, events, layout, want)


def _overlap_step(run: dict[str, Any], r: int, k: int, events: Sequence[tuple[Any, ...]],
                  layout: Sequence[Sequence[int]], want: Sequence[int]) -> None:
    where = f"{run['case']}: rank {r}, step {k}"
    line = f"\nRank {r}'s step {k}, in the order the relay saw it: {describe_step(events)}"
    marks = [e[1] for e in events if e[0] == "mark"]
    grads = sorted(f"grad {i}" for members in layout for i in members)
    if (marks.count("backward") != 1 or sorted(marks[:len(grads)]) != grads
            or marks[len(grads):] not in (["backward"], ["backward", "synchronized"])):
        # the probe sends each parameter's mark once, during backward(), then "backward" and "synchronized":
        # anything else was not sent by the probe alone
        raise CheckFailed(f"{where}: the marks in the rank's timeline are not the probe's (one per parameter's "
                          f"gradient during backward(), then the end of backward()): {marks}")
    end = events.index(("mark", "backward"))
    ready = {int(e[1].split()[1]): pos for pos, e in enumerate(events) if e[0] == "mark" and e[1].startswith("grad ")}
    posts = [(pos, e) for pos, e in enumerate(events) if e[0] == "post" and e[2] == "allreduce"]
    if not posts:
        raise CheckFailed(f"{where}: the rank posted no all-reduce in this step: nothing to overlap" + line)
    mine = {e[1] for _, e in posts}
    early = [pos for pos, e in enumerate(events[:end]) if e[0] == "wait" and e[1] in mine]
    if early:
        raise CheckFailed(f"{where}: the rank waited for an all-reduce before the backward pass had ended: the "
                          "backward pass stopped until the other ranks had sent their gradients. Launch each "
                          "all-reduce with async_op=True and wait for the handles in finish_gradient_synchronization()"
                          + line)
    last_grad = max(ready.values())
    if len(layout) > 1 and posts[0][0] > last_grad:
        raise CheckFailed(f"{where}: the first all-reduce was posted after the backward pass had computed every "
                          "gradient: no communication overlapped the backward pass. Launch a bucket from the hook "
                          "that completes it" + line)
    if [e[3] for _, e in posts] != list(want):
        return     # other buckets than the rule's: graded in the buckets cell; the overlap is what is checked above
    grad_positions = sorted(ready.values())
    complete = -1
    for b, ((pos, _), members) in enumerate(zip(posts, layout)):
        complete = max(complete, *(ready[i] for i in members))
        following = [p for p in grad_positions if p > complete]
        deadline = following[0] if following else end
        if not complete < pos < deadline:
            when = "before" if pos < complete else "after"
            raise CheckFailed(f"{where}: bucket {b} (parameters {list(members)}) was posted {when} the moment it "
                              "became ready: a bucket is launched from the hook of the gradient that completes it "
                              "(and of the buckets before it), before the backward pass computes the next gradient"
                              + line)


_RUNS = RunsOnce()


def check(*solution: Any, source: Sequence[tuple[str, str]], runs: Sequence[Any], what: str) -> None:
    """``runs``: ``[(n, [(dims, bucket_cap_bytes, case), ...]), ...]``; ``what``: values, buckets or overlap.

    ``solution``: the solution cells' placeholders (none: run ``source`` itself); ``source``: their
    ``solution_parts``, read by :func:`static_findings`."""
    findings = static_findings(source) if what == "overlap" else []
    for run in _RUNS.each(source, runs, lambda group: _run(solution, source, *group)):
        if what == "values":
            _values(run)
        elif what == "buckets":
            _buckets(run)
        else:
            _overlap(run, findings)


def static_findings(parts: Sequence[tuple[str, str]]) -> list[str]:
    """What the solution cells' source uses that the exercise does not need and a forged timeline would:
    imports beyond ``torch`` and ``math`` (torch's ``_flatten_dense_tensors`` and
    ``_unflatten_dense_tensors`` are allowed), private attributes, ``getattr`` and friends, and torch's
    own ``DistributedDataParallel`` or communication hooks."""
    cells, found = parse_cells(parts)
    own = "uses torch's DistributedDataParallel (write the bucketing yourself)"
    for cell in cells:
        refuse_hiding(cell, ALLOWED_IMPORTS, "torch, torch.distributed and math",
                      refused={"DistributedDataParallel": own, "torch.nn.parallel": own,
                               "register_comm_hook": "uses DDP's communication hooks (write the bucketing yourself)"},
                      allowed_private=frozenset({"torch._utils", "_utils", "_flatten_dense_tensors",
                                                 "_unflatten_dense_tensors"}))
    return found
