"""Worker code of the chapter *Concise multi-GPU training with DDP*.

Spawned worker processes import their function by module and name, so the
code that :func:`dlperf.launch.launch` runs for the chapter lives here rather
than in the notebook; the chapter shows it with :func:`inspect.getsource`, and
``tests/test_ddp_examples.py`` runs it.

* :func:`resnet18` -- the ResNet-18 structure for 28x28 grayscale images, with
  a width knob (64 is the real ResNet-18) and optional BatchNorm;
* :func:`check_equivalence`, :func:`ddp_training` -- a worker: DDP on ``N``
  ranks with ``B`` images each, to compare with :func:`reference_training`,
  one process on ``N * B`` images;
* :func:`train_ddp`, :func:`evaluate_sharded` -- a real DDP training run with a
  :class:`~torch.utils.data.DistributedSampler`, and an evaluation whose counts
  are summed across ranks;
* :func:`timed_allreduce_hook`, :func:`bucket_layout`, :func:`bucket_timeline`
  -- a DDP communication hook that records each gradient bucket and when its
  all-reduce starts and ends (in :mod:`dlperf.ddp_timeline`, imported here);
* :func:`scaling` -- time per step for 1, 2, ... ranks, with and without
  gradient synchronisation (``no_sync``);
* :func:`chapter_experiments` -- all of the above in one process group, so
  that the processes are started only once.

Data sets are passed in by the caller (tensors reach spawned workers through
shared memory), so workers never import the data set's loader.  Every worker
function calls :func:`dlperf.launch.init_from_env`, so it also runs under
``torchrun``.  On the CPU (the gloo backend) each rank uses ``cpu_count //
ranks`` threads, as ``torchrun`` arranges with ``OMP_NUM_THREADS``; under NCCL
each rank owns one GPU.

DDP checks a communication hook's annotations at run time (they must be the
classes ``dist.GradBucket`` and ``torch.futures.Future[torch.Tensor]``), so
this module does not use ``from __future__ import annotations``.
"""

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from .bench import Measurement, Stopwatch, benchmark
from .ddp_timeline import BucketEvent, CommLog, bucket_layout, bucket_timeline, timed_allreduce_hook
from .devices import by_device, ddp_device_ids, describe
from .launch import init_from_env

__all__ = [
    "BucketEvent",
    "ChapterConfig",
    "CommLog",
    "EquivalenceConfig",
    "Residual",
    "bucket_layout",
    "bucket_timeline",
    "chapter_experiments",
    "check_equivalence",
    "count_correct",
    "ddp_training",
    "evaluate_sharded",
    "max_abs_diff",
    "reference_training",
    "replica_spread",
    "resnet18",
    "scaling",
    "seeded_resnet",
    "timed_allreduce_hook",
    "train_ddp",
]


# --------------------------------------------------------------------------- model


