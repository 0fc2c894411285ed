"""Pipeline parallelism: a simulator that runs schedules, and real stages.

The model is cut into ``p`` consecutive *stages*, one per rank; a batch is cut into ``m``
*micro-batches*.  Stage ``s`` runs the forward pass ``F_i`` of micro-batch ``i`` after stage
``s-1`` has sent it the activation of ``F_i``, and the backward pass ``B_i`` after stage ``s+1``
has sent it the gradient of ``B_i``.  A *schedule* says in which order each stage runs its
actions: :mod:`dlperf.parallel.schedules` (GPipe, 1F1B, interleaved 1F1B with ``v`` chunks per
rank, ZB-H1 with the backward pass split into ``B`` and ``W``; re-exported here), with their
closed forms.  With equal times ``t_f`` and ``t_b`` on every stage and free communication, GPipe
and 1F1B take ``(m + p - 1)(t_f + t_b)``, of which each stage computes ``m (t_f + t_b)``: the idle
fraction, the *bubble*, is ``(p - 1) / (m + p - 1)``.

:func:`simulate` runs a schedule with per-stage compute times and point-to-point transfers
between neighbouring stages on links of the alpha-beta model (a :class:`dlperf.cluster.LinkSpec`
or a :class:`dlperf.cluster.Topology` with links ``s -> s+1`` and ``s+1 -> s``, and ``p-1 -> 0``
for interleaved schedules; each directed link carries one message at a time, in order).  Every
action and every message is recorded with its start and end (:class:`SimRun`): the bubble and the
activations in flight are *counted* from them, not computed from the formulas.

:func:`stage_worker` runs a schedule on real ranks (``torch.distributed`` ``isend``/``recv`` of
activations and gradients, ``v`` chunks per rank, ``B`` and ``W`` apart with ``torch.autograd.grad``);
:func:`torch_worker` runs PyTorch's ``torch.distributed.pipelining`` (``PipelineStage``,
``ScheduleGPipe``, ``Schedule1F1B``, ``ScheduleInterleaved1F1B``, ``ScheduleInterleavedZeroBubble``,
``ScheduleZBVZeroBubble``); :func:`reference` trains the same model in one process.
"""

from __future__ import annotations

import html

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..cluster import LinkSpec, Topology, transfer_time
from .schedules import (ALL_SCHEDULES, SCHEDULES, Action, Schedule, bubble_fraction, gpipe, interleaved_1f1b,
                        interleaved_bubble_fraction, one_f_one_b, plot, shape, svg, validate, zb_h1,
                        zb_h1_makespan)

__all__ = [
    "ALL_SCHEDULES",
    "SCHEDULES",
    "TORCH_SCHEDULES",
    "Action",
    "Message",
    "SimRun",
    "Task",
    "batches",
    "bubble_fraction",
    "chapter_worker",
    "explore_state",
    "gpipe",
    "in_model_order",
    "interleaved_1f1b",
    "make_model",
    "measured_steps",
    "modern_worker",
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
    "zb_h1",
]


# --------------------------------------------------------------------------------------------
# The simulator
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    """An action as it ran: stage, kind, micro-batch, start and end in seconds, model chunk."""

    stage: int
    kind: str
    microbatch: int
    start: float
    end: float
    chunk: int = 0

    @property
    def label(self) -> str:
        return str(Action(self.kind, self.microbatch, self.chunk))


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
    chunk: int = 0     # the chunk that produced it


