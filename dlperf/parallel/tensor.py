"""Tensor parallelism by hand: split the weight matrices of a layer over the ranks of a group.

A linear layer computes ``Y = X W^T + b`` with ``X`` of shape ``[T, d_in]`` (``T`` tokens) and
``W`` of shape ``[d_out, d_in]`` (PyTorch's ``nn.Linear`` layout).  With ``t`` ranks:

* **column-parallel** (:class:`ColumnParallelLinear`): rank ``r`` holds the rows ``W_r`` of ``W``
  for its ``d_out / t`` output features (and that slice of ``b``) and computes ``Y_r = X W_r^T + b_r``,
  a ``[T, d_out / t]`` slice of the output.  Either all-gather the slices (``gather_output=True``)
  or feed them, unchanged, to a row-parallel layer;
* **row-parallel** (:class:`RowParallelLinear`): rank ``r`` holds the columns of ``W`` for its
  ``d_in / t`` input features and computes the *partial sum* ``X_r W_{:,r}^T`` of shape
  ``[T, d_out]``; an all-reduce adds the ``t`` partial sums, and the bias is added once, after it.

Megatron-LM's MLP block (Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language
Models Using Model Parallelism", 2019) pairs them: column-parallel ``d -> 4d``, GELU on the
local slice (an elementwise function needs no communication), row-parallel ``4d -> d``.  Two
conjugate operators carry all the communication:

* ``f`` (:class:`CopyToParallel`): identity forward, all-reduce of the input gradient backward
  (each rank's column shard contributes a partial ``dX``);
* ``g`` (:class:`ReduceFromParallel`): all-reduce forward, identity backward.

So one block costs one all-reduce of ``T x d`` in the forward pass and one in the backward pass;
a transformer layer (attention + MLP) two of each.  The block's input ``X`` is *replicated* on
the ``t`` ranks (and so are the activations that LayerNorm and dropout keep around it).

**Sequence parallelism** (Korthikanti et al., "Reducing Activation Recomputation in Large
Transformer Models", 2022) shards those replicated activations along the token dimension
instead: ``f`` becomes an all-gather of the token shards (:class:`GatherTokens`, its backward a
reduce-scatter) and ``g`` a reduce-scatter (:class:`ReduceScatterTokens`, its backward an
all-gather).  A ring all-reduce *is* a reduce-scatter followed by an all-gather, so the bytes are
the same, but every rank keeps only ``T / t`` tokens of the block's input and output.  A
parameter applied to the token shard (the row-parallel bias here, LayerNorm in a transformer)
then receives only its shard's gradient: :func:`sync_sequence_parallel_grads` all-reduces those.

Every collective goes through one of this module's wrappers, which append a :class:`Call` to a
:class:`Traffic` record: the chapter compares those counts with the formula and with what
``torch.profiler`` saw (:func:`dlperf.trace.record`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from ..collectives import all_gather_into as _all_gather_into
from ..collectives import reduce_scatter_into as _reduce_scatter_into

__all__ = [
    "BLOCK_RUNS",
    "Call",
    "ColumnParallelLinear",
    "CopyToParallel",
    "GatherLastDim",
    "GatherTokens",
    "ReduceFromParallel",
    "ReduceScatterTokens",
    "RowParallelLinear",
    "SplitLastDim",
    "Traffic",
    "block_inputs",
    "chapter_worker",
    "compare",
    "dtensor_worker",
    "hand_worker",
    "layers_worker",
    "make_mlp",
    "parallel_mlp",
    "relative_error",
    "ring_bytes_sent",
    "shard_of",
    "sync_sequence_parallel_grads",
]


# --------------------------------------------------------------------------------------------
# Counting what the collectives move
# --------------------------------------------------------------------------------------------


def ring_bytes_sent(kind: str, nbytes: float, world: int) -> float:
    """Bytes one rank sends for a collective on a whole tensor of ``nbytes`` with a ring algorithm.

    All-reduce ``2(t-1)/t S``; all-gather and reduce-scatter ``(t-1)/t S`` (``S`` the gathered
    output, respectively the whole input).  These are the bandwidth-optimal amounts
    (the parameter-server chapter derives them).
    """
    factor = {"all-reduce": 2.0, "all-gather": 1.0, "reduce-scatter": 1.0}
    if kind not in factor:
        raise ValueError(f"kind is one of {sorted(factor)}, got {kind!r}")
    return factor[kind] * (world - 1) / world * nbytes


@dataclass(frozen=True)
class Call:
    """One collective: its kind, the pass it ran in, and the elements of the whole tensor."""

    kind: str          # "all-reduce", "all-gather" or "reduce-scatter"
    phase: str         # "forward", "backward" or "grad sync"
    elements: int      # of the whole tensor: an all-gather's output, a reduce-scatter's input
    element_size: int

    @property
    def nbytes(self) -> int:
        return self.elements * self.element_size


@dataclass
class Traffic:
    """The collectives a rank called through this module's wrappers, in order."""

    calls: list[Call] = field(default_factory=list)

    def add(self, kind: str, phase: str, whole: torch.Tensor) -> None:
        self.calls.append(Call(kind, phase, whole.numel(), whole.element_size()))

    def select(self, kind: str | None = None, phase: str | None = None) -> list[Call]:
        return [c for c in self.calls if (kind is None or c.kind == kind) and (phase is None or c.phase == phase)]

    def nbytes(self, kind: str | None = None, phase: str | None = None) -> int:
        """Bytes of the whole tensors of the selected calls (the ``S`` of each)."""
        return sum(c.nbytes for c in self.select(kind, phase))

    def sent(self, world: int, phase: str | None = None) -> float:
        """Bytes one rank sends for the selected calls with ring algorithms (:func:`ring_bytes_sent`)."""
        return sum(ring_bytes_sent(c.kind, c.nbytes, world) for c in self.select(phase=phase))

    def clear(self) -> None:
        self.calls.clear()


