"""The checker's side of the ``ddp_buckets`` exercise: the bucket rule, the reference training, the verdicts.

The student's ``BucketedDDP`` runs on 2 or 3 ranks, each a host joined to the
others only by the relay, opened with collectives
(:class:`~autograder.trusted.Ranks`, ``collectives=True``).  This side drives
the run call by call through the public probe
(:mod:`dlperf.grading.probes.ddp_buckets`): ``setup`` (every rank builds the model
from its own seed, so that only rank 0's values reach training through the
wrapper's broadcast, and wraps it), then one ``step`` call per training step
(forward, ``backward()``, ``finish_gradient_synchronization()``, an SGD step), then
``result``.  The relay starts each call afresh, so each call's collectives and
timeline are one step's, cut here.  Everything expected is computed here:

* values (:func:`reference`): rank 0's model and every rank's batches trained in
  this process, the gradients summed in rank order as the relay sums them, then
  divided by the number of ranks (a parameter no rank used keeps its value);
* buckets (:func:`buckets`): the parameters from the last to the first, a bucket
  closed once it holds at least the cap's bytes; from them the all-reduces each
  step must show in the relay's log, in order, and nothing else (the
  constructor's broadcasts come from rank 0, in ``setup``); the student's
  ``assign_buckets`` is also compared with :func:`buckets` on random cases;
* overlap, from each rank's timeline at the relay: its collectives in the order
  it posted them, the ones it waited for or polled (a collective's result reaches
  a rank only when it asks for it, so no rank can block on one unseen), and the
  probe's marks (``grad i`` when the backward pass has computed parameter ``i``'s
  gradient, ``backward`` when it has ended, ``synchronized``), each carrying a key
  drawn here for that rank and that step and handed to the probe alone: a mark
  without it was not sent by the probe.  No clock is involved.

What the student's process reports that this side cannot observe: the final
parameters (a forged answer can only be a correct one), the count of objects
alive after each step (from ``gc``, which the cells cannot import), and the
marks, sent by the probe from that process: their key lives only in the probe's
closures, and the overlap is graded only when the allow-list reading of the
cells (:data:`dlperf.grading.probes.ddp_buckets.RULES`, the self-check's too)
refuses nothing, so that no name, private attribute or introspection reaches it.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from dlperf.grading.probes import ddp_buckets as probe
from dlperf.grading.reading import read

from autograder.exercises.runs import RunsOnce, relayed
from autograder.trusted import CheckFailed, Ranks, StudentRaised, seed

__all__ = ["LR", "RULE_CASES", "STEPS", "bucket_sizes", "buckets", "case", "check", "describe_step", "layout_of",
           "overlap", "reference", "rule_cases", "rule_verdict", "sizes_of", "train", "values", "verdict_buckets"]

TOLERANCE = {"rtol": 1e-5, "atol": 1e-6}
STEPS = 3
LR = 0.1
RULE_CASES = 150          # random cases of the bucket rule per group of runs


def sizes_of(model: str, dims: Sequence[int]) -> list[int]:
    """Element counts of the probe's model's parameters, in ``parameters()`` order."""
    return [p.numel() for p in probe.build(model, dims, 0).parameters()]


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


def layout_of(model: str, dims: Sequence[int], cap_bytes: int) -> tuple[list[int], list[list[int]], list[int]]:
    """The model's parameter sizes, the rule's buckets (parameter indices) and their elements, in order."""
    sizes = sizes_of(model, dims)
    layout = buckets([4 * s for s in sizes], cap_bytes)       # float32
    return sizes, layout, [sum(sizes[i] for i in b) for b in layout]


def bucket_sizes(model: str, dims: Sequence[int], cap_bytes: int) -> list[int]:
    """Elements of each bucket of the rule, in order (what one step's all-reduces must be)."""
    return layout_of(model, dims, cap_bytes)[2]


def reference(model: str, dims: Sequence[int], seed_: int, n: int, steps: int = STEPS, lr: float = LR
              ) -> list[torch.Tensor]:
    """Rank 0's parameters after ``steps`` steps of data-parallel SGD on ``n`` ranks, computed in one process:
    per step every rank's gradient (zeros for a parameter the model did not use), summed in rank order,
    divided by ``n``."""
    net = probe.build(model, dims, seed_, 0)
    params = list(net.parameters())
    opt = torch.optim.SGD(params, lr=lr)
    for step in range(steps):
        total = None
        for rank in range(n):
            net.zero_grad(set_to_none=True)
            x, y = probe.batch(dims, seed_, rank, step)
            F.mse_loss(net(x), y).backward()
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
            total = flat if total is None else total + flat
        assert total is not None
        total /= n
        with torch.no_grad():
            for p, g in zip(params, total.split([p.numel() for p in params])):
                p.grad = g.view_as(p).clone()
        opt.step()
    return [p.detach().clone() for p in params]


# -- the bucket rule on random cases ------------------------------------------------------------------------------

def rule_cases(seed_: int, count: int = RULE_CASES) -> list[tuple[list[int], int]]:
    """``(nbytes, cap_bytes)`` cases: sizes not multiples of one another, caps of one byte, under a parameter,
    equal to a sum of the last parameters (a bucket closed exactly at the cap), between, above the total."""
    rng = random.Random(seed_)
    cases: list[tuple[list[int], int]] = [([], 10), ([8], 4), ([8], 8), ([8], 9)]
    while len(cases) < count:
        nbytes = [rng.choice([2, 4, 8]) * rng.randint(1, 60) for _ in range(rng.randint(1, 9))]
        kind = rng.randrange(6)
        if kind == 0:
            cap = 1
        elif kind == 1:                        # smaller than some parameter
            cap = rng.randint(1, max(nbytes))
        elif kind == 2:                        # exactly the sum of the last j parameters
            j = rng.randint(1, len(nbytes))
            cap = sum(nbytes[-j:])
        elif kind == 3:
            cap = sum(nbytes) + rng.randint(0, 50)
        else:
            cap = rng.randint(1, sum(nbytes) + 1)
        cases.append((nbytes, cap))
    return cases


def _as_buckets(value: Any) -> list[list[int]] | None:
    if not isinstance(value, (list, tuple)):
        return None
    out = []
    for b in value:
        if not isinstance(b, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in b):
            return None
        out.append(list(b))
    return out


# -- one run: the checker drives the probe step by step --------------------------------------------------------

def _names(model: str, dims: Sequence[int], cap: int, n: int) -> str:
    return f"{n} ranks, {model} model, parameter sizes {sizes_of(model, dims)} (float32), bucket_cap_bytes={cap}"


def train(ranks: Ranks, model: str, dims: Sequence[int], cap: int, seed_: int) -> dict[str, Any]:
    """One run on ``ranks`` (opened with collectives): ``setup``, :data:`STEPS` steps, ``result``; each step's
    relay log and timelines kept apart, with the keys drawn for its marks."""
    n = ranks.n
    case = _names(model, dims, cap, n)
    run: dict[str, Any] = {"n": n, "model": model, "dims": list(dims), "cap": cap, "seed": seed_, "case": case,
                           "steps": []}
    try:
        ranks.probe("ddp_buckets:setup", [(model, list(dims), seed_, cap, LR)] * n)
        run["built"] = {"log": ranks.collective_log, "timeline": ranks.timeline}
        for k in range(STEPS):
            keys = [secrets.token_hex(8) for _ in range(n)]
            census = ranks.probe("ddp_buckets:step", [(k, key) for key in keys])
            run["steps"].append({"log": ranks.collective_log, "timeline": ranks.timeline, "keys": keys,
                                 "census": census})
        run["params"] = [r.get("params") if isinstance(r, dict) else None
                         for r in ranks.probe("ddp_buckets:result", [()] * n)]
    except StudentRaised as exc:
        raise CheckFailed(f"{case}: your code raised {exc.type_name}: {exc.message}") from None
    except CheckFailed as exc:
        raise CheckFailed(f"{case}: {exc}") from None
    return run


def _rule(ranks: Ranks, seed_: int) -> list[tuple[list[int], int, Any]]:
    out = []
    for nbytes, cap in rule_cases(seed_):
        try:
            got = ranks[0].call("assign_buckets", list(nbytes), cap)
        except StudentRaised as exc:
            got = f"raised {exc.type_name}: {exc.message}"
        out.append((nbytes, cap, got))
    return out


def _group(solution: Any, source: Sequence[tuple[str, str]], n: int, cases: Sequence[Any]) -> list[dict[str, Any]]:
    done = []
    with relayed(solution, source, n, timeout=45) as ranks:
        rule = _rule(ranks, seed("ddp_buckets", "rule", n) % 2**31)
        for model, dims, cap, case_id in cases:
            seed_ = seed("ddp_buckets", n, model, tuple(dims), cap, case_id) % 2**31
            run = train(ranks, model, dims, cap, seed_)
            run["rule"] = rule
            done.append(run)
    return done


# -- the verdicts (the notebook's self-check calls the same functions) -------------------------------------------

def values(run: dict[str, Any]) -> None:
    """Every rank's parameters equal the one-process training's."""
    want = reference(run["model"], run["dims"], run["seed"], run["n"])
    for r, got in enumerate(run["params"]):
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
                                  + ". Broadcast rank 0's parameters in the constructor, wait for every handle, "
                                    "and make each .grad the average over the ranks (the sum divided by the world "
                                    "size, once) before the optimizer's step")


