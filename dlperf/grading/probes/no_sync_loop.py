"""Probes of the ``no_sync_loop`` exercise: count the host-device synchronisations of a loop, and the graphs it keeps.

A synchronisation is a point where Python needs a value (or a shape) that only
the device can give it, so that on a GPU it waits until the device's queue has
drained up to that point (chapter *Asynchronous computation*, section *When
Python waits*).  On a CUDA device, PyTorch reports many of them itself
(``torch.cuda.set_sync_debug_mode("warn")``); on a CPU nothing waits, so
:class:`SyncCounter` counts the calls that *would* synchronise on a GPU:

* reading values on the host: ``Tensor.item``, ``tolist``, ``numpy``,
  ``cpu``, ``to("cpu")``, ``__array__`` (``numpy.asarray``), ``float(t)``,
  ``int(t)``, ``bool(t)`` (every ``if``/``while``/``and`` on a tensor),
  ``operator.index(t)``, formatting (``print(t)``, ``repr``, ``f"{t:.3f}"``);
* functions whose result's size or value the host must know: ``nonzero``,
  ``unique``, ``masked_select``, ``equal``, ``allclose``, ``is_nonzero``
  (as ``torch.`` functions and as methods), indexing with a boolean mask
  (``t[t > 0]``, ``t[t > 0] = 0``), and ``torch.cuda.synchronize``.

One *event* is one outermost such call: ``print(t)`` reads every element but
counts once.  The count runs in the process of the code it counts, so that
code could change it (patch this module, or call the C methods behind the
counter's Python wrappers, ``torch._C.TensorBase.item``); the grader cross-checks it with a reading of the
solution's source that this process never touches (``autograder/exercises/no_sync_loop.py``).

A kept graph is a step's autograd graph still alive after the step: a loop
that keeps ``loss`` (or ``total += loss`` without ``detach``) holds every
step's graph until it returns.  :class:`Criterion` marks each loss with a
zero-valued leaf whose only owner is that loss's graph; a weak reference tells
whether the graph is still alive when the optimizer steps.

Each probe takes ``mod`` (the student's solution in its process, the reference
in the checker), builds the same model, data and optimizer from a seed on both
sides, runs, and returns what it observed as plain data; nothing here knows the
right answer.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["Criterion", "SGD", "SyncCounter", "devices", "fetch", "make_run", "train"]

# Methods of torch.Tensor that hand a value to Python (or format one); each call is one event.
HOST_METHODS = ("item", "tolist", "numpy", "cpu", "__array__", "__bool__", "__float__", "__int__", "__index__",
                "__complex__", "__repr__", "__format__")
# Functions and methods whose result's size or value the host must know before it can go on.
SIZE_FUNCTIONS = ("nonzero", "unique", "unique_consecutive", "masked_select", "equal", "allclose", "is_nonzero")

_state = threading.local()


def _depth() -> int:
    return getattr(_state, "depth", 0)


def devices() -> list[str]:
    """Where the runs happen: the CPU, and a CUDA GPU when there is one."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _bool_index(tensor: Any, index: Any, *rest: Any) -> bool:
    """``t[index]`` (or ``t[index] = v``) with a boolean mask: the result's size depends on the values."""
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in items)


class SyncCounter:
    """Count the host-device synchronisations made while the ``with`` block runs (see the module's docstring).

    ``events``: how many; ``kinds``: how many of each kind (``{"item": 16, "__bool__": 16}``);
    ``cuda_warnings``: on ``device="cuda"``, the synchronisations PyTorch itself reported
    (``torch.cuda.set_sync_debug_mode("warn")``), else None.  Counting is global to the process
    (every thread's calls of the patched methods) and not reentrant.
    """

    def __init__(self, device: str | torch.device = "cpu"):
        self.device = torch.device(device)
        self.kinds: Counter[str] = Counter()
        self.cuda_warnings: int | None = None
        self._saved: list[tuple[Any, str, Any, bool]] = []
        self._caught: Any = None
        self._warnings: Any = None

    @property
    def events(self) -> int:
        return sum(self.kinds.values())

    def _record(self, kind: str) -> None:
        self.kinds[kind] += 1

    def _wrap(self, owner: Any, name: str, counts: Callable[..., bool] | None = None) -> None:
        original = getattr(owner, name)
        own = name in vars(owner)
        record = self._record

        def counted(*args: Any, **kwargs: Any) -> Any:
            if _depth() == 0 and (counts is None or counts(*args, **kwargs)):
                record(name)
                _state.depth = 1
                try:
                    return original(*args, **kwargs)
                finally:
                    _state.depth = 0
            return original(*args, **kwargs)

        counted.__name__ = getattr(original, "__name__", name)
        self._saved.append((owner, name, original, own))
        setattr(owner, name, counted)

    def __enter__(self) -> SyncCounter:
        for name in HOST_METHODS:
            self._wrap(torch.Tensor, name)
        self._wrap(torch.Tensor, "to", _to_cpu_call)
        self._wrap(torch.Tensor, "__getitem__", _bool_index)
        self._wrap(torch.Tensor, "__setitem__", _bool_index)
        for name in SIZE_FUNCTIONS:
            self._wrap(torch.Tensor, name)
            self._wrap(torch, name)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._wrap(torch.cuda, "synchronize")
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
            self._warnings.__exit__(*exc)
            self.cuda_warnings = sum("synchroniz" in str(w.message) for w in self._caught)
        for owner, name, original, own in reversed(self._saved):
            if own:
                setattr(owner, name, original)
            else:
                delattr(owner, name)
        self._saved.clear()

    def summary(self) -> dict[str, Any]:
        """Plain data: the count, the count of each kind, and PyTorch's own count on a GPU."""
        return {"events": self.events, "kinds": dict(self.kinds), "cuda_warnings": self.cuda_warnings}