def _world(group: Any) -> tuple[int, int]:
    return dist.get_rank(group), dist.get_world_size(group)


def _all_reduce(x: torch.Tensor, traffic: Traffic | None, phase: str, group: Any) -> torch.Tensor:
    x = x.contiguous().clone()
    if traffic is not None:
        traffic.add("all-reduce", phase, x)
    dist.all_reduce(x, group=group)
    return x


def _all_gather(x: torch.Tensor, dim: int, traffic: Traffic | None, phase: str, group: Any) -> torch.Tensor:
    """Concatenate every rank's ``x`` along ``dim`` (one all-gather along dim 0, :func:`dlperf.collectives.all_gather_into`)."""
    _, world = _world(group)
    moved = x.movedim(dim, 0).contiguous()
    out = moved.new_empty((world * moved.shape[0], *moved.shape[1:]))
    if traffic is not None:
        traffic.add("all-gather", phase, out)
    _all_gather_into(out, moved, group=group)
    return out.movedim(0, dim).contiguous()


def _reduce_scatter(x: torch.Tensor, dim: int, traffic: Traffic | None, phase: str, group: Any) -> torch.Tensor:
    """Sum ``x`` over the ranks and keep this rank's ``1/t`` slice of ``dim``."""
    _, world = _world(group)
    moved = x.movedim(dim, 0).contiguous()
    if moved.shape[0] % world:
        raise ValueError(f"dimension {dim} of size {moved.shape[0]} does not split over {world} ranks")
    out = moved.new_empty((moved.shape[0] // world, *moved.shape[1:]))
    if traffic is not None:
        traffic.add("reduce-scatter", phase, moved)
    _reduce_scatter_into(out, moved, group=group)
    return out.movedim(0, dim).contiguous()


def _split(x: torch.Tensor, dim: int, group: Any) -> torch.Tensor:
    rank, world = _world(group)
    return x.chunk(world, dim=dim)[rank].contiguous()


# --------------------------------------------------------------------------------------------
# The conjugate operators, as autograd functions
# --------------------------------------------------------------------------------------------


class CopyToParallel(torch.autograd.Function):
    """Megatron's ``f``: identity forward; backward, all-reduce the gradient (partial ``dX`` per rank)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, traffic: Traffic | None, group: Any) -> torch.Tensor:
        ctx.traffic, ctx.group = traffic, group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _all_reduce(grad, ctx.traffic, "backward", ctx.group), None, None


class ReduceFromParallel(torch.autograd.Function):
    """Megatron's ``g``: all-reduce forward (sum the partial outputs); backward, identity."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, traffic: Traffic | None, group: Any) -> torch.Tensor:
        return _all_reduce(x, traffic, "forward", group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return grad, None, None


class GatherLastDim(torch.autograd.Function):
    """All-gather the column shards of an output; backward, keep this rank's slice of the gradient.

    The slice (not a reduce-scatter) is right when what follows is computed identically on every
    rank, so that every rank holds the same gradient of the gathered output: Megatron's
    ``gather_from_tensor_model_parallel_region``.
    """

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, traffic: Traffic | None, group: Any) -> torch.Tensor:
        ctx.group = group
        return _all_gather(x, -1, traffic, "forward", group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _split(grad, -1, ctx.group), None, None


class SplitLastDim(torch.autograd.Function):
    """Keep this rank's slice of the features (no communication); backward, all-gather the gradient."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, traffic: Traffic | None, group: Any) -> torch.Tensor:
        ctx.traffic, ctx.group = traffic, group
        return _split(x, -1, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _all_gather(grad, -1, ctx.traffic, "backward", ctx.group), None, None


class GatherTokens(torch.autograd.Function):
    """Sequence parallelism's ``f``: all-gather the token shards (dim 0); backward, reduce-scatter."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, traffic: Traffic | None, group: Any) -> torch.Tensor:
        ctx.traffic, ctx.group = traffic, group
        return _all_gather(x, 0, traffic, "forward", group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _reduce_scatter(grad, 0, ctx.traffic, "backward", ctx.group), None, None


class ReduceScatterTokens(torch.autograd.Function):
    """Sequence parallelism's ``g``: reduce-scatter the partial sums over tokens (dim 0); backward, all-gather."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, traffic: Traffic | None, group: Any) -> torch.Tensor:
        ctx.traffic, ctx.group = traffic, group
        return _reduce_scatter(x, 0, traffic, "forward", group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return _all_gather(grad, 0, ctx.traffic, "backward", ctx.group), None, None


# --------------------------------------------------------------------------------------------
# The layers
# --------------------------------------------------------------------------------------------


def _rows(n: int, group: Any) -> slice:
    rank, world = _world(group)
    if n % world:
        raise ValueError(f"{n} features do not split evenly over {world} ranks")
    return slice(rank * n // world, (rank + 1) * n // world)


class ColumnParallelLinear(nn.Module):
    """This rank's output features of ``full``: ``Y_r = X W_r^T + b_r``, ``W_r`` rows of ``W``.

    The input passes through ``f`` (:class:`CopyToParallel`), or, with ``sequence_parallel``,
    through an all-gather of the token shards (:class:`GatherTokens`).  ``gather_output=True``
    all-gathers the ``t`` slices into the full ``[T, d_out]`` output.
    """

    def __init__(self, full: nn.Linear, *, gather_output: bool = False, sequence_parallel: bool = False,
                 traffic: Traffic | None = None, group: Any = None):
        super().__init__()
        rows = _rows(full.out_features, group)
        self.weight = nn.Parameter(full.weight.detach()[rows].clone())
        self.bias = nn.Parameter(full.bias.detach()[rows].clone()) if full.bias is not None else None
        self.gather_output, self.sequence_parallel = gather_output, sequence_parallel
        self.traffic, self.group = traffic, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.sequence_parallel:
            x = GatherTokens.apply(x, self.traffic, self.group)
        else:
            x = CopyToParallel.apply(x, self.traffic, self.group)
        y = F.linear(x, self.weight, self.bias)
        return GatherLastDim.apply(y, self.traffic, self.group) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """This rank's input features of ``full``: the partial sum ``X_r W_{:,r}^T``, summed over the ranks.

    ``input_is_parallel=True`` takes ``X_r`` (the output of a column-parallel layer) as it is;
    otherwise the full ``X`` is sliced here.  The sum is an all-reduce (``g``,
    :class:`ReduceFromParallel`), or, with ``sequence_parallel``, a reduce-scatter over tokens.
    The bias is added once, after the sum: added on every rank before it, it would count ``t``
    times.  Under sequence parallelism the bias meets only this rank's tokens and is marked
    ``bias.sequence_parallel = True`` (see :func:`sync_sequence_parallel_grads`).
    """

    def __init__(self, full: nn.Linear, *, input_is_parallel: bool = True, sequence_parallel: bool = False,
                 traffic: Traffic | None = None, group: Any = None):
        super().__init__()
        cols = _rows(full.in_features, group)
        self.weight = nn.Parameter(full.weight.detach()[:, cols].clone())
        self.bias = nn.Parameter(full.bias.detach().clone()) if full.bias is not None else None
        if self.bias is not None:
            self.bias.sequence_parallel = sequence_parallel  # type: ignore[attr-defined]
        self.input_is_parallel, self.sequence_parallel = input_is_parallel, sequence_parallel
        self.traffic, self.group = traffic, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_parallel:
            x = SplitLastDim.apply(x, self.traffic, self.group)
        partial = F.linear(x, self.weight)
        if self.sequence_parallel:
            y = ReduceScatterTokens.apply(partial, self.traffic, self.group)
        else:
            y = ReduceFromParallel.apply(partial, self.traffic, self.group)
        return y + self.bias if self.bias is not None else y


def sync_sequence_parallel_grads(module: nn.Module, traffic: Traffic | None = None, group: Any = None) -> int:
    """All-reduce the gradients of parameters marked ``sequence_parallel``; returns how many.

    Such a parameter is replicated but met only this rank's tokens, so its gradient is this
    shard's part of the sum over all tokens.
    """
    count = 0
    for p in module.parameters():
        if getattr(p, "sequence_parallel", False) and p.grad is not None:
            p.grad = _all_reduce(p.grad, traffic, "grad sync", group)
            count += 1
    return count


def make_mlp(hidden: int, ffn: int, seed: int = 0) -> nn.Sequential:
    """The unsharded block: ``Linear(hidden, ffn)``, GELU, ``Linear(ffn, hidden)``, from ``seed``."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))


def parallel_mlp(full: nn.Sequential, *, sequence_parallel: bool = False, traffic: Traffic | None = None,
                 group: Any = None) -> nn.Sequential:
    """Megatron's MLP from the unsharded ``full`` (:func:`make_mlp`): column-parallel, GELU, row-parallel."""
    first, act, second = full
    return nn.Sequential(
        ColumnParallelLinear(first, sequence_parallel=sequence_parallel, traffic=traffic, group=group),
        act,
        RowParallelLinear(second, sequence_parallel=sequence_parallel, traffic=traffic, group=group),
    )


def block_inputs(tokens: int, hidden: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's input ``X`` (``[tokens, hidden]``) and a fixed upstream gradient ``G``: loss ``sum(Y * G)``."""
    g = torch.Generator().manual_seed(10_007 + seed)
    return torch.randn(tokens, hidden, generator=g), torch.randn(tokens, hidden, generator=g)


# --------------------------------------------------------------------------------------------
# Workers (run inside a process group: dlperf.launch.launch("dlperf.parallel.tensor:...", t))
# --------------------------------------------------------------------------------------------


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _cpu(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().cpu().clone()


def hand_worker(hidden: int, ffn: int, tokens: int, seed: int = 0, sequence_parallel: bool = False,
                profile: bool = True, timed: bool = False) -> dict[str, Any]:
    """One rank of the hand-written MLP block: forward, backward, and what each sent.

    Returns this rank's output (its token shard under sequence parallelism), the input gradient
    (idem), its parameter shards' gradients, the :class:`Traffic` record of one forward and
    backward pass, and, with ``profile``, the process-group operations ``torch.profiler`` saw in
    a second pass (:meth:`dlperf.trace.Trace.collectives`): two counts from two sources.

    With ``timed``, also ``"timing"``: :func:`dlperf.benchmark_interleaved` of a whole step
    (forward and backward, with its collectives) and of the same collectives alone, on tensors of
    the same sizes, in alternating rounds.  The numbers of calls are fixed, so that every rank
    calls the collectives equally often.
    """
    from ..bench import benchmark_interleaved
    from ..trace import record

    rank, world = dist.get_rank(), dist.get_world_size()
    device = _device()
    traffic = Traffic()
    block = parallel_mlp(make_mlp(hidden, ffn, seed), sequence_parallel=sequence_parallel, traffic=traffic).to(device)
    x_full, g_full = (t.to(device) for t in block_inputs(tokens, hidden, seed))
    if sequence_parallel:   # each rank holds its token shard of X (and of the gradient that arrives from above)
        x_full, g_full = x_full.chunk(world)[rank], g_full.chunk(world)[rank]
    x = x_full.clone().requires_grad_(True)

    def step() -> torch.Tensor:
        block.zero_grad(set_to_none=True)
        x.grad = None
        y = block(x)
        (y * g_full).sum().backward()
        if sequence_parallel:
            sync_sequence_parallel_grads(block, traffic)
        return y

    y = step()
    out: dict[str, Any] = {
        "rank": rank, "world": world, "sequence_parallel": sequence_parallel,
        "output": _cpu(y), "input_grad": _cpu(x.grad),
        "grads": {name: _cpu(p.grad) for name, p in block.named_parameters()},
        "traffic": list(traffic.calls),
    }
    if profile:
        out["profiled"] = record(step, warmup=0, shapes=True).collectives()
    if timed:
        first = out["traffic"]                     # one step's collectives (the record grows with every step)
        buffers = [torch.zeros(c.elements, device=device) for c in first]
        kinds = [c.kind for c in first]

        def collectives_alone() -> None:
            for kind, buf in zip(kinds, buffers):
                if kind == "all-reduce":
                    dist.all_reduce(buf)
                elif kind == "all-gather":
                    _all_gather_into(buf, buf.chunk(world)[rank].clone())
                else:
                    _reduce_scatter_into(buf.chunk(world)[rank].clone(), buf)

        out["timing"] = benchmark_interleaved({"step": step, "collectives alone": collectives_alone},
                                              rounds=3, repeat=5, number=10, warmup=2, device=device)
    return out


def dtensor_worker(hidden: int, ffn: int, tokens: int, seed: int = 0, sequence_parallel: bool = False) -> dict[str, Any]:
    """The same block with PyTorch's API: ``parallelize_module`` with ``ColwiseParallel``/``RowwiseParallel``.

    With ``sequence_parallel`` the first layer takes token shards (``input_layouts=Shard(0)``) and
    the second returns them (``output_layouts=Shard(0)``).  The collectives are counted with
    ``torch.distributed.tensor.debug.CommDebugMode``.  Gradients come back whole
    (``DTensor.full_tensor()``).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    rank, world = dist.get_rank(), dist.get_world_size()
    device = _device()
    mesh = init_device_mesh(device.type, (world,))
    block = make_mlp(hidden, ffn, seed).to(device)
    if sequence_parallel:
        plan = {"0": ColwiseParallel(input_layouts=Shard(0)), "2": RowwiseParallel(output_layouts=Shard(0))}
    else:
        plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
    parallelize_module(block, mesh, plan)
    x_full, g_full = (t.to(device) for t in block_inputs(tokens, hidden, seed))
    if sequence_parallel:
        x_full, g_full = x_full.chunk(world)[rank], g_full.chunk(world)[rank]
    x = x_full.clone().requires_grad_(True)
    comm = CommDebugMode()
    with comm:
        y = block(x)   # an AsyncCollectiveTensor: a plain tensor whose all-reduce may still be in flight
        forward_counts = {str(k).split(".")[-1]: v for k, v in comm.get_comm_counts().items()}
        (y * g_full).sum().backward()
    total_counts = {str(k).split(".")[-1]: v for k, v in comm.get_comm_counts().items()}
    return {
        "rank": rank, "world": world, "sequence_parallel": sequence_parallel,
        "output": _cpu(y), "input_grad": _cpu(x.grad),
        "output_type": type(y).__name__,
        "local_weight_shape": tuple(block[0].weight.to_local().shape),
        "weight_type": type(block[0].weight).__name__,
        "grads": {name: _cpu(p.grad.full_tensor()) for name, p in block.named_parameters()},
        "bias_grad_placements": str(block[2].bias.grad.placements),
        "forward_counts": forward_counts,
        "backward_counts": {k: total_counts.get(k, 0) - forward_counts.get(k, 0) for k in total_counts},
    }


def layers_worker(hidden: int, ffn: int, tokens: int, seed: int = 0) -> dict[str, Any]:
    """Each layer on its own: column-parallel with ``gather_output``, row-parallel from the full input."""
    device = _device()
    first, _, second = make_mlp(hidden, ffn, seed).to(device)
    x, _ = (t.to(device) for t in block_inputs(tokens, hidden, seed))
    traffic = Traffic()
    col = ColumnParallelLinear(first, gather_output=True, traffic=traffic)
    y_col = col(x)
    h = torch.randn(tokens, ffn, generator=torch.Generator().manual_seed(seed + 1)).to(device)
    row = RowParallelLinear(second, input_is_parallel=False, traffic=traffic)
    y_row = row(h)
    return {"column": _cpu(y_col), "row": _cpu(y_row), "row_input": _cpu(h), "traffic": list(traffic.calls)}


def chapter_worker(hidden: int, ffn: int, tokens: int, seed: int = 0) -> dict[str, Any]:
    """Everything the chapter runs on the ranks, in one process group (processes start once)."""
    return {
        "layers": layers_worker(hidden, ffn, tokens, seed),
        "tp": hand_worker(hidden, ffn, tokens, seed, sequence_parallel=False, timed=True),
        "sp": hand_worker(hidden, ffn, tokens, seed, sequence_parallel=True),
        "dtensor": dtensor_worker(hidden, ffn, tokens, seed, sequence_parallel=False),
        "dtensor_sp": dtensor_worker(hidden, ffn, tokens, seed, sequence_parallel=True),
    }


# --------------------------------------------------------------------------------------------
# Against the unsharded block (the chapter's comparison)
# --------------------------------------------------------------------------------------------

#: The runs of :func:`chapter_worker` on the MLP block, by key, as the chapter names them.
BLOCK_RUNS = {"tp": "by hand", "sp": "by hand, sequence-parallel", "dtensor": "parallelize_module",
              "dtensor_sp": "parallelize_module, sequence-parallel"}


def relative_error(pairs: Any) -> float:
    """The largest difference between ``got`` and ``want`` over ``(got, want)`` pairs, relative to the largest
    ``|want|``."""
    return max(((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item() for got, want in pairs)


def shard_of(name: str, grad: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """Rank ``rank``'s part of a full gradient of :func:`make_mlp` in the hand-written layout: rows of
    ``W_1`` and ``b_1`` (column-parallel), columns of ``W_2`` (row-parallel), all of ``b_2``."""
    def mine(n: int) -> slice:
        return slice(rank * n // world, (rank + 1) * n // world)

    if name in ("0.weight", "0.bias"):
        return grad[mine(grad.shape[0])]
    if name == "2.weight":
        return grad[:, mine(grad.shape[1])]
    return grad


def compare(ranks: list[dict[str, Any]], hidden: int, ffn: int, tokens: int,
            seed: int = 0) -> tuple[dict[str, tuple[float, float, float]], dict[str, float]]:
    """:func:`chapter_worker`'s results against the unsharded block computed here, in one process.

    Returns, per run of :data:`BLOCK_RUNS`, the relative errors of the output, the input gradient and
    the parameter gradients (sequence-parallel outputs are concatenated over the ranks; replicated
    ones must be equal on every rank; DTensor gradients come back whole), and each layer alone's error.
    """
    world = len(ranks)
    full = make_mlp(hidden, ffn, seed)
    x, g = block_inputs(tokens, hidden, seed)
    x.requires_grad_(True)
    y = full(x)
    (y * g).sum().backward()
    full_grads = {name: p.grad for name, p in full.named_parameters()}
    errors = {}
    for key in BLOCK_RUNS:
        runs = [r[key] for r in ranks]
        if key.endswith("sp"):
            out = torch.cat([r["output"] for r in runs])
            dx = torch.cat([r["input_grad"] for r in runs])
        else:
            out, dx = runs[0]["output"], runs[0]["input_grad"]
            if not all(torch.equal(r["output"], out) for r in runs):
                raise AssertionError(f"{key}: the replicated output differs between ranks")
        if key.startswith("dtensor"):
            grads = [(r["grads"][n], full_grads[n]) for r in runs for n in full_grads]
        else:
            grads = [(r["grads"][n], shard_of(n, full_grads[n], k, world))
                     for k, r in enumerate(runs) for n in full_grads]
        errors[key] = (relative_error([(out, y.detach())]), relative_error([(dx, x.grad)]),
                       relative_error(grads))
    with torch.no_grad():
        layers = {"column": relative_error([(r["layers"]["column"], full[0](x)) for r in ranks]),
                  "row": relative_error([(r["layers"]["row"], full[2](r["layers"]["row_input"])) for r in ranks])}
    return errors, layers