def _show(ops: Sequence[dict[str, Any]]) -> str:
    names = {"allreduce": "all_reduce", "allgather": "all_gather"}
    return ", ".join(f"{names.get(c['op'], c['op'])} of {c['numel']}"
                     + (f" from rank {c['root']}" if c["op"] == "broadcast" else "") for c in ops) or "nothing"


def rule_verdict(rule: Sequence[tuple[list[int], int, Any]]) -> None:
    wrong = [(nbytes, cap, got) for nbytes, cap, got in rule if _as_buckets(got) != buckets(nbytes, cap)]
    if wrong:
        nbytes, cap, got = wrong[0]
        raise CheckFailed(f"assign_buckets({nbytes}, {cap}) returned {str(got)[:200]}; the rule gives "
                          f"{buckets(nbytes, cap)} (last parameter first, a bucket closed once it holds >= cap_bytes, "
                          f"the rest in a last bucket): {len(wrong)} of {len(rule)} random cases differ")


def verdict_buckets(run: dict[str, Any]) -> None:
    """The rule on random cases; the constructor's broadcasts from rank 0; per step one all-reduce per bucket
    of the rule, in order, and nothing else; nothing alive grows from step to step."""
    rule_verdict(run.get("rule", []))
    sizes, layout, want = layout_of(run["model"], run["dims"], run["cap"])
    built = [c for c in run["built"]["log"] if c["op"] != "barrier"]
    if any(c["op"] != "broadcast" or c["root"] != 0 for c in built) or sum(c["numel"] for c in built) != sum(sizes):
        raise CheckFailed(f"{run['case']}: the constructor made the relay see {_show(built)}; it broadcasts the "
                          f"{sum(sizes)} parameter elements from rank 0 (one broadcast per parameter, or flattened) "
                          "and nothing else")
    for k, step in enumerate(run["steps"]):
        ops = [c for c in step["log"] if c["op"] != "barrier"]
        got = [c["numel"] for c in ops if c["op"] == "allreduce"]
        others = [c for c in ops if c["op"] != "allreduce"]
        if others:
            raise CheckFailed(f"{run['case']}: step {k}: the relay saw {_show(others)} besides the all-reduces; a "
                              "step all-reduces the gradient buckets and nothing else")
        if got != want:
            raise CheckFailed(f"{run['case']}: step {k}: the relay saw all-reduces of {got} elements, in this order; "
                              f"the buckets of the rule are {layout} (parameter indices, the last parameter first), "
                              f"{want} elements: one all-reduce per bucket, bucket 0 first, every step")
    first = run["steps"][0]["census"]
    for k, step in enumerate(run["steps"][1:], 1):
        for r, (a, b) in enumerate(zip(first, step["census"])):
            for what in ("tensors", "handles", "hooks"):
                if isinstance(a, dict) and isinstance(b, dict) and b.get(what, 0) > a.get(what, 0):
                    raise CheckFailed(f"{run['case']}: rank {r} holds {b[what] - a[what]} more {what} after step {k} "
                                      f"than after step 0 ({a[what]} -> {b[what]}): something the wrapper keeps "
                                      "grows every step. Start each step afresh (clear the lists of handles and "
                                      "flat tensors in finish_gradient_synchronization(); register the hooks once, "
                                      "in the constructor)")