def _to_cpu_call(tensor: Any, *args: Any, **kwargs: Any) -> bool:
    """``t.to(...)`` counts when it names the host as a string (``"cpu"``), or moves a GPU tensor to the host."""
    for target in (*args, kwargs.get("device")):
        if isinstance(target, str) and target.split(":")[0] == "cpu":
            return True
        if isinstance(target, torch.device) and target.type == "cpu" and tensor.device.type != "cpu":
            return True
    return False


# ---------------------------------------------------------------------------------------------
# The training run both sides build
# ---------------------------------------------------------------------------------------------


class Criterion:
    """``loss_fn(logits, y)``: the mean cross-entropy of the batch, as a 0-dim tensor that stays in the graph.

    It adds a zero-valued leaf (a *mark*) to every loss it returns: the exact same value, and a
    graph that owns the mark; :meth:`alive` says which steps' graphs are still alive.
    """

    def __init__(self) -> None:
        self.marks: list[tuple[int, weakref.ref[torch.Tensor]]] = []
        self.step = 0   # the optimizer step the next loss belongs to (set by SGD)

    def __call__(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        mark = torch.zeros((), device=logits.device, requires_grad=True)
        self.marks.append((self.step, weakref.ref(mark)))
        return F.cross_entropy(logits, y) + mark

    def alive(self) -> list[int]:
        """The steps whose loss graphs are still alive now."""
        return sorted({step for step, ref in self.marks if ref() is not None})


class SGD:
    """Plain SGD with momentum (``buf = m * buf + g; p -= lr * buf``), the only optimizer the runs use.

    ``zero_grad()`` and ``step()`` as ``torch.optim.SGD``; each ``step()`` first records which
    older steps' graphs the criterion still sees alive.  (``torch.optim`` imports ``torch._dynamo``,
    about a second in every process.)
    """

    def __init__(self, params: Sequence[torch.Tensor], lr: float, momentum: float = 0.9,
                 criterion: Criterion | None = None):
        self.params = list(params)
        self.lr = lr
        self.momentum = momentum
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)
        self.criterion = criterion
        self.steps = 0
        self.kept: list[list[int]] = []   # per step: the older steps whose graphs were alive

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        if self.criterion is not None:
            self.kept.append([s for s in self.criterion.alive() if s < self.steps - 1])
        with torch.no_grad():
            for i, p in enumerate(self.params):
                if p.grad is None:
                    continue
                buf = self.buffers[i]
                self.buffers[i] = p.grad.clone() if buf is None else buf.mul_(self.momentum).add_(p.grad)
                p.sub_(self.lr * self.buffers[i])
        self.steps += 1
        if self.criterion is not None:
            self.criterion.step = self.steps


Batches = list[tuple[torch.Tensor, torch.Tensor]]


def make_run(device: str, seed: int, sizes: Sequence[int], lr: float = 0.1, features: int = 12,
             hidden: int = 24, classes: int = 5) -> tuple[nn.Module, SGD, Criterion, Batches]:
    """``(model, optimizer, loss_fn, batches)`` from ``seed``: an MLP, SGD with momentum, batches of ``sizes``.

    The labels come from a fixed random linear teacher, so accuracy rises during the epoch.
    """
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, classes)).to(device)
    teacher = torch.randn(features, classes, generator=g)
    batches = []
    for n in sizes:
        x = torch.randn(int(n), features, generator=g)
        batches.append((x.to(device), (x @ teacher).argmax(dim=1).to(device)))
    criterion = Criterion()
    return model, SGD(model.parameters(), lr, criterion=criterion), criterion, batches


# ---------------------------------------------------------------------------------------------
# The probes
# ---------------------------------------------------------------------------------------------


def fetch(mod: Any, device: str, tensors: Sequence[torch.Tensor]) -> dict[str, Any]:
    """``mod.fetch(*tensors)`` with the tensors on ``device``: what it returned and its synchronisations."""
    on_device = [t.to(device) for t in tensors]
    with SyncCounter(device) as syncs:
        values = mod.fetch(*on_device)
    return {"values": values, "syncs": syncs.summary()}


def train(mod: Any, device: str, seed: int, sizes: Sequence[int], lr: float,
          function: str = "train_epoch") -> dict[str, Any]:
    """One epoch of ``mod.<function>(model, optimizer, loss_fn, batches)`` on the run of ``make_run``.

    Returns the log it returned, the parameters after it, the number of optimizer steps, its
    synchronisations, and per step the older steps whose graphs were still alive.
    """
    model, optimizer, loss_fn, batches = make_run(device, seed, sizes, lr)
    if device != "cpu":
        torch.cuda.synchronize()
    with SyncCounter(device) as syncs:
        log = getattr(mod, function)(model, optimizer, loss_fn, batches)
    return {"log": log, "params": [p.detach().clone() for p in model.parameters()], "steps": optimizer.steps,
            "syncs": syncs.summary(), "kept": optimizer.kept}
