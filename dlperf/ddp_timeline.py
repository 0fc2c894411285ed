"""DDP's buckets at work: a communication hook that records each gradient bucket and when its all-reduce
starts and ends (:func:`timed_allreduce_hook`), the layout of the buckets (:func:`bucket_layout`) and a timeline
of a few training steps (:func:`bucket_timeline`); worker code of the chapter *Concise multi-GPU training with
DDP*, run in :func:`dlperf.ddp_examples.chapter_experiments` and shown on the page.

DDP checks a communication hook's annotations at run time (they must be the classes ``dist.GradBucket`` and
``torch.futures.Future[torch.Tensor]``), so this module does not use ``from __future__ import annotations``.
"""

import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from .bench import Timeline
from .devices import ddp_device_ids, synchronize

__all__ = ["BucketEvent", "CommLog", "bucket_layout", "bucket_timeline", "timed_allreduce_hook"]


@dataclass
class BucketEvent:
    """One bucket's all-reduce in one backward pass (marks from :class:`Timeline`)."""

    index: int
    params: int  # number of parameter tensors in the bucket
    nbytes: int
    layers: list[str]
    start: Any
    end: Any


@dataclass
class CommLog:
    """State of :func:`timed_allreduce_hook`: the process group, a clock and what it recorded."""

    group: Any
    world: int
    clock: Timeline
    names: dict[int, str]
    events: list[BucketEvent] = field(default_factory=list)


def timed_allreduce_hook(state: CommLog, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (average the bucket over the ranks), recording when it starts and ends.

    DDP calls this as soon as all gradients of a bucket exist; the all-reduce
    runs asynchronously while autograd goes on computing earlier layers'
    gradients.  The ``then`` callback runs once the all-reduce has finished
    (on a GPU: on a stream that waits for it), which is when ``end`` is marked.
    """
    start = state.clock.mark()
    buffer = bucket.buffer()
    buffer.div_(state.world)
    future = dist.all_reduce(buffer, group=state.group, async_op=True).get_future()
    layers = [state.names.get(p.data_ptr(), "?") for p in bucket.parameters()]

    def finished(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        end = state.clock.mark()
        state.events.append(BucketEvent(bucket.index(), len(layers), buffer.numel() * buffer.element_size(),
                                        layers, start, end))
        return fut.value()[0]

    return future.then(finished)


def bucket_layout(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], iterations: int = 2,
                  bucket_cap_mb: float | None = None) -> list[list[dict[str, Any]]]:
    """The gradient buckets that DDP all-reduces in each of the first ``iterations`` backward passes.

    Wraps ``model`` (on the device of ``batch``) in DDP over the current
    default process group (one rank is enough) with :func:`timed_allreduce_hook`
    and returns, per iteration, one ``{index, tensors, nbytes, layers}`` per
    bucket.  ``bucket_cap_mb=None`` keeps DDP's default caps.
    """
    x, y = batch
    device = x.device
    names = {p.data_ptr(): n for n, p in model.named_parameters()}
    options: dict[str, Any] = {} if bucket_cap_mb is None else {"bucket_cap_mb": bucket_cap_mb}
    ddp = DDP(model, device_ids=ddp_device_ids(device), **options)
    log = CommLog(group=None, world=dist.get_world_size(), clock=Timeline(device), names=names)
    ddp.register_comm_hook(log, timed_allreduce_hook)
    layouts = []
    for _ in range(iterations):
        log.events.clear()
        F.cross_entropy(ddp(x), y).backward()
        synchronize(device)
        layouts.append([{"index": e.index, "tensors": e.params, "nbytes": e.nbytes, "layers": e.layers}
                        for e in sorted(log.events, key=lambda e: e.index)])
    return layouts


def bucket_timeline(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor], device: torch.device,
                    bucket_cap_mb: float, steps: int = 4) -> dict[str, Any]:
    """Run ``steps`` DDP steps with small buckets and the timing hook; the last step's timeline.

    Times are seconds since the start of that step's forward pass, which
    began at ``t0_host`` on the host's monotonic clock (the same clock in
    every process of a machine, so the ranks' timelines can be aligned): the
    backward pass (``backward_start`` to ``backward_end``, which includes
    waiting for the last all-reduce) and one ``(index, layers, bytes, start,
    end)`` entry per bucket.  The first steps are left out: DDP rebuilds its
    buckets after the first backward pass, in the order gradients arrived.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    clock = Timeline(device)
    names = {p.data_ptr(): n for n, p in model.named_parameters()}
    ddp = DDP(model, device_ids=ddp_device_ids(device), bucket_cap_mb=bucket_cap_mb)
    log = CommLog(group=None, world=world, clock=clock, names=names)
    ddp.register_comm_hook(log, timed_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    x, y = batch
    for _ in range(steps):
        log.events.clear()
        synchronize(device)
        t0_host = time.perf_counter()  # one clock for all processes of a machine: aligns the ranks' timelines
        t0 = clock.mark()
        loss = F.cross_entropy(ddp(x), y)
        t1 = clock.mark()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        t2 = clock.mark()
        opt.step()
        t3 = clock.mark()
    synchronize(device)
    buckets = sorted(log.events, key=lambda e: e.index)
    return {
        "rank": rank,
        "t0_host": t0_host,
        "forward_end": clock.seconds(t0, t1),
        "backward_start": clock.seconds(t0, t1),
        "backward_end": clock.seconds(t0, t2),
        "step_end": clock.seconds(t0, t3),
        "buckets": [
            {"index": e.index, "tensors": e.params, "nbytes": e.nbytes, "layers": e.layers,
             "start": clock.seconds(t0, e.start), "end": clock.seconds(t0, e.end)}
            for e in buckets
        ],
    }
