"""Training-memory accounting: the formulas, and measurements of real models that check them.

Where the memory of a training step goes:

* **model state**, which lives for the whole run: the parameters, their
  gradients and the optimizer's state (for mixed precision also an fp32
  *master* copy of the parameters, which we count with the optimizer because
  only the optimizer reads it);
* **activations**, which live from the forward pass until the backward pass
  has used them: the tensors autograd saves for backward.

Formulas (bytes per parameter; ``P`` parameters):

============  =====================  ============================================
precision     parameters + grads     optimizer (master copy + per-element states)
============  =====================  ============================================
``fp32``      4 + 4                  SGD 0, SGD with momentum 4, Adam 8
mixed         2 + 2 (bf16 or fp16)   master 4 + (SGD 0, momentum 4, Adam 8)
============  =====================  ============================================

so Adam needs ``16P`` bytes in fp32 *and* in mixed precision with fp32 master
weights (2 + 2 + 12), the accounting of the ZeRO paper (Rajbhandari et al.,
"ZeRO: Memory Optimizations Toward Training Trillion Parameter Models", SC 2020).
With data parallelism over ``N`` ranks, ZeRO stage 1 shards the optimizer
state, stage 2 also the gradients, stage 3 also the parameters
(:func:`model_state_bytes`; :func:`zero_memory_bytes` for mixed-precision
Adam: ``16P``, ``4P + 12P/N``, ``2P + 14P/N``, ``16P/N``).  Activations come on
top and are not sharded by ZeRO.

Measurements, CPU or GPU alike (no allocator statistics needed):

* :func:`measure_state_bytes` sums the storages of a model's parameters,
  ``.grad``\\ s and its optimizer's state tensors (call it after one step: Adam
  creates its state lazily);
* :class:`SavedTensors` / :func:`saved_tensor_bytes` count the bytes autograd
  saves for backward, with :func:`torch.autograd.graph.saved_tensors_hooks`,
  each storage once;
* :func:`reserved_growth` (CUDA only) follows PyTorch's caching allocator while a step runs again and
  again: how far its reserved memory grows, and the peak of live tensors;
* :class:`MasterWeightOptimizer` is a small, real mixed-precision optimizer
  (low-precision model, fp32 master copy inside the optimizer), so that the
  mixed-precision formula can be checked against real tensors too.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import torch

__all__ = [
    "OPTIMIZERS",
    "PRECISIONS",
    "MasterWeightOptimizer",
    "MemoryBreakdown",
    "SavedTensors",
    "bytes_per_param",
    "gpt_layer_activation_bytes",
    "measure_state_bytes",
    "model_state_bytes",
    "reserved_growth",
    "saved_tensor_bytes",
    "zero_communication_bytes",
    "zero_memory_bytes",
]

#: Per-element fp32 state tensors each optimizer keeps (``torch.optim`` names in brackets).
OPTIMIZERS = {
    "sgd": 0,  # plain SGD keeps nothing
    "sgd_momentum": 1,  # [momentum_buffer]
    "adam": 2,  # [exp_avg, exp_avg_sq]; AdamW the same
}
_ALIASES = {"adamw": "adam", "momentum": "sgd_momentum", "sgd+momentum": "sgd_momentum"}

#: Bytes of one parameter (and of its gradient) as the model holds it, and whether an fp32 master copy exists.
PRECISIONS = {
    "fp32": (4, False),
    "mixed": (2, True),  # bf16 or fp16 model, fp32 master weights in the optimizer
    "bf16": (2, True),
    "fp16": (2, True),
}


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes by kind.  ``optimizer`` includes an fp32 master copy where there is one.

    ``other`` is what fits none of the formulas' categories: per-tensor scalar
    optimizer state (Adam's ``step`` counters) and the model's buffers.
    """

    params: float = 0.0
    grads: float = 0.0
    optimizer: float = 0.0
    activations: float = 0.0
    other: float = 0.0

    @property
    def model_state(self) -> float:
        """Parameters + gradients + optimizer state: what ZeRO shards."""
        return self.params + self.grads + self.optimizer

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer + self.activations + self.other

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def scaled(self, factor: float) -> "MemoryBreakdown":
        """Every field multiplied by ``factor`` (bytes per parameter times ``P`` = bytes)."""
        return MemoryBreakdown(**{k: v * factor for k, v in self.as_dict().items()})

    def __add__(self, other: "MemoryBreakdown") -> "MemoryBreakdown":
        return MemoryBreakdown(**{k: v + getattr(other, k) for k, v in self.as_dict().items()})

    def __str__(self) -> str:
        parts = [f"{k} {v / 1e9:.3g} GB" for k, v in self.as_dict().items() if v]
        return f"{self.total / 1e9:.3g} GB ({', '.join(parts) or 'nothing'})"


