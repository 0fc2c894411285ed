"""Pipeline parallelism: schedules as data, a simulator that runs them, and real stages.

The model is cut into ``p`` consecutive *stages*, one per rank; a batch is cut into ``m``
*micro-batches*.  Stage ``s`` runs the forward pass ``F_i`` of micro-batch ``i`` after stage
``s-1`` has sent it the activation of ``F_i``, and the backward pass ``B_i`` after stage ``s+1``
has sent it the gradient of ``B_i``.  A *schedule* says in which order each stage runs its
``2m`` actions (:func:`gpipe`, :func:`one_f_one_b`): a list per stage of :class:`Action`\\ s.

* **GPipe** (Huang et al., "GPipe: Efficient Training of Giant Neural Networks using Pipeline
  Parallelism", NeurIPS 2019): every stage runs all ``m`` forwards, then all ``m`` backwards.
  A stage keeps the activations of all ``m`` micro-batches until their backward.
* **1F1B** (PipeDream-Flush; Narayanan et al., "Memory-Efficient Pipeline-Parallel DNN
  Training", ICML 2021, and "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", SC 2021): stage ``s`` runs ``min(p - 1 - s, m)`` warm-up forwards, then
  alternates one forward and one backward, then drains the remaining backwards.  It holds at
  most ``min(p - s, m)`` micro-batches' activations.

With equal times ``t_f`` and ``t_b`` on every stage and free communication, both take
``(m + p - 1)(t_f + t_b)``, of which each stage computes ``m (t_f + t_b)``: the idle fraction,
the *bubble*, is ``(p - 1) / (m + p - 1)``.

:func:`simulate` runs a schedule with per-stage compute times and point-to-point transfers
between neighbouring stages on links of the alpha-beta model (a :class:`dlperf.cluster.LinkSpec`
or a :class:`dlperf.cluster.Topology` with links ``s -> s+1`` and ``s+1 -> s``; each directed link
carries one message at a time, in order).  Every action and every message is recorded with its
start and end (:class:`SimRun`): the bubble and the activations in flight are *counted* from
them, not computed from the formulas.

:func:`stage_worker` runs a schedule on real ranks (``torch.distributed`` ``isend``/``recv`` of
activations and gradients); :func:`torch_worker` runs PyTorch's ``torch.distributed.pipelining``
(``PipelineStage``, ``ScheduleGPipe``, ``Schedule1F1B``); :func:`reference` trains the same model in
one process.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..cluster import LinkSpec, Topology, transfer_time

__all__ = [
    "SCHEDULES",
    "Action",
    "Message",
    "SimRun",
    "Task",
    "batches",
    "bubble_fraction",
    "chapter_worker",
    "gpipe",
    "make_model",
    "one_f_one_b",
    "plot",
    "reference",
    "simulate",
    "stage_of",
    "stage_worker",
    "svg",
    "timeline_worker",
    "torch_worker",
    "validate",
]


@dataclass(frozen=True)
class Action:
    """One unit of a stage's work: ``kind`` ``"F"`` (forward) or ``"B"`` (backward) of a micro-batch."""

    kind: str
    microbatch: int

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}"


Schedule = list[list[Action]]


def _check(p: int, m: int) -> None:
    if p < 1 or m < 1:
        raise ValueError(f"a pipeline needs p >= 1 stages and m >= 1 micro-batches, got p={p}, m={m}")


def gpipe(p: int, m: int) -> Schedule:
    """Every stage: ``F_0 .. F_{m-1}``, then ``B_0 .. B_{m-1}`` (the order of PyTorch's ``ScheduleGPipe``)."""
    _check(p, m)
    return [[Action("F", i) for i in range(m)] + [Action("B", i) for i in range(m)] for _ in range(p)]