class Residual(nn.Module):
    """A basic ResNet block: two 3x3 convolutions and a shortcut (a 1x1 convolution when the shape changes)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, norm: bool = True):
        super().__init__()

        def bn() -> nn.Module:
            return nn.BatchNorm2d(out_channels) if norm else nn.Identity()

        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=not norm)
        self.bn1 = bn()
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=not norm)
        self.bn2 = bn()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, out_channels, 1, stride=stride, bias=not norm), bn())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + self.shortcut(x))


def resnet18(num_classes: int = 10, in_channels: int = 1, width: int = 64, norm: bool = True) -> nn.Sequential:
    """ResNet-18 for small images: a 3x3 stem without max-pooling, four stages of two blocks.

    ``width`` is the number of channels of the first stage (the stages have
    ``width, 2 width, 4 width, 8 width``); 64 gives the original ResNet-18 and
    its 11 million parameters.  ``norm=False`` drops every BatchNorm (the
    convolutions get biases instead), which makes each sample's gradient
    independent of the other samples in its batch.
    """
    widths = [width, 2 * width, 4 * width, 8 * width]
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, width, 3, padding=1, bias=not norm),
        nn.BatchNorm2d(width) if norm else nn.Identity(),
        nn.ReLU(),
    ]
    in_ch = width
    for stage, out_ch in enumerate(widths):
        stride = 1 if stage == 0 else 2
        layers += [Residual(in_ch, out_ch, stride, norm), Residual(out_ch, out_ch, 1, norm)]
        in_ch = out_ch
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(in_ch, num_classes)]
    return nn.Sequential(*layers)


def seeded_resnet(seed: int, **kwargs: Any) -> nn.Sequential:
    """:func:`resnet18` with parameters drawn from ``torch.manual_seed(seed)``: same seed, same model."""
    torch.manual_seed(seed)
    return resnet18(**kwargs)


# --------------------------------------------------------------------------- data and small helpers


def _cpu_threads(ranks_on_this_machine: int) -> int:
    """Threads per rank that share the CPU cores fairly (what torchrun's OMP_NUM_THREADS does)."""
    return max(1, (os.cpu_count() or 1) // ranks_on_this_machine)


def replica_spread(tensors: Sequence[torch.Tensor], group: Any = None) -> float:
    """Largest difference, over all elements, between the ranks' copies of ``tensors``.

    ``max over ranks - min over ranks``, element by element, from two
    all-reduces (MAX and MIN).  0.0 means every rank holds bit-identical values.
    """
    flat = torch.cat([t.detach().reshape(-1).double() for t in tensors])
    hi, lo = flat.clone(), flat.clone()
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=group)
    return float((hi - lo).max())


def max_abs_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """Largest ``|a[k] - b[k]|`` over the floating-point tensors of two state dicts."""
    return max(float((a[k].float().cpu() - b[k].float().cpu()).abs().max()) for k in a if a[k].is_floating_point())


def _cpu_state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


# --------------------------------------------------------------------------- equivalence


@dataclass
class EquivalenceConfig:
    """A few steps of a small ResNet, sized to finish in seconds on a CPU.

    ``dtype`` is float64 so that rounding (about 1e-16 relative) cannot hide a
    real difference, and so that no GPU replaces float32 arithmetic by TF32.
    """

    steps: int = 4
    batch_per_rank: int = 16
    lr: float = 0.05
    width: int = 4
    seed: int = 0
    accumulate: int = 2  # micro-batches per step in the no_sync variant
    dtype: str = "float64"


def _sampled_batches(dataset: Dataset, batch_size: int, rank: int, world: int, seed: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches of this rank's shard of one shuffled epoch (DistributedSampler, epoch 0)."""
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    return iter(DataLoader(dataset, batch_size=batch_size, sampler=sampler))


def reference_training(dataset: Dataset, cfg: EquivalenceConfig, world: int, norm: bool = False,
                       device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """One process, batches of ``world * batch_per_rank``: what DDP on ``world`` ranks must reproduce.

    The batches come from a DistributedSampler with one replica and the same
    seed: the same shuffled order of the whole data set that the ranks' shards
    are cut from, so batch ``s`` here is the union of the ranks' batches ``s``.
    """
    device, dtype = torch.device(device), getattr(torch, cfg.dtype)
    model = seeded_resnet(cfg.seed, width=cfg.width, norm=norm).to(device, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    batches = _sampled_batches(dataset, world * cfg.batch_per_rank, 0, 1, cfg.seed)
    for _ in range(cfg.steps):
        x, y = next(batches)
        loss = F.cross_entropy(model(x.to(device, dtype)), y.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return _cpu_state(model)


def ddp_training(dataset: Dataset, cfg: EquivalenceConfig, norm: bool = False, accumulate: int = 1,
                 eval_set: Dataset | None = None) -> dict[str, Any]:
    """``cfg.steps`` DDP steps on this rank's shard; with ``accumulate > 1``, micro-batches under ``no_sync``.

    Each rank starts from a *different* random model (seed + rank): DDP's
    constructor broadcasts rank 0's parameters, which is what makes the
    replicas equal.  Returns how far apart the replicas were before and after
    wrapping and after training, and rank 0's final state; with ``eval_set``,
    also the counts of :func:`evaluate_sharded` (exact and padded shards).
    """
    rank, world, device = init_from_env()
    dtype = getattr(torch, cfg.dtype)
    model = seeded_resnet(cfg.seed + rank, width=cfg.width, norm=norm).to(device, dtype)
    spread_before = replica_spread(list(model.parameters()))
    ddp = DDP(model, device_ids=ddp_device_ids(device))  # broadcasts rank 0's parameters and buffers
    spread_wrapped = replica_spread(list(model.parameters()))
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr, momentum=0.9)
    micro = cfg.batch_per_rank // accumulate
    batches = _sampled_batches(dataset, micro, rank, world, cfg.seed)
    for _ in range(cfg.steps):
        opt.zero_grad(set_to_none=True)
        for m in range(accumulate):
            x, y = next(batches)
            # all but the last micro-batch only accumulate local gradients: no communication
            with ddp.no_sync() if m < accumulate - 1 else nullcontext():
                loss = F.cross_entropy(ddp(x.to(device, dtype)), y.to(device)) / accumulate
                loss.backward()
        opt.step()
    out = {
        "spread_before": spread_before,
        "spread_wrapped": spread_wrapped,
        "spread_after": replica_spread(list(model.parameters())),
        "state": _cpu_state(model) if rank == 0 else None,
    }
    if eval_set is not None:
        out["counts"] = evaluate_sharded(model, eval_set, device)
        out["padded_counts"] = evaluate_sharded(model, eval_set, device, padded=True)
    return out


def check_equivalence(train: Dataset, cfg: EquivalenceConfig | None = None, eval_set: Dataset | None = None) -> dict[str, Any]:
    """Worker: the three DDP variants of the equivalence experiment (plain, ``no_sync`` accumulation, BatchNorm).

    With ``eval_set``, the plain variant's trained model is also evaluated in
    shards (see :func:`ddp_training`).
    """
    cfg = cfg or EquivalenceConfig()
    rank, world, device = init_from_env()
    if device.type == "cpu":
        torch.set_num_threads(_cpu_threads(world))
    return {
        "world": world,
        "device": describe(device),
        "backend": dist.get_backend(),
        "plain": ddp_training(train, cfg, eval_set=eval_set),
        "no_sync": ddp_training(train, cfg, accumulate=cfg.accumulate),
        "batchnorm": ddp_training(train, cfg, norm=True),
    }


# --------------------------------------------------------------------------- training and evaluation


@torch.no_grad()
def count_correct(model: nn.Module, dataset: Dataset, device: torch.device | str = "cpu", batch_size: int = 256) -> tuple[int, int]:
    """``(correct, total)`` predictions of ``model`` in eval mode on ``dataset``."""
    was_training = model.training
    model.eval()
    correct = total = 0
    dtype = next(model.parameters()).dtype
    for x, y in DataLoader(dataset, batch_size=batch_size):
        pred = model(x.to(device, dtype)).argmax(dim=1)
        correct += int((pred == y.to(device)).sum())
        total += len(y)
    model.train(was_training)
    return correct, total


def evaluate_sharded(model: nn.Module, dataset: Dataset, device: torch.device, padded: bool = False,
                     group: Any = None) -> tuple[int, int]:
    """Each rank counts on its shard, one all-reduce sums the counts: ``(correct, total)`` of the whole set.

    The shard is every ``world``-th sample starting at ``rank``.  With
    ``padded=True`` it comes from a DistributedSampler instead, which repeats
    samples so that every rank gets the same number, and the totals are off.
    """
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if padded:
        shard: Dataset = Subset(dataset, list(DistributedSampler(dataset, world, rank, shuffle=False)))
    else:
        shard = Subset(dataset, range(rank, len(dataset), world))  # type: ignore[arg-type]
    counts = torch.tensor(count_correct(model, shard, device), dtype=torch.int64, device=device)
    dist.all_reduce(counts, group=group)  # sum of (correct, total) over ranks
    correct, total = counts.tolist()
    return correct, total


@dataclass
class ChapterConfig:
    """Sizes of the chapter's real run, picked per device by :meth:`for_device`."""

    width: int = 8
    batch_per_rank: int = 32
    epochs: int = 2
    max_steps_per_epoch: int | None = 25
    eval_limit: int | None = 2000
    lr: float = 0.1
    seed: int = 0
    timeline_bucket_mb: float = 0.1
    timing_batch: int = 16
    timing_repeat: int = 5
    timing_rounds: int = 3
    equivalence: EquivalenceConfig = field(default_factory=EquivalenceConfig)

    @classmethod
    def for_device(cls, device: torch.device | str) -> "ChapterConfig":
        """Small on a CPU rank, the real ResNet-18 width on GPU ranks."""
        return cls(
            width=by_device(device, cpu=8, cuda=64),
            batch_per_rank=by_device(device, cpu=32, cuda=128),
            epochs=by_device(device, cpu=2, cuda=10),
            max_steps_per_epoch=by_device(device, cpu=25, cuda=None),
            eval_limit=by_device(device, cpu=2000, cuda=None),
            timeline_bucket_mb=by_device(device, cpu=0.1, cuda=5.0),
            timing_batch=by_device(device, cpu=16, cuda=128),
            timing_repeat=by_device(device, cpu=5, cuda=10),
        )


def _limit(dataset: Dataset, limit: int | None) -> Dataset:
    n = len(dataset)  # type: ignore[arg-type]
    return dataset if limit is None or limit >= n else Subset(dataset, range(limit))


def train_ddp(cfg: ChapterConfig, train: Dataset, test: Dataset) -> dict[str, Any]:
    """Train :func:`resnet18` with DDP; every rank returns its losses, epoch times and the summed test counts.

    Rank ``r`` of ``N`` trains on its shard of each epoch (a DistributedSampler
    reshuffled with ``set_epoch``); all ranks take the same number of steps,
    because a rank that stopped early would leave the others waiting in an
    all-reduce.  After each epoch, BatchNorm's running statistics (which every
    rank updated with its own batches) are copied from rank 0, and the test set
    is evaluated in shards.
    """
    rank, world, device = init_from_env()
    model = seeded_resnet(cfg.seed, width=cfg.width).to(device)
    ddp = DDP(model, device_ids=ddp_device_ids(device))
    opt = torch.optim.SGD(ddp.parameters(), lr=cfg.lr, momentum=0.9, weight_decay=5e-4)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=cfg.seed)
    loader = DataLoader(train, batch_size=cfg.batch_per_rank, sampler=sampler)
    steps = len(loader) if cfg.max_steps_per_epoch is None else min(len(loader), cfg.max_steps_per_epoch)
    # the learning rate decays linearly to 2% of cfg.lr over the run
    schedule = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.02, total_iters=cfg.epochs * steps)
    losses: list[torch.Tensor] = []
    epoch_seconds, accuracy, buffer_spread = [], [], []
    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)  # a new shuffle each epoch, the same one on every rank
        ddp.train()
        with Stopwatch(device) as sw:
            for _, (x, y) in zip(range(steps), loader):
                loss = F.cross_entropy(ddp(x.to(device)), y.to(device))
                opt.zero_grad(set_to_none=True)
                loss.backward()  # gradients are all-reduced in buckets during this call
                opt.step()
                schedule.step()
                losses.append(loss.detach())  # no .item(): that would wait for the device every step
        epoch_seconds.append(sw.seconds)
        buffers = list(model.buffers())
        buffer_spread.append(replica_spread(buffers))  # running stats differ between ranks ...
        for b in buffers:
            dist.broadcast(b, src=0)  # ... until rank 0's are copied to all
        correct, total = evaluate_sharded(model, test, device)
        accuracy.append(correct / total)
    padded_counts = evaluate_sharded(model, test, device, padded=True)
    return {
        "losses": torch.stack(losses).cpu(),
        "steps_per_epoch": steps,
        "epoch_seconds": epoch_seconds,
        "accuracy": accuracy,
        "counts": (correct, total),
        "padded_counts": padded_counts,
        "buffer_spread": buffer_spread,
        "params": sum(p.numel() for p in model.parameters()),
        "state": _cpu_state(model) if rank == 0 else None,
    }


# --------------------------------------------------------------------------- scaling


def scaling(cfg: ChapterConfig, train: Dataset, device: torch.device, sizes: Sequence[int]) -> dict[str, Any]:
    """Seconds per training step with ``n`` ranks for each ``n`` in ``sizes``, synchronised and under ``no_sync``.

    Weak scaling: every rank always takes ``cfg.timing_batch`` images per step
    and, on CPU ranks, the same number of threads (``cores // max(sizes)``),
    just as every rank of a GPU job owns one GPU.  Ranks ``0 .. n-1`` form a
    subgroup and time their steps while the others wait in an all-reduce;
    configurations alternate in rounds so that a change in the machine's load
    hits all of them.  Returns, per ``"n/mode"``, the step times of this rank,
    and how much CPU time this rank used while it waited.
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {n: (dist.new_group(list(range(n))) if n < world else None) for n in sizes}  # all ranks create all
    idle = torch.zeros(1, device=device)
    x = torch.stack([train[i][0] for i in range(cfg.timing_batch)]).to(device)
    y = torch.tensor([int(train[i][1]) for i in range(cfg.timing_batch)], device=device)
    threads = _cpu_threads(max(sizes)) if device.type == "cpu" else torch.get_num_threads()
    old_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    times: dict[str, list[float]] = {}
    waited = {"wall": 0.0, "cpu": 0.0}
    replicas: dict[int, tuple[DDP, torch.optim.Optimizer]] = {}
    for round_ in range(cfg.timing_rounds):
        for n in sizes:
            wall, cpu = time.perf_counter(), time.process_time()
            if rank < n:
                if n not in replicas:  # DDP construction is a collective of the subgroup
                    ddp = DDP(seeded_resnet(cfg.seed, width=cfg.width).to(device), device_ids=ddp_device_ids(device),
                              process_group=groups[n])
                    replicas[n] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.01))
                ddp, opt = replicas[n]
                for mode in ("synchronised", "no_sync"):
                    def step(ddp: DDP = ddp, opt: torch.optim.Optimizer = opt, mode: str = mode) -> None:
                        opt.zero_grad(set_to_none=True)
                        with ddp.no_sync() if mode == "no_sync" else nullcontext():
                            F.cross_entropy(ddp(x), y).backward()
                        opt.step()

                    # fixed counts, no calibration: every rank of the subgroup must take the same number of steps
                    m: Measurement = benchmark(step, device=device, warmup=2 if round_ == 0 else 1, number=1,
                                               repeat=cfg.timing_repeat)
                    times.setdefault(f"{n}/{mode}", []).extend(m.times)
                dist.all_reduce(idle)  # release the ranks that waited
            else:
                dist.all_reduce(idle)  # wait here while ranks 0 .. n-1 measure
                waited["wall"] += time.perf_counter() - wall  # host clocks: nothing runs on a device here
                waited["cpu"] += time.process_time() - cpu
    torch.set_num_threads(old_threads)
    return {"rank": rank, "times": times, "threads": threads, "waited": waited}


# --------------------------------------------------------------------------- everything, in one process group


def chapter_experiments(train: Dataset, test: Dataset, cfg: ChapterConfig | None = None) -> dict[str, Any]:
    """Worker: every experiment of the chapter in one process group (equivalence, training, timeline, scaling).

    ``train`` and ``test`` are the data sets the parent process loaded (tensors
    travel to spawned workers through shared memory); each rank reads only its
    shard of them.  ``cfg=None`` picks the sizes for this rank's device with
    :meth:`ChapterConfig.for_device`.  Rank 0's result carries the model
    states; every rank reports its own timings.
    """
    rank, world, device = init_from_env()
    cfg = cfg or ChapterConfig.for_device(device)
    if device.type == "cpu":
        torch.set_num_threads(_cpu_threads(world))
    with Stopwatch(device) as total:
        test = _limit(test, cfg.eval_limit)
        out: dict[str, Any] = {
            "rank": rank,
            "world": world,
            "backend": dist.get_backend(),
            "device": describe(device),
            "device_type": device.type,
            "threads": torch.get_num_threads(),
            "config": asdict(cfg),
        }
        eq = cfg.equivalence
        out["equivalence"] = {
            "plain": ddp_training(train, eq),
            "no_sync": ddp_training(train, eq, accumulate=eq.accumulate),
            "batchnorm": ddp_training(train, eq, norm=True),
        }
        out["training"] = train_ddp(cfg, train, test)
        model = seeded_resnet(cfg.seed, width=cfg.width).to(device)
        x = torch.stack([train[i][0] for i in range(cfg.timing_batch)]).to(device)
        y = torch.tensor([int(train[i][1]) for i in range(cfg.timing_batch)], device=device)
        out["timeline"] = bucket_timeline(model, (x, y), device, cfg.timeline_bucket_mb)
        sizes = sorted({1, *[2**k for k in range(1, world.bit_length()) if 2**k <= world], world})
        out["scaling"] = scaling(cfg, train, device, sizes)
    out["seconds_inside"] = total.seconds
    return out