def _optimizer_key(optimizer: str) -> str:
    key = _ALIASES.get(optimizer.lower(), optimizer.lower())
    if key not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {optimizer!r}; one of {sorted(OPTIMIZERS)} (or {sorted(_ALIASES)})")
    return key


def _precision(precision: str) -> tuple[int, bool]:
    if precision.lower() not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; one of {sorted(PRECISIONS)}")
    return PRECISIONS[precision.lower()]


def bytes_per_param(optimizer: str = "adam", precision: str = "mixed") -> MemoryBreakdown:
    """Bytes per parameter of the model state, by kind.

    >>> bytes_per_param("adam", "mixed").model_state, bytes_per_param("adam", "fp32").model_state
    (16.0, 16.0)
    >>> bytes_per_param("sgd", "mixed")
    MemoryBreakdown(params=2.0, grads=2.0, optimizer=4.0, activations=0.0, other=0.0)
    """
    slots = OPTIMIZERS[_optimizer_key(optimizer)]
    width, master = _precision(precision)
    return MemoryBreakdown(params=float(width), grads=float(width), optimizer=float(4 * master + 4 * slots))


def _check_stage(stage: int, n: int) -> None:
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage is 0, 1, 2 or 3, got {stage}")
    if n < 1:
        raise ValueError(f"the data-parallel degree must be at least 1, got {n}")


def model_state_bytes(
    num_params: float,
    *,
    optimizer: str = "adam",
    precision: str = "mixed",
    stage: int = 0,
    n: int = 1,
    activations: float = 0.0,
) -> MemoryBreakdown:
    """Bytes per rank of the model state under ZeRO-``stage`` with data-parallel degree ``n``.

    Stage 0 (plain data parallelism) replicates everything; stage 1 divides the
    optimizer state (with the master copy) by ``n``, stage 2 also the
    gradients, stage 3 also the parameters.  ``activations`` (bytes per rank)
    are added as they are: ZeRO does not shard them.
    """
    _check_stage(stage, n)
    per = bytes_per_param(optimizer, precision)
    P = float(num_params)
    return MemoryBreakdown(
        params=per.params * P / (n if stage >= 3 else 1),
        grads=per.grads * P / (n if stage >= 2 else 1),
        optimizer=per.optimizer * P / (n if stage >= 1 else 1),
        activations=float(activations),
    )


def zero_memory_bytes(num_params: int, n: int, stage: int) -> float:
    """Bytes per rank of mixed-precision Adam model state for ``P = num_params`` under ZeRO.

    bf16 params ``2P`` + bf16 grads ``2P`` + fp32 master copy and two moments
    ``12P`` = ``16P`` (stage 0, plain data parallelism).  With ``N = n`` ranks:
    ZeRO-1 shards the optimizer state, ``4P + 12P/N``; ZeRO-2 the gradients
    too, ``2P + 14P/N``; ZeRO-3 everything, ``16P/N``.  Activations come on top.
    """
    return model_state_bytes(num_params, optimizer="adam", precision="mixed", stage=stage, n=n).model_state


def zero_communication_bytes(num_params: float, n: int, stage: int, *, precision: str = "mixed") -> float:
    """Bytes each rank sends per training step with ring collectives (bandwidth-optimal).

    Gradients and parameters travel in the model's precision (2 bytes mixed, 4
    fp32), ``S`` bytes each.  Stage 0: one allreduce of the gradients,
    ``2(N-1)/N S``.  Stages 1 and 2: a reduce-scatter of the gradients (each
    rank receives the sum of its shard) and, after each rank updated its shard,
    an all-gather of the parameters: the same ``2(N-1)/N S``.  Stage 3: the
    parameters are all-gathered twice (before the forward and again before the
    backward, since they were freed in between) and the gradients
    reduce-scattered, ``3(N-1)/N S``, 1.5 times as much (ZeRO paper, section 7).
    """
    _check_stage(stage, n)
    width, _ = _precision(precision)
    S = width * float(num_params)
    collectives = 3 if stage == 3 else 2
    return collectives * (n - 1) / n * S