def one_f_one_b(p: int, m: int) -> Schedule:
    """1F1B: stage ``s`` warms up with ``w = min(p-1-s, m)`` forwards, alternates F and B, then drains.

    >>> [" ".join(map(str, actions)) for actions in one_f_one_b(2, 3)]
    ['F0 F1 B0 F2 B1 B2', 'F0 B0 F1 B1 F2 B2']
    """
    _check(p, m)
    schedule = []
    for s in range(p):
        warmup = min(p - 1 - s, m)
        actions = [Action("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            actions += [Action("F", warmup + i), Action("B", i)]
        actions += [Action("B", i) for i in range(m - warmup, m)]
        schedule.append(actions)
    return schedule


SCHEDULES: dict[str, Callable[[int, int], Schedule]] = {"GPipe": gpipe, "1F1B": one_f_one_b}


def bubble_fraction(p: int, m: int) -> float:
    """``(p - 1) / (m + p - 1)``: the idle fraction of GPipe and 1F1B with equal stages and free transfers.

    >>> bubble_fraction(4, 8) == 3 / 11
    True
    """
    _check(p, m)
    return (p - 1) / (m + p - 1)


def validate(schedule: Schedule, m: int) -> None:
    """Each stage runs ``F_i`` and ``B_i`` exactly once for every micro-batch, ``F_i`` before ``B_i``."""
    expected = sorted([("F", i) for i in range(m)] + [("B", i) for i in range(m)])
    for s, actions in enumerate(schedule):
        if sorted((a.kind, a.microbatch) for a in actions) != expected:
            raise ValueError(f"stage {s} does not run F and B of micro-batches 0..{m - 1} once each: {actions}")
        order = {(a.kind, a.microbatch): k for k, a in enumerate(actions)}
        late = [i for i in range(m) if order[("B", i)] < order[("F", i)]]
        if late:
            raise ValueError(f"stage {s} runs B{late[0]} before F{late[0]}")


# --------------------------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """An action as it ran: stage, kind, micro-batch, start and end in seconds."""

    stage: int
    kind: str
    microbatch: int
    start: float
    end: float


@dataclass(frozen=True)
class Message:
    """A point-to-point transfer: an activation (forward) or a gradient (backward) of a micro-batch."""

    src: int
    dst: int
    kind: str          # "activation" or "gradient"
    microbatch: int
    nbytes: int
    ready: float       # when the sender had it
    start: float       # when the link took it (it may be busy with an earlier message)
    end: float         # when it arrived


@dataclass
class SimRun:
    """What :func:`simulate` recorded: every task and message, and what follows from them."""

    p: int
    m: int
    name: str
    tasks: list[Task] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return max(t.end for t in self.tasks)

    def busy(self, stage: int) -> float:
        return sum(t.end - t.start for t in self.tasks if t.stage == stage)

    @property
    def bubble(self) -> float:
        """Idle fraction of the ``p`` stages over the makespan: ``1 - sum busy / (p * makespan)``."""
        return 1.0 - sum(self.busy(s) for s in range(self.p)) / (self.p * self.makespan)

    def in_flight(self, stage: int) -> list[tuple[float, int]]:
        """``(time, micro-batches held)`` after each change: held from the start of ``F_i`` to the end of ``B_i``."""
        changes = sorted([(t.start, 1) for t in self.tasks if t.stage == stage and t.kind == "F"]
                         + [(t.end, -1) for t in self.tasks if t.stage == stage and t.kind == "B"],
                         key=lambda c: (c[0], c[1]))   # at equal times the release comes first
        held, out = 0, []
        for time, delta in changes:
            held += delta
            out.append((time, held))
        return out

    def peak_in_flight(self, stage: int) -> int:
        """Most micro-batches whose activations stage ``stage`` held at once."""
        return max(h for _, h in self.in_flight(stage))

    def bytes_sent(self, stage: int) -> int:
        return sum(msg.nbytes for msg in self.messages if msg.src == stage)

    def spans(self) -> list[list[tuple[str, float, float]]]:
        """Per stage, ``(action, start, end)`` of its tasks: the input of :func:`plot`."""
        return [[(f"{t.kind}{t.microbatch}", t.start, t.end) for t in self.tasks if t.stage == s] for s in range(self.p)]

    def task(self, stage: int, kind: str, microbatch: int) -> Task:
        return next(t for t in self.tasks if (t.stage, t.kind, t.microbatch) == (stage, kind, microbatch))


def _per_stage(value: float | Sequence[float], p: int, what: str) -> list[float]:
    values = [float(value)] * p if isinstance(value, (int, float)) else [float(v) for v in value]
    if len(values) != p or any(v < 0 for v in values):
        raise ValueError(f"{what}: one non-negative time per stage ({p}), got {value!r}")
    return values


def _link(link: LinkSpec | Topology | None, src: int, dst: int) -> LinkSpec:
    if link is None:
        return LinkSpec(0.0, float("inf"))
    if isinstance(link, LinkSpec):
        return link
    if (src, dst) not in link.links:
        raise ValueError(f"the topology has no link {src} -> {dst} between neighbouring stages")
    return link.links[(src, dst)]


def simulate(schedule: Schedule | str, p: int | None = None, m: int | None = None, *,
             forward: float | Sequence[float] = 1.0, backward: float | Sequence[float] = 2.0,
             activation_bytes: int = 0, link: LinkSpec | Topology | None = None) -> SimRun:
    """Run ``schedule`` (or the name of one in :data:`SCHEDULES`, with ``p`` and ``m``).

    ``forward``/``backward``: seconds of one micro-batch's pass on each stage (a number, or one
    per stage).  Each stage runs its actions in order, an action as soon as the stage is free and
    its input has arrived; a message of ``activation_bytes`` (the gradient has the activation's
    size) leaves when its action ends and takes ``alpha + S / beta`` on its directed link, which
    carries one message at a time.  Stages compute while their messages travel.  Raises
    ``ValueError`` when the schedule deadlocks (a stage waits for something that never comes).
    """
    name = schedule if isinstance(schedule, str) else "custom"
    if isinstance(schedule, str):
        if p is None or m is None:
            raise ValueError("a schedule given by name needs p and m")
        schedule = SCHEDULES[schedule](p, m)
    p = len(schedule)
    m = len(schedule[0]) // 2
    validate(schedule, m)
    t_f, t_b = _per_stage(forward, p, "forward"), _per_stage(backward, p, "backward")
    run = SimRun(p, m, name)
    done: dict[tuple[int, str, int], float] = {}        # (stage, kind, i) -> end of the task
    arrival: dict[tuple[int, str, int], float] = {}     # (stage, kind, i) -> when its input arrived
    link_free: dict[tuple[int, int], float] = {}
    nxt = [0] * p
    free = [0.0] * p

    def send(src: int, dst: int, kind: str, i: int, ready: float) -> None:
        spec = _link(link, src, dst)
        start = max(ready, link_free.get((src, dst), 0.0))
        end = start + transfer_time(activation_bytes, spec.alpha, spec.beta)
        link_free[(src, dst)] = end
        run.messages.append(Message(src, dst, kind, i, activation_bytes, ready, start, end))
        arrival[(dst, "F" if kind == "activation" else "B", i)] = end

    total = 2 * m * p
    while len(done) < total:
        progressed = False
        for s in range(p):
            while nxt[s] < len(schedule[s]):
                a = schedule[s][nxt[s]]
                if a.kind == "F":
                    ready = 0.0 if s == 0 else arrival.get((s, "F", a.microbatch))
                else:
                    ready = done.get((s, "F", a.microbatch)) if s == p - 1 else arrival.get((s, "B", a.microbatch))
                if ready is None:
                    break
                start = max(free[s], ready)
                end = start + (t_f[s] if a.kind == "F" else t_b[s])
                free[s] = end
                done[(s, a.kind, a.microbatch)] = end
                run.tasks.append(Task(s, a.kind, a.microbatch, start, end))
                if a.kind == "F" and s < p - 1:
                    send(s, s + 1, "activation", a.microbatch, end)
                if a.kind == "B" and s > 0:
                    send(s, s - 1, "gradient", a.microbatch, end)
                nxt[s] += 1
                progressed = True
        if not progressed:
            waiting = "; ".join(f"stage {s} at {schedule[s][nxt[s]]}" for s in range(p) if nxt[s] < len(schedule[s]))
            raise ValueError(f"the schedule deadlocks: {waiting} wait for inputs that are never sent")
    run.tasks.sort(key=lambda t: (t.stage, t.start))
    return run


# --------------------------------------------------------------------------------------------
# Drawing a run (SVG: light enough for a widget with dozens of states)
# --------------------------------------------------------------------------------------------

_COLORS = {"F": ("#9ecae1", "#08306b"), "B": ("#fdae6b", "#7f2704")}


def svg(run: SimRun, width: int = 640, row: int = 26, title: str | None = None) -> str:
    """The timeline of ``run``: one row per stage, ``F_i`` blue and ``B_i`` orange, idle time blank."""
    left, top = 64, 22 if title else 6
    scale = (width - left - 10) / run.makespan
    height = top + run.p * row + 24
    label = title or f"{run.name}: p={run.p}, m={run.m}"
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{html.escape(label)}"><title>{html.escape(label)}</title>']
    if title:
        parts.append(f'<text x="{left}" y="14" font-size="12">{html.escape(title)}</text>')
    for s in range(run.p):
        y = top + s * row
        parts.append(f'<text x="{left - 6}" y="{y + row * 0.65:.1f}" font-size="11" text-anchor="end">stage {s}</text>')
        parts.append(f'<rect x="{left}" y="{y + 2}" width="{run.makespan * scale:.1f}" height="{row - 4}" '
                     'fill="#f4f4f4"/>')
    small = max(6, min(11, int(scale * min(t.end - t.start for t in run.tasks) / 2.2)))
    for t in run.tasks:
        fill, ink = _COLORS[t.kind]
        x, w, y = left + t.start * scale, (t.end - t.start) * scale, top + t.stage * row
        parts.append(f'<rect x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row - 4}" fill="{fill}" stroke="white"/>')
        if w >= 10:
            parts.append(f'<text x="{x + w / 2:.1f}" y="{y + row * 0.65:.1f}" font-size="{small}" text-anchor="middle" '
                         f'fill="{ink}">{t.kind}{t.microbatch}</text>')
    axis_y = top + run.p * row + 14
    parts.append(f'<text x="{left}" y="{axis_y}" font-size="10">0</text>'
                 f'<text x="{width - 10}" y="{axis_y}" font-size="10" text-anchor="end">{run.makespan:g} '
                 'time units</text></svg>')
    return "".join(parts)


def plot(ax: Any, spans: Sequence[Sequence[tuple[str, float, float]]], title: str = "", unit: str = "") -> None:
    """Draw per-stage spans ``(action, start, end)`` on a matplotlib axis: forwards blue, backwards orange."""
    for s, row in enumerate(spans):
        for label, start, end in row:
            fill, ink = _COLORS[label[0]]
            ax.barh(s, end - start, left=start, height=0.8, color=fill, edgecolor="white")
            ax.text((start + end) / 2, s, label, ha="center", va="center", fontsize=7, color=ink, clip_on=True)
    ax.set_yticks(range(len(spans)), [f"stage {s}" for s in range(len(spans))])
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)


# --------------------------------------------------------------------------------------------
# Real stages on a process group
# --------------------------------------------------------------------------------------------


def make_model(width: int, depth: int, seed: int = 0) -> nn.Sequential:
    """``depth`` blocks of ``Linear(width, width)`` + ``Tanh``, from ``seed``; stage ``s`` gets ``depth / p`` of them."""
    torch.manual_seed(seed)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])