def describe_step(events: Sequence[tuple[Any, ...]], key: str | None = None) -> str:
    """One step of a rank's timeline as a line: ``grad 5, grad 4, grad 3, [all_reduce 44 posted], ...``; a
    mark without the step's key shows as ``(not the probe's: ...)``."""
    words = []
    for event in events:
        if event[0] == "mark":
            if key is not None and (len(event) < 3 or event[2] != key):
                words.append(f"(not the probe's: {event[1]})")
            elif event[1] != "done":
                words.append(str(event[1]))
        elif event[0] == "post":
            op = {"allreduce": "all_reduce", "allgather": "all_gather"}.get(event[2], event[2])
            words.append(f"[{op} {event[3]} posted]" if event[2] != "barrier" else "[barrier posted]")
        elif event[0] == "wait":
            words.append("(waits)")
        elif event[0] == "poll":
            words.append("(polls)")
    return ", ".join(words)


def overlap(run: dict[str, Any], findings: Sequence[str]) -> None:
    """From each rank's timeline of each step: the probe's marks only; no wait before ``backward()`` returns;
    each bucket posted once it is complete, with the buckets before it, and before the next gradient."""
    if findings:
        raise CheckFailed("the order of events is marked by the probe in your process, so the overlap is graded "
                          "only when the reading of your cells refuses nothing: " + "; ".join(findings[:3]))
    _, layout, want = layout_of(run["model"], run["dims"], run["cap"])
    for k, step in enumerate(run["steps"]):
        for r, events in enumerate(step["timeline"]):
            _overlap_step(run, r, k, events, step["keys"][r], layout, want)