def gpt_layer_activation_bytes(
    seq_len: int, batch: int, hidden: int, heads: int, *, recompute: str = "none"
) -> float:
    """Activation bytes one GPT-style transformer layer saves for backward (16-bit activations).

    From Korthikanti et al., "Reducing Activation Recomputation in Large
    Transformer Models" (2022), without tensor or sequence parallelism:
    ``s b h (34 + 5 a s / h)`` with ``recompute="none"`` (the ``5 a s / h``
    term is the attention's ``a`` score matrices of ``s x s``: scores, softmax,
    dropout mask); ``34 s b h`` with ``"selective"`` (the attention core is
    recomputed, which is also what fused attention kernels do); ``2 s b h`` with
    ``"full"`` (only the layer's input is kept, everything else recomputed).
    An estimate for the architecture of the paper (GPT with dropout and a 4h
    MLP), not an exact count for every model.
    """
    sbh = float(seq_len) * batch * hidden
    if recompute == "none":
        return sbh * (34 + 5 * heads * seq_len / hidden)
    if recompute == "selective":
        return 34 * sbh
    if recompute == "full":
        return 2 * sbh
    raise ValueError(f"recompute is 'none', 'selective' or 'full', got {recompute!r}")


# --------------------------------------------------------------------------------------------
# Measuring real tensors
# --------------------------------------------------------------------------------------------


def _storage_key(t: torch.Tensor) -> tuple[Any, int]:
    """(identity, bytes) of the memory that keeps ``t`` alive: its storage."""
    try:
        st = t.untyped_storage()
        nbytes = st.nbytes()
        ptr = st.data_ptr()
        if ptr == 0:  # an empty storage, or a tensor without real memory (meta)
            return ("id", id(st)), nbytes
        return (str(t.device), ptr), nbytes
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, some tensor subclasses
        return ("id", id(t)), t.numel() * t.element_size()


class _Counter:
    """Sums storages, each once across everything this counter has seen."""

    def __init__(self) -> None:
        self.seen: set[Any] = set()

    def add(self, tensors: Iterable[torch.Tensor | None]) -> int:
        total = 0
        for t in tensors:
            if t is None or not isinstance(t, torch.Tensor):
                continue
            key, nbytes = _storage_key(t)
            if key not in self.seen:
                self.seen.add(key)
                total += nbytes
        return total


def measure_state_bytes(model: torch.nn.Module, optimizer: Any = None) -> MemoryBreakdown:
    """Bytes of the model state that really exists now, by kind.

    ``params``: storages of ``model.parameters()``; ``grads``: their ``.grad``;
    ``optimizer``: the optimizer's parameters that are not the model's (master
    copies, see :class:`MasterWeightOptimizer`) and every state tensor with as
    many elements as its parameter (momentum, Adam's moments); ``other``: the
    remaining state tensors (Adam's scalar ``step``) and the model's buffers.
    Each storage counts once.  Call it after one optimizer step: PyTorch's
    optimizers create their state at the first step.  Memory freed but cached
    by an allocator, temporary buffers and activations are not included.
    """
    counter = _Counter()
    params = [p for p in model.parameters()]
    n_params = counter.add(params)
    n_grads = counter.add(p.grad for p in params)
    n_opt = n_other = 0
    if optimizer is not None:
        inner = getattr(optimizer, "optimizer", optimizer)
        model_ids = {id(p) for p in params}
        opt_params = [p for g in inner.param_groups for p in g["params"]]
        n_opt += counter.add(p for p in opt_params if id(p) not in model_ids)
        for p in opt_params:
            for name, value in inner.state.get(p, {}).items():
                if isinstance(value, torch.Tensor):
                    if name != "step" and value.shape == p.shape:
                        n_opt += counter.add([value])
                    else:
                        n_other += counter.add([value])
    n_other += counter.add(model.buffers())
    return MemoryBreakdown(params=n_params, grads=n_grads, optimizer=n_opt, other=n_other)


class MasterWeightOptimizer:
    """Mixed precision with fp32 master weights: the model in bf16/fp16, the optimizer in fp32.

    The optimizer (``optimizer_cls(masters, **kwargs)``) owns an fp32 copy of
    every parameter.  :meth:`step` copies the model's low-precision gradients
    into fp32 gradients of the copies, steps, writes the updated copies back
    into the model (rounded to its precision) and frees the fp32 gradients, so
    that between steps the state is exactly the ``2 + 2 + 4 + optimizer``
    bytes per parameter of the formula.  (Real implementations convert the
    gradients in chunks to keep the transient fp32 gradients small.)
    """

    def __init__(self, params: Iterable[torch.nn.Parameter], optimizer_cls: Callable[..., torch.optim.Optimizer],
                 **kwargs: Any):
        self.model_params = [p for p in params if p.requires_grad]
        self.master_params = [p.detach().to(torch.float32, copy=True).requires_grad_(True) for p in self.model_params]
        self.optimizer = optimizer_cls(self.master_params, **kwargs)

    @torch.no_grad()
    def step(self) -> None:
        for p, m in zip(self.model_params, self.master_params):
            m.grad = None if p.grad is None else p.grad.to(torch.float32)
        self.optimizer.step()
        for p, m in zip(self.model_params, self.master_params):
            p.copy_(m)
            m.grad = None

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.model_params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()