@dataclass
class SimRun:
    """What :func:`simulate` recorded: every task and message, and what follows from them."""

    p: int
    m: int
    name: str
    tasks: list[Task] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    v: int = 1
    split: bool = False

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
        """``(time, chunk-micro-batches held)`` after each change: held from the start of ``F_i`` to the end of
        ``B_i`` (of ``W_i`` when the backward pass is split: the weight gradient still needs the inputs)."""
        last = "W" if self.split else "B"
        changes = sorted([(t.start, 1) for t in self.tasks if t.stage == stage and t.kind == "F"]
                         + [(t.end, -1) for t in self.tasks if t.stage == stage and t.kind == last],
                         key=lambda c: (c[0], c[1]))   # at equal times the release comes first
        held, out = 0, []
        for time, delta in changes:
            held += delta
            out.append((time, held))
        return out

    def peak_in_flight(self, stage: int) -> int:
        """Most (chunk-)micro-batches whose activations stage ``stage`` held at once."""
        return max(h for _, h in self.in_flight(stage))

    def peak_activations(self, stage: int) -> float:
        """:meth:`peak_in_flight` in units of one micro-batch's activations of a whole stage (a chunk holds ``1/v``)."""
        return self.peak_in_flight(stage) / self.v

    def bytes_sent(self, stage: int) -> int:
        return sum(msg.nbytes for msg in self.messages if msg.src == stage)

    def spans(self) -> list[list[tuple[str, float, float]]]:
        """Per stage, ``(action, start, end)`` of its tasks: the input of :func:`plot`."""
        return [[(t.label, t.start, t.end) for t in self.tasks if t.stage == s] for s in range(self.p)]

    def task(self, stage: int, kind: str, microbatch: int, chunk: int = 0) -> Task:
        return next(t for t in self.tasks if (t.stage, t.kind, t.microbatch, t.chunk) == (stage, kind, microbatch, chunk))


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
             weight: float | Sequence[float] | None = None,
             activation_bytes: int = 0, link: LinkSpec | Topology | None = None) -> SimRun:
    """Run ``schedule`` (or the name of one in :data:`ALL_SCHEDULES`, with ``p`` and ``m``).

    ``forward``/``backward``: seconds of one micro-batch's pass on each stage (a number, or one
    per stage); a stage of ``v`` chunks spends ``1/v`` of them on each chunk.  When the schedule
    splits the backward pass, ``W`` takes ``weight`` (default half the backward pass) and ``B``
    the rest.  Chunk ``c`` of stage ``s`` is virtual stage ``c p + s``: its forward output goes to
    virtual stage ``c p + s + 1`` (stage ``s + 1``, or stage 0's next chunk after the last stage).
    Each stage runs its actions in order, an action as soon as the stage is free and
    its input has arrived; a message of ``activation_bytes`` (the gradient has the activation's
    size) leaves when its action ends and takes ``alpha + S / beta`` on its directed link, which
    carries one message at a time.  Stages compute while their messages travel.  Raises
    ``ValueError`` when the schedule deadlocks (a stage waits for something that never comes).
    """
    name = schedule if isinstance(schedule, str) else "custom"
    if isinstance(schedule, str):
        if p is None or m is None:
            raise ValueError("a schedule given by name needs p and m")
        schedule = ALL_SCHEDULES[schedule](p, m)
    p, m, v, split = shape(schedule)
    validate(schedule, m)
    t_f, t_b = _per_stage(forward, p, "forward"), _per_stage(backward, p, "backward")
    t_w = _per_stage([b / 2 for b in t_b] if weight is None else weight, p, "weight") if split else [0.0] * p
    cost = {"F": [f / v for f in t_f], "B": [(b - w) / v for b, w in zip(t_b, t_w)], "W": [w / v for w in t_w]}
    last_virtual = v * p - 1
    run = SimRun(p, m, name, v=v, split=split)
    done: dict[tuple[int, str, int, int], float] = {}        # (stage, kind, i, chunk) -> end of the task
    arrival: dict[tuple[int, str, int, int], float] = {}     # (stage, kind, i, chunk) -> when its input arrived
    link_free: dict[tuple[int, int], float] = {}
    nxt = [0] * p
    free = [0.0] * p

    def send(src: int, vdst: int, kind: str, i: int, c: int, ready: float) -> None:
        dst = vdst % p
        key = (dst, "F" if kind == "activation" else "B", i, vdst // p)
        if dst == src:                                    # one stage, several chunks: no message
            arrival[key] = ready
            return
        spec = _link(link, src, dst)
        start = max(ready, link_free.get((src, dst), 0.0))
        end = start + transfer_time(activation_bytes, spec.alpha, spec.beta)
        link_free[(src, dst)] = end
        run.messages.append(Message(src, dst, kind, i, activation_bytes, ready, start, end, c))
        arrival[key] = end

    def ready_at(s: int, a: Action) -> float | None:
        virtual = a.chunk * p + s
        if a.kind == "F":
            return 0.0 if virtual == 0 else arrival.get((s, "F", a.microbatch, a.chunk))
        if a.kind == "W":
            return done.get((s, "B", a.microbatch, a.chunk))
        if virtual == last_virtual:
            return done.get((s, "F", a.microbatch, a.chunk))
        return arrival.get((s, "B", a.microbatch, a.chunk))

    total = sum(len(actions) for actions in schedule)
    while len(done) < total:
        progressed = False
        for s in range(p):
            while nxt[s] < len(schedule[s]):
                a = schedule[s][nxt[s]]
                ready = ready_at(s, a)
                if ready is None:
                    break
                start = max(free[s], ready)
                end = start + cost[a.kind][s]
                free[s] = end
                done[(s, a.kind, a.microbatch, a.chunk)] = end
                run.tasks.append(Task(s, a.kind, a.microbatch, start, end, a.chunk))
                virtual = a.chunk * p + s
                if a.kind == "F" and virtual < last_virtual:
                    send(s, virtual + 1, "activation", a.microbatch, a.chunk, end)
                if a.kind == "B" and virtual > 0:
                    send(s, virtual - 1, "gradient", a.microbatch, a.chunk, end)
                nxt[s] += 1
                progressed = True
        if not progressed:
            waiting = "; ".join(f"stage {s} at {schedule[s][nxt[s]]}" for s in range(p) if nxt[s] < len(schedule[s]))
            raise ValueError(f"the schedule deadlocks: {waiting} wait for inputs that are never sent")
    run.tasks.sort(key=lambda t: (t.stage, t.start))
    return run


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


def _tag(kind: str, virtual: int, i: int, m: int, stages: int) -> int:
    """The tag of the message into virtual stage ``virtual`` for micro-batch ``i``: unique per receiver."""
    return (virtual + (stages if kind == "B" else 0)) * m + i


def _run_schedule(stage: nn.Module | Sequence[nn.Module], actions: list[Action], rank: int, p: int, m: int,
                  x: torch.Tensor, y: torch.Tensor, timeline: Any = None) -> tuple[list[float], int]:
    """One step of ``actions`` on this rank: micro-batch losses (last stage) and the peak held.

    ``stage`` is this rank's module, or its ``v`` chunks (chunk ``c`` is virtual stage ``c p + rank``).
    ``B`` alone is the whole backward pass; when the schedule also has ``W``, ``B`` computes the
    gradient of the chunk's input only (``torch.autograd.grad``, the graph kept) and ``W`` that of
    its weights, accumulated into ``.grad`` (recomputing the chain of input gradients inside the
    chunk, which a real zero-bubble implementation keeps: values and order are checked here, not time).
    """
    chunks = list(stage) if isinstance(stage, (list, tuple)) else [stage]
    v, split = len(chunks), any(a.kind == "W" for a in actions)
    last = v * p - 1
    width = x.shape[1]
    xs, ys = x.chunk(m), y.chunk(m)
    inputs: dict[tuple[int, int], torch.Tensor] = {}
    outputs: dict[tuple[int, int], torch.Tensor] = {}
    grads: dict[tuple[int, int], torch.Tensor | None] = {}
    pending: list[Any] = []
    losses: list[float] = []
    peak = 0

    def clock() -> Any:
        return timeline.mark() if timeline is not None else None

    def stamp(a: Action, start: Any) -> None:   # the compute of one action, without the waiting and the sends
        if timeline is not None:
            timeline.records.append((str(a), start, timeline.mark()))

    def weights(i: int, c: int, grad: torch.Tensor | None) -> None:     # W: the weights' share of B
        params = list(chunks[c].parameters())
        for q, g in zip(params, torch.autograd.grad(outputs[(i, c)], params, grad)):
            q.grad = g if q.grad is None else q.grad + g

    def tag(kind: str, virtual: int) -> int:
        return _tag(kind, virtual, i, m, v * p)

    for a in actions:
        i, c = a.microbatch, a.chunk
        vs, key = c * p + rank, (a.microbatch, a.chunk)          # virtual stage, and what it holds
        if a.kind == "F":
            if vs == 0:
                inp = xs[i]
            else:
                inp = torch.empty(xs[i].shape[0], width)
                dist.recv(inp, src=(vs - 1) % p, tag=tag("F", vs))  # the previous stage's output
                inp.requires_grad_(True)
            start = clock()
            out = chunks[c](inp)
            if vs == last:
                out = nn.functional.mse_loss(out, ys[i]) / m   # the mean over the batch, in m parts
                losses.append(out.item() * m)
            stamp(a, start)
            if vs < last:
                pending.append(dist.isend(out.detach(), dst=(vs + 1) % p, tag=tag("F", vs + 1)))
            inputs[key], outputs[key] = inp, out
            peak = max(peak, len(outputs))
        elif a.kind == "B":
            grad = None                                        # the last stage starts from its loss
            if vs < last:
                grad = torch.empty_like(outputs[key])
                dist.recv(grad, src=(vs + 1) % p, tag=tag("B", vs))  # the next stage's gradient
            start = clock()
            if not split:
                outputs[key].backward(grad)
                sent = inputs[key].grad if vs > 0 else None
            elif vs > 0:                                # the input's gradient only; W follows
                (sent,) = torch.autograd.grad(outputs[key], inputs[key], grad, retain_graph=True)
            stamp(a, start)
            if vs > 0:
                pending.append(dist.isend(sent, dst=(vs - 1) % p, tag=tag("B", vs - 1)))
            if split:
                grads[key] = grad
            else:
                del inputs[key], outputs[key]           # this micro-batch's activations can go
        else:
            start = clock()
            weights(i, c, grads.pop(key))
            stamp(a, start)
            del inputs[key], outputs[key]
    for work in pending:
        work.wait()
    return losses, peak


def _chunks(model: nn.Sequential, rank: int, p: int, v: int, placement: str = "loop") -> list[nn.Sequential]:
    """This rank's chunks of ``model`` cut in ``v p`` virtual stages: ``c p + rank`` (``"loop"``, Megatron's and
    ``ScheduleInterleaved1F1B``'s) or, for ``v = 2``, ``rank`` and ``2p - 1 - rank`` (``"V"``, ``ScheduleZBVZeroBubble``)."""
    ids = [rank, 2 * p - 1 - rank] if placement == "V" else [c * p + rank for c in range(v)]
    return [stage_of(model, k, v * p) for k in ids]


def stage_worker(schedule: str, m: int, width: int, depth: int, rows: int, steps: int, seed: int = 0,
                 lr: float = 0.1, timeline: bool = False) -> dict[str, Any]:
    """This rank's stage of :func:`make_model`, trained ``steps`` SGD steps under ``schedule`` with ``m`` micro-batches.

    ``schedule`` is a name of :data:`ALL_SCHEDULES` (an interleaved one gives each rank ``v``
    chunks, :func:`_chunks`).  Activations travel forward and gradients backward with
    ``isend``/``recv`` (the sends complete in the background, so a stage can go on computing).
    Returns the stage's parameters (``virtual``: per virtual stage), the losses (last stage), the
    most (chunk-)micro-batches whose activations the stage held at once, and with ``timeline``, for
    every step but the first, the ``(action, start, end)`` of its compute (``spans``, from the
    moment the input had arrived), stamped by a :class:`dlperf.Timeline` started after a barrier,
    with that timeline's origin on the host's monotonic clock (``origin``: the same clock in every
    process of one machine): ``timed``, one entry per step.
    """
    from ..bench import Timeline

    rank, p = dist.get_rank(), dist.get_world_size()
    actions = ALL_SCHEDULES[schedule](p, m)[rank]
    v = len({a.chunk for a in actions})
    chunks = _chunks(make_model(width, depth, seed), rank, p, v)
    opt = torch.optim.SGD([q for c in chunks for q in c.parameters()], lr=lr)
    losses, peaks = [], []
    timed: list[dict[str, Any]] = []
    for k, (x, y) in enumerate(batches(steps, rows, width, seed)):
        opt.zero_grad()
        clock = None
        if timeline and k > 0:          # the first step warms up (allocations, connections)
            dist.barrier()
            clock = Timeline("cpu")
        step_losses, peak = _run_schedule(chunks, actions, rank, p, m, x, y, clock)
        opt.step()
        if clock is not None:
            timed.append({"origin": clock.origin, "spans": clock.spans()})
        losses.append(sum(step_losses) / m if step_losses else None)
        peaks.append(peak)
    return {"rank": rank, "params": [q.detach().clone() for c in chunks for q in c.parameters()],
            "virtual": {c * p + rank: [q.detach().clone() for q in chunks[c].parameters()] for c in range(v)},
            "losses": losses, "peak_in_flight": max(peaks), "timed": timed}


#: ``torch.distributed.pipelining``'s schedule classes by our names, with the placement of their chunks.
TORCH_SCHEDULES = {"GPipe": ("ScheduleGPipe", 1, "loop"), "1F1B": ("Schedule1F1B", 1, "loop"),
                   "interleaved 1F1B": ("ScheduleInterleaved1F1B", 2, "loop"),
                   "interleaved zero bubble": ("ScheduleInterleavedZeroBubble", 2, "loop"),
                   "ZBV zero bubble": ("ScheduleZBVZeroBubble", 2, "V")}


def torch_worker(schedule: str, m: int, width: int, depth: int, rows: int, steps: int = 3, seed: int = 0,
                 lr: float = 0.1, traced: bool = False) -> dict[str, Any]:
    """The same training with ``torch.distributed.pipelining``.

    Each rank builds its stage by hand (``PipelineStage`` around :func:`stage_of`), or, with
    ``traced``, lets ``pipeline()`` trace the whole model and cut it at ``SplitPoint`` markers before
    the first block of every stage but the first (``pipe.build_stage``).  The schedule object
    (:data:`TORCH_SCHEDULES`: ``ScheduleGPipe``, ``Schedule1F1B``, or one with two chunks per rank,
    each a ``PipelineStage`` of its own) splits the batch into ``m`` micro-batches and calls ``loss_fn``
    on each; it accumulates the micro-batches' gradients and, by default (``scale_grads=True``),
    divides them by ``m`` after the last backward pass, which for equal micro-batches is the gradient
    of the whole batch's mean (the losses it reports are the micro-batches' own, unscaled).
    """
    import warnings

    from torch.distributed import pipelining as pl

    rank, p = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu")
    cls, v, placement = TORCH_SCHEDULES[schedule]
    if traced:
        model = make_model(width, depth, seed)
        example = batches(1, rows, width, seed)[0][0].chunk(m)[0]
        k = depth // p
        with warnings.catch_warnings():   # torch's tracer warns about its own use of a deprecated pytree class
            warnings.simplefilter("ignore", FutureWarning)
            pipe = pl.pipeline(model, mb_args=(example,),
                               split_spec={str(s * k): pl.SplitPoint.BEGINNING for s in range(1, p)})
            stages = [pipe.build_stage(rank, device)]
        modules, ids = [stages[0].submod], [rank]
    else:
        modules = _chunks(make_model(width, depth, seed), rank, p, v, placement)
        ids = [rank, 2 * p - 1 - rank] if placement == "V" else [c * p + rank for c in range(v)]
        stages = [pl.PipelineStage(mod, k, v * p, device) for mod, k in zip(modules, ids)]
    kind = getattr(pl.schedules, cls)
    sched = kind(stages[0] if v == 1 else stages, n_microbatches=m, loss_fn=nn.functional.mse_loss)
    opt = torch.optim.SGD([q for mod in modules for q in mod.parameters()], lr=lr)
    losses = []
    for x, y in batches(steps, rows, width, seed):
        opt.zero_grad()
        micro: list[torch.Tensor] = []
        first, last = 0 in ids, v * p - 1 in ids     # this rank feeds the inputs / has the loss
        sched.step(*([x] if first else []), **({"target": y, "losses": micro} if last else {}))
        opt.step()
        losses.append(sum(t.item() for t in micro) / m if micro else None)
    return {"rank": rank, "params": [q.detach().clone() for mod in modules for q in mod.parameters()],
            "virtual": {k: [q.detach().clone() for q in mod.parameters()] for mod, k in zip(modules, ids)},
            "losses": losses}


def in_model_order(ranks: Sequence[dict[str, Any]]) -> list[torch.Tensor]:
    """The parameters the ranks returned, in the model's order (by virtual stage)."""
    virtual = {k: params for r in ranks for k, params in r["virtual"].items()}
    return [q for k in sorted(virtual) for q in virtual[k]]


def chapter_worker(m: int, width: int, depth: int, rows: int, steps: int, seed: int = 0,
                   lr: float = 0.1) -> dict[str, Any]:
    """Everything the chapter trains on the ranks, in one process group: both schedules by hand and with PyTorch."""
    out: dict[str, Any] = {}
    for schedule in SCHEDULES:
        out[f"hand {schedule}"] = stage_worker(schedule, m, width, depth, rows, steps, seed, lr)
        out[f"torch {schedule}"] = torch_worker(schedule, m, width, depth, rows, steps, seed, lr)
    out["torch GPipe, traced"] = torch_worker("GPipe", m, width, depth, rows, steps, seed, lr, traced=True)
    return out


def modern_worker(m: int, width: int, depth: int, rows: int, steps: int, seed: int = 0,
                  lr: float = 0.1) -> dict[str, Any]:
    """The newer schedules in one process group: interleaved 1F1B and ZB-H1 by hand, and PyTorch's
    interleaved 1F1B, interleaved zero-bubble and ZBV schedules (two chunks per rank)."""
    out: dict[str, Any] = {}
    for schedule in ("interleaved 1F1B", "ZB-H1"):
        out[f"hand {schedule}"] = stage_worker(schedule, m, width, depth, rows, steps, seed, lr)
    for schedule in ("interleaved 1F1B", "interleaved zero bubble", "ZBV zero bubble"):
        out[f"torch {schedule}"] = torch_worker(schedule, m, width, depth, rows, steps, seed, lr)
    return out


def timeline_worker(m: int, width: int, depth: int, rows: int, steps: int = 6, seed: int = 0) -> dict[str, Any]:
    """``steps`` steps of each schedule, all but the first timed: :func:`stage_worker`'s ``timed``."""
    return {schedule: stage_worker(schedule, m, width, depth, rows, steps, seed, timeline=True)["timed"]
            for schedule in SCHEDULES}


def measured_steps(timed: Sequence[dict[str, Any]], name: str) -> list[list[list[tuple[str, float, float]]]]:
    """Every timed step of schedule ``name`` from :func:`timeline_worker`'s ranks: per rank, ``(action, start,
    end)`` in ms on one clock (the host's), from the step's start."""
    steps = []
    for k in range(len(timed[0][name])):
        t0 = min(r[name][k]["origin"] for r in timed)
        steps.append([[(a, 1e3 * (r[name][k]["origin"] - t0 + s), 1e3 * (r[name][k]["origin"] - t0 + e))
                       for a, s, e in r[name][k]["spans"]] for r in timed])
    return steps


def explore_state(schedule: str, p: int, m: int) -> str:
    """One state of the chapter's schedule explorer: the simulated timeline of ``schedule`` (a name of
    :data:`ALL_SCHEDULES`; equal stages, ``t_b = 2 t_f``, ``W`` half of it, free messages), its bubble against
    the closed form, and the activations each stage holds (whole-stage micro-batches)."""
    try:
        run = simulate(schedule, p, m, forward=1, backward=2)
    except ValueError as err:
        return f"<p>{html.escape(schedule)}, p = {p}, m = {m}: {html.escape(str(err))}.</p>"
    v = run.v
    forms = {"interleaved 1F1B": (interleaved_bubble_fraction(p, m, v), f"(p-1)/(vm+p-1) with v = {v}"),
             "ZB-H1": (1 - m * 3 / zb_h1_makespan(p, m, 1, 2, 1), "(p-1)(T_F+T_B-T_W) idle per stage")}
    form, text = forms.get(schedule, (bubble_fraction(p, m), "(p-1)/(m+p-1)"))
    held = [f"{run.peak_activations(s):g}" for s in range(p)]
    note = (f"<p>{html.escape(schedule)}, p = {p} stages, m = {m} micro-batches: makespan {run.makespan:g} time "
            f"units, bubble {run.bubble:.3f} (formula {html.escape(text)}: {form:.3f}); activations each stage "
            f"holds at most, in micro-batches of a whole stage: {', '.join(held)}; {len(run.messages)} messages "
            "when every boundary crosses a link.</p>")
    return svg(run, width=720, row=22) + note