def stage_of(model: nn.Sequential, stage: int, p: int) -> nn.Sequential:
    """The consecutive blocks of stage ``stage`` of ``p`` (``len(model)`` must divide by ``p``)."""
    if len(model) % p:
        raise ValueError(f"{len(model)} blocks do not split into {p} equal stages")
    k = len(model) // p
    return model[stage * k:(stage + 1) * k]


def batches(steps: int, rows: int, width: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Inputs and targets of ``steps`` global batches of ``rows`` rows."""
    g = torch.Generator().manual_seed(20_011 + seed)
    return [(torch.randn(rows, width, generator=g), torch.randn(rows, width, generator=g)) for _ in range(steps)]


def reference(width: int, depth: int, rows: int, steps: int, seed: int = 0, lr: float = 0.1) -> dict[str, Any]:
    """One process, the whole batch: SGD on the mean squared error; parameters and losses after ``steps``."""
    model = make_model(width, depth, seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for x, y in batches(steps, rows, width, seed):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"params": [p.detach().clone() for p in model.parameters()], "losses": losses}


def _run_schedule(stage: nn.Module, actions: list[Action], rank: int, p: int, m: int,
                  x: torch.Tensor, y: torch.Tensor, timeline: Any = None) -> tuple[list[float], int]:
    """One step of ``actions`` on this rank: micro-batch losses (last stage) and the peak held."""
    width = x.shape[1]
    xs, ys = x.chunk(m), y.chunk(m)
    inputs: dict[int, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}
    pending: list[Any] = []
    losses: list[float] = []
    peak = 0
    def clock() -> Any:
        return timeline.mark() if timeline is not None else None

    def stamp(a: Action, start: Any) -> None:   # the compute of one action, without the waiting and the sends
        if timeline is not None:
            timeline.records.append((str(a), start, timeline.mark()))

    for a in actions:
        i = a.microbatch
        if a.kind == "F":
            if rank == 0:
                inp = xs[i]
            else:
                inp = torch.empty(xs[i].shape[0], width)
                dist.recv(inp, src=rank - 1, tag=i)            # wait for the previous stage's activation
                inp.requires_grad_(True)
            start = clock()
            out = stage(inp)
            if rank == p - 1:
                out = nn.functional.mse_loss(out, ys[i]) / m   # mean over equal micro-batches = mean over the batch
                losses.append(out.item() * m)
            stamp(a, start)
            if rank < p - 1:
                pending.append(dist.isend(out.detach(), dst=rank + 1, tag=i))
            inputs[i], outputs[i] = inp, out
            peak = max(peak, len(outputs))
        else:
            grad = None                                        # the last stage starts from its loss
            if rank < p - 1:
                grad = torch.empty_like(outputs[i])
                dist.recv(grad, src=rank + 1, tag=i)           # wait for the next stage's gradient
            start = clock()
            outputs[i].backward(grad)
            stamp(a, start)
            if rank > 0:
                pending.append(dist.isend(inputs[i].grad, dst=rank - 1, tag=i))
            del inputs[i], outputs[i]                          # this micro-batch's activations can go
    for work in pending:
        work.wait()
    return losses, peak


def stage_worker(schedule: str, m: int, width: int, depth: int, rows: int, steps: int, seed: int = 0,
                 lr: float = 0.1, timeline: bool = False) -> dict[str, Any]:
    """This rank's stage of :func:`make_model`, trained ``steps`` SGD steps under ``schedule`` with ``m`` micro-batches.

    Activations travel forward and gradients backward with ``isend``/``recv`` (the sends complete
    in the background, so a stage can go on computing).  Returns the stage's parameters, the
    losses (last stage), the most micro-batches whose activations the stage held at once, and
    with ``timeline``, for every step but the first, the ``(action, start, end)`` of its compute
    (``spans``, from the moment the input had arrived), stamped by a :class:`dlperf.Timeline`
    started after a barrier, with that timeline's origin on the host's monotonic clock
    (``origin``: the same clock in every process of one machine): ``timed``, one entry per step.
    """
    from ..bench import Timeline

    rank, p = dist.get_rank(), dist.get_world_size()
    actions = SCHEDULES[schedule](p, m)[rank]
    stage = stage_of(make_model(width, depth, seed), rank, p)
    opt = torch.optim.SGD(stage.parameters(), lr=lr)
    losses, peaks = [], []
    timed: list[dict[str, Any]] = []
    for k, (x, y) in enumerate(batches(steps, rows, width, seed)):
        opt.zero_grad()
        clock = None
        if timeline and k > 0:          # the first step warms up (allocations, connections)
            dist.barrier()
            clock = Timeline("cpu")
        step_losses, peak = _run_schedule(stage, actions, rank, p, m, x, y, clock)
        opt.step()
        if clock is not None:
            timed.append({"origin": clock.origin, "spans": clock.spans()})
        losses.append(sum(step_losses) / m if step_losses else None)
        peaks.append(peak)
    return {"rank": rank, "params": [q.detach().clone() for q in stage.parameters()], "losses": losses,
            "peak_in_flight": max(peaks), "timed": timed}


def torch_worker(schedule: str, m: int, width: int, depth: int, rows: int, steps: int, seed: int = 0,
                 lr: float = 0.1, traced: bool = False) -> dict[str, Any]:
    """The same training with ``torch.distributed.pipelining``.

    Each rank builds its stage by hand (``PipelineStage`` around :func:`stage_of`), or, with
    ``traced``, lets ``pipeline()`` trace the whole model and cut it at ``SplitPoint`` markers before
    the first block of every stage but the first (``pipe.build_stage``).  ``ScheduleGPipe`` or
    ``Schedule1F1B`` splits the batch into ``m`` micro-batches and calls ``loss_fn`` on each; it
    accumulates the micro-batches' gradients and, by default (``scale_grads=True``), divides them by
    ``m`` after the last backward pass, which for equal micro-batches is the gradient of the whole
    batch's mean (the losses it reports are the micro-batches' own, unscaled).
    """
    import warnings

    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, SplitPoint, pipeline

    rank, p = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    if traced:
        model = make_model(width, depth, seed)
        example = batches(1, rows, width, seed)[0][0].chunk(m)[0]
        k = depth // p
        with warnings.catch_warnings():   # torch's tracer warns about its own use of a deprecated pytree class
            warnings.simplefilter("ignore", FutureWarning)
            pipe = pipeline(model, mb_args=(example,), split_spec={str(s * k): SplitPoint.BEGINNING for s in range(1, p)})
            pipe_stage = pipe.build_stage(rank, device)
        module = pipe_stage.submod
    else:
        module = stage_of(make_model(width, depth, seed), rank, p)
        pipe_stage = PipelineStage(module, rank, p, device)
    kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[schedule]
    sched = kind(pipe_stage, n_microbatches=m, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD(module.parameters(), lr=lr)
    losses = []
    for x, y in batches(steps, rows, width, seed):
        opt.zero_grad()
        micro: list[torch.Tensor] = []
        if rank == 0 and p == 1:
            sched.step(x, target=y, losses=micro)
        elif rank == 0:
            sched.step(x)
        elif rank == p - 1:
            sched.step(target=y, losses=micro)
        else:
            sched.step()
        opt.step()
        losses.append(sum(v.item() for v in micro) / m if micro else None)
    return {"rank": rank, "params": [q.detach().clone() for q in module.parameters()], "losses": losses}


def chapter_worker(m: int, width: int, depth: int, rows: int, steps: int, seed: int = 0,
                   lr: float = 0.1) -> dict[str, Any]:
    """Everything the chapter trains on the ranks, in one process group: both schedules by hand and with PyTorch."""
    out: dict[str, Any] = {}
    for schedule in SCHEDULES:
        out[f"hand {schedule}"] = stage_worker(schedule, m, width, depth, rows, steps, seed, lr)
        out[f"torch {schedule}"] = torch_worker(schedule, m, width, depth, rows, steps, seed, lr)
    out["torch GPipe, traced"] = torch_worker("GPipe", m, width, depth, rows, steps, seed, lr, traced=True)
    return out


def timeline_worker(m: int, width: int, depth: int, rows: int, steps: int = 6, seed: int = 0) -> dict[str, Any]:
    """``steps`` steps of each schedule, all but the first timed: :func:`stage_worker`'s ``timed``."""
    return {schedule: stage_worker(schedule, m, width, depth, rows, steps, seed, timeline=True)["timed"]
            for schedule in SCHEDULES}