class SavedTensors:
    """Count what autograd saves for backward inside a ``with`` block.

    >>> lin = torch.nn.Linear(3, 5)
    >>> with SavedTensors(exclude=lin.parameters()) as saved:
    ...     y = torch.relu(lin(torch.ones(2, 3)))
    >>> saved.nbytes  # the input (2x3) and relu's output (2x5), float32
    64

    Every tensor an operation saves passes through a pack hook
    (:func:`torch.autograd.graph.saved_tensors_hooks`).  ``nbytes`` counts each
    storage once (a ReLU's output that the next linear layer saves as its input
    is one tensor in memory), and skips the storages of ``exclude`` (pass the
    parameters: they are model state, not activations).  ``raw_nbytes`` sums
    every saved tensor without deduplication; ``count`` is the number of saves.
    Hooks registered inside the block take precedence: what
    :func:`torch.utils.checkpoint.checkpoint` does not keep is not counted, and
    the inputs it keeps to recompute from are.  The storages are held until the
    block ends, so that a freed address reused by another tensor cannot be
    mistaken for the same storage.
    """

    def __init__(self, exclude: Iterable[torch.Tensor] = ()):
        self._exclude = {_storage_key(t)[0] for t in exclude}
        self._keep: list[Any] = []
        self._seen: set[Any] = set()
        self.count = 0
        self.nbytes = 0
        self.raw_nbytes = 0
        self.excluded_nbytes = 0
        self._hooks: Any = None

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        self.count += 1
        key, nbytes = _storage_key(t)
        if key in self._exclude:
            self.excluded_nbytes += t.numel() * t.element_size()
            return t
        self.raw_nbytes += t.numel() * t.element_size()
        if key not in self._seen:
            self._seen.add(key)
            self.nbytes += nbytes
            try:
                self._keep.append(t.untyped_storage())
            except (RuntimeError, NotImplementedError, TypeError):
                self._keep.append(t)
        return t

    @staticmethod
    def _unpack(t: torch.Tensor) -> torch.Tensor:
        return t

    def __enter__(self) -> "SavedTensors":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)
        self._keep.clear()

    def __repr__(self) -> str:
        return f"SavedTensors(count={self.count}, nbytes={self.nbytes}, raw_nbytes={self.raw_nbytes})"


def saved_tensor_bytes(fn: Callable[..., Any], *args: Any, exclude: Iterable[torch.Tensor] = (),
                       **kwargs: Any) -> SavedTensors:
    """Run ``fn(*args, **kwargs)`` (a forward pass) and return what it saved for backward.

    Pass ``exclude=model.parameters()`` to count activations only.  The output
    of ``fn`` is dropped, and with it the graph.
    """
    with SavedTensors(exclude=exclude) as saved:
        out = fn(*args, **kwargs)
        del out
    return saved


def reserved_growth(step: Callable[[int], Any], iterations: int, device: Any) -> tuple[list[float], float]:
    """Run ``step(i)`` for ``i`` in ``range(iterations)`` on a CUDA ``device``; return, after each call, how much
    ``torch.cuda.memory_reserved`` (what the caching allocator holds) had grown since the start, in MiB, and
    how far ``torch.cuda.max_memory_allocated`` (live tensors) rose above the start, in MiB.

    Starts from an empty cache (``torch.cuda.empty_cache`` after a synchronisation), so that blocks left by
    earlier work do not hide the growth; ends with a synchronisation (queued work counted)."""
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    base, live = torch.cuda.memory_reserved(device), torch.cuda.memory_allocated(device)
    curve = []
    for i in range(iterations):
        step(i)
        curve.append((torch.cuda.memory_reserved(device) - base) / 2**20)
    torch.cuda.synchronize(device)
    peak = (torch.cuda.max_memory_allocated(device) - live) / 2**20
    torch.cuda.empty_cache()
    return curve, peak