def _overlap_step(run: dict[str, Any], r: int, k: int, events: Sequence[tuple[Any, ...]], key: str,
                  layout: Sequence[Sequence[int]], want: Sequence[int]) -> None:
    where = f"{run['case']}: rank {r}, step {k}"
    line = f"\nRank {r}'s step {k}, in the order the relay saw it: {describe_step(events, key)}"
    forged = [e for e in events if e[0] == "mark" and (len(e) < 3 or e[2] != key)]
    marks = [e[1] for e in events if e[0] == "mark" and e[1] != "done"]
    grads = [m for m in marks if m.startswith("grad ")]
    if (forged or len(set(grads)) != len(grads) or marks[len(grads):] != ["backward", "synchronized"]
            or any(not m.startswith("grad ") for m in marks[:len(grads)])):
        # the probe sends each computed gradient's mark once, during backward(), then "backward" and
        # "synchronized", each with this step's key: anything else was not sent by the probe alone
        raise CheckFailed(f"{where}: the marks in the rank's timeline are not the probe's (one per computed "
                          "gradient during backward(), then the end of backward(), each with the key the grader "
                          f"gave the probe for this step)" + line)
    end = events.index(next(e for e in events if e[0] == "mark" and e[1] == "backward"))
    synced = events.index(next(e for e in events if e[0] == "mark" and e[1] == "synchronized"))
    ready = {int(e[1].split()[1]): pos for pos, e in enumerate(events) if e[0] == "mark" and e[1].startswith("grad ")}
    posts = [(pos, e) for pos, e in enumerate(events) if e[0] == "post" and e[2] == "allreduce"]
    if not posts:
        raise CheckFailed(f"{where}: the rank posted no all-reduce in this step: nothing to overlap" + line)
    mine = {e[1] for _, e in posts}
    early = [e for e in events[:end] if e[0] in ("wait", "poll") and e[1] in mine]
    if early:
        raise CheckFailed(f"{where}: the rank waited for (or polled) an all-reduce before the backward pass had "
                          "ended: the backward pass stopped until the other ranks had sent their gradients. Launch "
                          "each all-reduce with async_op=True and wait for the handles in "
                          "finish_gradient_synchronization()" + line)
    late = [e for _, e in posts if events.index(e) > synced]
    if late:
        raise CheckFailed(f"{where}: an all-reduce was posted after finish_gradient_synchronization() returned"
                          + line)
    if [e[3] for _, e in posts] != list(want):
        # other buckets than the rule's (the buckets cell's business): the communication must still start
        # during the backward pass wherever the gradients' order allows it
        first_complete = min((max(ready[i] for i in b) for b in layout if all(i in ready for i in b)), default=None)
        last = max(ready.values(), default=-1)
        if first_complete is not None and first_complete < last and posts[0][0] > last:
            raise CheckFailed(f"{where}: the first all-reduce was posted after the backward pass had computed every "
                              "gradient: no communication overlapped the backward pass. Launch a bucket from the "
                              "hook that completes it" + line)
        return
    grad_positions = sorted(ready.values())
    complete = -1
    for b, ((pos, _), members) in enumerate(zip(posts, layout)):
        if complete is not None and all(i in ready for i in members):
            complete = max(complete, *(ready[i] for i in members))
        else:
            complete = None          # a parameter without a gradient: this bucket and the later ones wait for the end
        if complete is None:
            if not end < pos < synced:
                raise CheckFailed(f"{where}: bucket {b} (parameters {list(members)}) holds a parameter that got no "
                                  "gradient in this step (or follows one that does), so it is launched by "
                                  "finish_gradient_synchronization(), after backward() has returned, with zeros for "
                                  "that parameter" + line)
            continue
        following = [p for p in grad_positions if p > complete]
        deadline = following[0] if following else end
        if not complete < pos < deadline:
            when = "before" if pos < complete else "after"
            raise CheckFailed(f"{where}: bucket {b} (parameters {list(members)}) was posted {when} the moment it "
                              "became ready: a bucket is launched from the hook of the gradient that completes it "
                              "(and the buckets before it), before the backward pass computes the next gradient"
                              + line)


_RUNS = RunsOnce()


def check(*solution: Any, source: Sequence[tuple[str, str]], runs: Sequence[Any], what: str) -> None:
    """``runs``: ``[(n, [(model, dims, bucket_cap_bytes, case), ...]), ...]``; ``what``: values, buckets or
    overlap.  ``solution``: the solution cells' placeholders (none: run ``source`` itself); ``source``: their
    ``solution_parts``, read with the probe's :data:`~dlperf.grading.probes.ddp_buckets.RULES`."""
    findings = read(source, probe.RULES) if what == "overlap" else []
    for run in _RUNS.each(source, runs, lambda group: _group(solution, source, *group)):
        if what == "values":
            values(run)
        elif what == "buckets":
            verdict_buckets(run)
        else:
            overlap(run, findings)


def case(verdict: Any, *args: Any) -> Any:
    """A :class:`~dlperf.grading.SelfCheck` case for the notebook: ``verdict(*args)`` passes, or its message is
    printed in full and the row shows its first words."""
    def run_case() -> tuple[Any, Any, bool]:
        try:
            verdict(*args)
        except CheckFailed as exc:
            print(f"- {exc}\n")
            return "fails (the message above)", "passes", False
        return "passes", "passes", True
    return run_case
