"""Probes of the ``no_sync_loop`` exercise: count the host-device synchronisations of a loop, and the graphs it keeps.

A synchronisation is a point where Python needs a value (or a shape) that only
the device can give it, so that on a GPU it waits until the device's queue has
drained up to that point (chapter *Asynchronous computation*, section *When
Python waits*).  On a CPU nothing waits, so :class:`SyncCounter` counts what
*would* wait on a GPU, at the two levels of PyTorch that every spelling goes
through (nothing of torch is patched, so nothing is left changed after it):

* a :class:`~torch.overrides.TorchFunctionMode` sees each *outermost* call of
  the torch API, as a method, a function, an operator or a builtin
  (``t.item()``, ``torch._C.TensorBase.item(t)``, ``float(t)``, ``if t:``,
  ``print(t)``, ``f"{t:.3f}"``, ``t.tolist()``, ``t.cpu()``,
  ``t.to("cpu")``, ``t.numpy()``...): a call that hands a value to Python
  counts once, whatever it does inside (``torch.tensor([t0, t1])`` reads each
  tensor of its data: one event each);
* a :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees the ATen
  operators those calls reach; an operator PyTorch itself tags as
  *data-dependent* (``_local_scalar_dense``, ``equal``...) or as having a
  *dynamic output shape* (``nonzero``, ``unique``, ``masked_select``, the
  ``index`` of a boolean mask...) counts once per outermost call, so
  ``torch.where(c)``, ``torch.argwhere``, ``t[t > 0]`` and ``nonzero`` are
  the same event, however they are spelled.

A transfer counts once: the result of ``t.cpu()`` (or ``t.to("cpu")``) is a
*host copy*, and reading a host copy (``t.cpu().tolist()``), or anything
computed only from host copies, waits for nothing.  Writing a device value
into a host tensor in place (``host[i] = loss``, ``host += loss``) is a
device-to-host copy and counts; so is Python data copied to the device
(``torch.tensor(sizes, device=x.device)``: PyTorch waits for a blocking copy).  Tensors made by a factory without
``device=`` (``torch.zeros(3)``) are host tensors too, as on a GPU.

On a CUDA device PyTorch also reports many synchronisations itself
(``torch.cuda.set_sync_debug_mode("warn")``): ``cuda_warnings``.

The count runs in the process of the code it counts; the modes are thread-local
and torch's private API can remove them, so the grader reads the solution's cells
with :data:`RULES` (an allow-list: no private names, no ``getattr``, imports of
``torch``, ``math`` and a few standard modules only), and it cross-checks the count
from outside: :func:`meta_train` runs ``train_epoch`` with the model and batches on
PyTorch's ``meta`` device, where every host read raises, and an optimizer that
lives in the grader's process, which therefore sees how many steps ran before the
first read.

A kept graph is a step's autograd graph still alive after the step: a loop that
keeps ``loss``, ``logits`` or anything computed from them with gradients (or
``total += loss`` without ``detach``) holds every step's graph until it returns.
The loss adds a zero-valued leaf (a *mark*) whose only owner is that step's graph,
and a forward hook of the model puts a token in the ``metadata`` of the logits' graph
node (no value changes); weak references tell whether a step's graph is still alive
when the optimizer steps, and after the function returns.

Each probe takes ``mod`` (the student's solution in its process, the reference
in the checker), builds the same model, data and optimizer from a seed on both
sides, runs, and returns what it observed as plain data; nothing here knows the
right answer.
"""

from __future__ import annotations

import ast
import os
import warnings
import weakref
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from dlperf.grading.reading import STANDARD_LIBRARY, Rules

__all__ = ["RULES", "SYNC_REPORT", "Criterion", "SGD", "Steps", "SyncCounter", "devices", "extra_findings", "fetch",
           "findings", "is_sync_report", "make_run", "meta_case", "meta_train", "meta_verdict", "reading_check",
           "train"]

# Calls that hand a tensor's value to Python (or format it): one event each, for a tensor on the device.
READS = frozenset({"item", "tolist", "numpy", "cpu", "__array__", "__bool__", "__float__", "__int__",
                   "__index__", "__complex__", "__repr__", "__str__", "__format__"})
# Calls that build a tensor from Python data: a read of every tensor in that data (torch.tensor([t0, t1])).
BUILDS = frozenset({"tensor", "as_tensor", "asarray", "new_tensor"})
# In-place writes: into a host tensor from a device tensor, a device-to-host copy.
WRITES = frozenset({"__setitem__", "copy_", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                    "__ifloordiv__", "index_put_", "index_copy_", "masked_scatter_", "scatter_", "scatter_add_"})
_TAGS = (torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape)
# Operators tagged with a dynamic output shape only for a boolean mask among their indices (t[mask]).
_INDEXING = frozenset({"index", "index_put", "index_put_", "_index_put_impl_", "_unsafe_index_put"})


def devices() -> list[str]:
    """Where the runs happen: the CPU, and a CUDA GPU when there is one."""
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _tensors(value: Any, out: list[torch.Tensor], depth: int = 0) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)) and depth < 4:
        for v in value[:10_000]:
            _tensors(v, out, depth + 1)
    elif isinstance(value, dict) and depth < 4:
        for v in list(value.values())[:10_000]:
            _tensors(v, out, depth + 1)
    return out


def _name(func: Any) -> str:
    return str(getattr(func, "__name__", "") or "")


# What torch.cuda.set_sync_debug_mode("warn") says at each synchronising operation.  The first call of a
# process also warns, once, that the mode "is a prototype feature" ("Synchronization debug mode ..."): not a
# synchronisation, and counting it cost the reference 3 points in the student's fresh process (H200, 2026-11-30).
SYNC_REPORT = "called a synchronizing CUDA operation"


def is_sync_report(message: str) -> bool:
    """A warning of ``set_sync_debug_mode("warn")`` that reports a synchronisation (not the mode's own notice)."""
    return SYNC_REPORT in message


def _is_host_device(target: Any, tensor: torch.Tensor) -> bool:
    """``t.to(target)`` moves ``t`` to the host: a string naming the CPU, or the CPU device (GPU tensors)."""
    if isinstance(target, str):
        return target.split(":")[0] == "cpu"
    if isinstance(target, torch.device):
        return target.type == "cpu" and tensor.device.type != "cpu"
    return False


def _to_the_device(device: Any) -> bool:
    """``device=`` names the data's device: a ``torch.device`` (``x.device``) or a string other than the CPU.
    (On a CPU run the data's device is the CPU too; a string ``"cpu"`` names the host.)"""
    if isinstance(device, torch.device):
        return True
    return isinstance(device, str) and device.split(":")[0] != "cpu"


class _Functions(TorchFunctionMode):
    def __init__(self, counter: SyncCounter):
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        return self.counter._call(func, args, kwargs)


class _Operators(TorchDispatchMode):
    def __init__(self, counter: SyncCounter):
        super().__init__()
        self.counter = counter

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        counter = self.counter
        if not counter._handled and any(tag in func.tags for tag in _TAGS):
            tensors = _tensors([args, kwargs], [])
            masked = not (str(func.overloadpacket.__name__) in _INDEXING
                          and not any(t.dtype in (torch.bool, torch.uint8) for t in tensors[1:]))
            if masked and not all(counter._is_host(t) for t in tensors):
                counter._record(str(func.overloadpacket.__name__))
                counter._handled = counter._depth > 0
        return func(*args, **kwargs)


class SyncCounter:
    """Count the host-device synchronisations made while the ``with`` block runs (see the module's docstring).

    ``events``: how many; ``kinds``: how many of each kind (``{"item": 16, "__bool__": 16}``);
    ``cuda_warnings``: on ``device="cuda"``, the synchronisations PyTorch itself reported
    (``torch.cuda.set_sync_debug_mode("warn")``), else None.  The modes are those of the thread
    that enters the block; nothing of torch is changed, so everything works as before afterwards.
    """

    def __init__(self, device: str | torch.device = "cpu"):
        self.device = torch.device(device)
        self.kinds: Counter[str] = Counter()
        self.cuda_warnings: int | None = None
        self.cuda_where: dict[str, int] = {}
        self._host: dict[int, weakref.ref[torch.Tensor]] = {}
        self._depth = 0          # inside an outermost torch call
        self._handled = False    # that call has been counted (or is a read of a host copy)
        self._modes: list[Any] = []
        self._caught: Any = None
        self._warnings: Any = None

    @property
    def events(self) -> int:
        return sum(self.kinds.values())

    def _record(self, kind: str) -> None:
        self.kinds[kind] += 1

    # -- host copies ---------------------------------------------------------------------------

    def _is_host(self, t: torch.Tensor) -> bool:
        ref = self._host.get(id(t))
        return ref is not None and ref() is t

    def _mark_host(self, value: Any) -> None:
        for t in _tensors(value, []):
            key = id(t)
            try:
                self._host[key] = weakref.ref(t, lambda _, key=key, host=self._host: host.pop(key, None))
            except TypeError:
                pass

    # -- one outermost call --------------------------------------------------------------------

    def _call(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        name = _name(func)
        inputs = _tensors([args, kwargs], [])
        host = [self._is_host(t) for t in inputs]
        first = args[0] if args and isinstance(args[0], torch.Tensor) else None
        counted: str | None = None
        quiet = False          # a read of a host copy: nothing inside counts either
        to_host = from_host = False
        if name in READS or (name == "to" and first is not None
                             and any(_is_host_device(a, first) for a in [*args[1:], kwargs.get("device")])):
            if first is not None and self._is_host(first):
                quiet = True
            else:
                counted = name
            to_host = name in ("cpu", "to")
        elif name in BUILDS:
            rest = args[1:] if name == "new_tensor" else args
            given = rest[0] if rest else kwargs.get("data")
            # a tensor given as the data is copied on its device (no read); tensors inside a list are read
            data = [] if isinstance(given, torch.Tensor) else [self._is_host(t) for t in _tensors(given, [])]
            if isinstance(given, torch.Tensor):
                if self._is_host(given) and _to_the_device(kwargs.get("device")):
                    counted = "from host"
            elif any(not h for h in data):
                counted = name      # one read per device tensor in the data: PyTorch reads them one by one
                for _ in range(sum(not h for h in data) - 1):
                    self._record(name)
            elif not data and (_to_the_device(kwargs.get("device")) if name != "new_tensor" else
                               first is not None and not self._is_host(first)):
                counted = "from host"   # Python data copied to the device: a blocking copy, the stream waits
        elif (name == "to" and first is not None and self._is_host(first)
              and any(_to_the_device(a) for a in [*args[1:], kwargs.get("device")])):
            counted = "from host"   # a host tensor copied to the device: a blocking copy
            from_host = True
        elif ((name in WRITES or (name.endswith("_") and not name.startswith("_"))) and first is not None
              and self._is_host(first) and not all(host)):
            counted = "to host"
        if counted:
            self._record(counted)
        self._depth += 1
        outer = self._handled
        self._handled = bool(counted) or quiet
        try:
            result = func(*args, **kwargs)
        finally:
            self._depth -= 1
            self._handled = outer
        if to_host:
            if first is not None and result is first:
                result = result.clone()        # as on a GPU: the host copy is another tensor
            self._mark_host(result)
        elif from_host:
            if first is not None and result is first:
                result = result.clone()        # as on a GPU: the device copy is another tensor
        elif inputs and all(host):
            self._mark_host(result)
        elif not inputs and name not in ("to",) and kwargs.get("device") is None:
            self._mark_host(result)            # a factory without device=: a host tensor, as on a GPU
        return result

    # -- the block -----------------------------------------------------------------------------

    def __enter__(self) -> SyncCounter:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self._warnings = warnings.catch_warnings(record=True)
            self._caught = self._warnings.__enter__()
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
        self._modes = [_Operators(self), _Functions(self)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(*exc)
        self._modes = []
        self._host.clear()
        if self.device.type == "cuda":
            torch.cuda.set_sync_debug_mode("default")
            self._warnings.__exit__(*exc)
            caught = [w for w in self._caught if is_sync_report(str(w.message))]
            self.cuda_warnings = len(caught)
            # where each reported synchronisation was made (the Python line that called into torch), so that a
            # count that differs between two processes says which operation made the difference
            places = Counter(f"{os.path.basename(str(w.filename))[-60:]}:{w.lineno}" for w in caught)
            self.cuda_where = dict(places.most_common(8))

    def summary(self) -> dict[str, Any]:
        """Plain data: the count, the count of each kind, and PyTorch's own count on a GPU."""
        summary = {"events": self.events, "kinds": dict(self.kinds), "cuda_warnings": self.cuda_warnings}
        if self.cuda_warnings is not None:
            summary["cuda_where"] = dict(self.cuda_where)   # on a GPU: where PyTorch reported them (file:line)
        return summary


# ---------------------------------------------------------------------------------------------
# The reading of the cells (the grader's and the self-check's)
# ---------------------------------------------------------------------------------------------

_TORCH_NAMES = {
    # dtypes
    "float32", "float64", "float", "double", "float16", "bfloat16", "int64", "int32", "int16", "int8",
    "uint8", "long", "int", "bool", "dtype", "Tensor", "Size",
    # tensors made on the batches' device
    "zeros", "ones", "empty", "full", "tensor", "as_tensor", "zeros_like", "ones_like", "empty_like",
    "full_like", "arange", "stack", "cat", "concat", "concatenate", "hstack", "vstack", "split", "chunk",
    "tensor_split", "unbind", "flatten", "reshape",
    # device-side arithmetic and reductions
    "sum", "mean", "cumsum", "prod", "min", "max", "argmin", "argmax", "minimum", "maximum", "amin", "amax",
    "add", "sub", "mul", "div", "true_divide", "abs", "neg", "exp", "log", "sqrt", "pow", "clamp", "round",
    "where", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not", "isnan",
    "isfinite", "count_nonzero", "topk", "sort", "dot", "all", "any", "is_tensor", "is_floating_point", "numel",
    "finfo", "iinfo", "no_grad", "enable_grad", "inference_mode", "inf", "nan",
    # reads and value-dependent sizes: allowed, counted (one read at the end is the solution)
    "nonzero", "argwhere", "unique", "masked_select", "equal", "allclose",
}

RULES = Rules(
    what="fetch and train_epoch",
    imports={"torch", "math"} | STANDARD_LIBRARY["imports"],
    # typing.* of the shared list is narrowed: typing.get_type_hints evaluates strings (a name spelled as text)
    names={f"torch.{n}" for n in _TORCH_NAMES} | {n for n in STANDARD_LIBRARY["names"] if n != "typing.*"}
    | {f"typing.{n}" for n in ("Any", "Optional", "Union", "List", "Dict", "Tuple", "Sequence", "Iterable",
                               "Callable", "Mapping")},
    decorators=STANDARD_LIBRARY["decorators"] | {"staticmethod", "classmethod", "property"},
    attributes={
        # tensors
        "detach", "data", "item", "tolist", "cpu", "to", "numpy", "clone", "contiguous", "reshape", "view",
        "flatten", "ravel", "squeeze", "unsqueeze", "expand", "repeat", "flip", "T", "double", "float", "long",
        "int", "bool", "half", "type_as", "sum", "mean", "cumsum", "prod", "min", "max", "argmin", "argmax",
        "amin", "amax", "add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "neg", "abs", "exp", "log",
        "sqrt", "pow", "clamp", "round", "zero_", "fill_", "copy_", "eq", "ne", "lt", "le", "gt", "ge", "where",
        "isnan", "isfinite", "all", "any", "count_nonzero", "nonzero", "argwhere", "unique", "masked_select",
        "topk", "sort", "split", "chunk", "unbind", "index_select", "gather", "masked_fill", "new_zeros",
        "new_ones", "new_full", "new_empty", "new_tensor", "numel", "dim", "ndim", "ndimension", "shape", "size",
        "dtype", "device", "is_floating_point", "is_complex", "is_signed", "requires_grad", "backward",
        "element_size", "itemsize", "values", "indices",
        # the model, the optimizer
        "zero_grad", "step", "parameters", "train", "eval",
        # lists, dicts, floats
        "append", "extend", "insert", "pop", "index", "count", "copy", "clear", "reverse", "items", "keys",
        "get", "update", "setdefault", "is_integer", "real", "imag", "join",
    },
    classes=False,
    explain={
        ".type": "the loop needs no test of the device: create what it keeps on the batches' device "
                 "(device=x.device, torch.zeros_like, x.new_zeros)",
        ".is_cuda": "the loop needs no test of the device: follow the batches' device",
        ".is_meta": "the loop needs no test of the device: follow the batches' device",
        ".grad_fn": "keep loss.detach(): nothing of the autograd graph is needed",
        ".format": "format with an f-string (str.format can reach attributes by their names)",
        "torch.device": "follow the batches' device: device=x.device, torch.zeros_like, x.new_zeros",
        "torch.cuda": "the loop needs nothing of torch.cuda (synchronize is a synchronisation)",
    },
)


def extra_findings(parts: Sequence[tuple[str, str]]) -> list[str]:
    """What this exercise refuses besides :data:`RULES`: ``try`` statements (a caught exception could hide a
    read that fails on a device, and the exercise needs none)."""
    found: list[str] = []
    for number, (_, source) in enumerate(parts, 1):
        where = f"cell {number}" if len(parts) > 1 else "your cell"
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        lines = source.splitlines()
        for node in ast.walk(tree):
            if isinstance(node, ast.Try):
                text = lines[node.lineno - 1].strip() if 0 < node.lineno <= len(lines) else ""
                found.append(f"{where}, line {node.lineno} (`{text[:70]}`): a try statement (the loop needs "
                             "none, and a caught exception can hide a host read)")
    return found


def findings(parts: Sequence[tuple[str, str]]) -> list[str]:
    """The grader's reading of the cells: :data:`RULES` and :func:`extra_findings`; ``[]`` when nothing is
    refused."""
    from dlperf.grading.reading import read

    return read(parts, RULES) + extra_findings(parts)


def reading_check(*objects: Any) -> Any:
    """The self-check's case for the reading: the same as the grader's (:func:`findings`)."""
    from dlperf.grading.reading import cells_of, findings_case

    return findings_case(lambda: findings(cells_of(*objects)))


# ---------------------------------------------------------------------------------------------
# The training run both sides build
# ---------------------------------------------------------------------------------------------


class Criterion:
    """``loss_fn(logits, y)``: the mean cross-entropy of the batch, as a 0-dim tensor that stays in the graph.

    It adds a zero-valued leaf (a *mark*) to every loss it returns: the exact same value, and a
    graph that owns the mark; the model's forward hook puts a token in the last graph node of
    every forward pass (so kept logits count too); :meth:`alive` says which steps' graphs are
    still alive.
    """

    def __init__(self) -> None:
        self.marks: list[tuple[int, weakref.ref[torch.Tensor]]] = []
        self.step = 0   # the optimizer step the next loss belongs to (set by SGD)

    def mark(self, device: torch.device) -> torch.Tensor:
        leaf = torch.zeros((), device=device, requires_grad=True)
        self.marks.append((self.step, weakref.ref(leaf)))
        return leaf

    def __call__(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, y) + self.mark(logits.device)

    def alive(self) -> list[int]:
        """The steps whose graphs (of a loss, or of anything the forward pass computed) are still alive now."""
        return sorted({step for step, ref in self.marks if ref() is not None})


class _Token:
    """What a forward pass's graph owns (in its last node's ``metadata``): alive exactly as long as that node."""


def _mark_forward(criterion: Criterion) -> Any:
    """A forward hook of the model: its output's graph node holds a token of the step (no value changes)."""
    def hook(module: nn.Module, inputs: Any, output: Any) -> None:
        node = getattr(output, "grad_fn", None)
        if node is not None:
            token = _Token()
            node.metadata["dlperf_step"] = token
            criterion.marks.append((criterion.step, weakref.ref(token)))
    return hook


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

    The labels come from a fixed random linear teacher, so accuracy rises during the epoch.  On the
    ``meta`` device the same shapes, without values.
    """
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    criterion = Criterion()
    model = nn.Sequential(nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, classes)).to(device)
    model.register_forward_hook(_mark_forward(criterion))
    teacher = torch.randn(features, classes, generator=g)
    batches = []
    for n in sizes:
        x = torch.randn(int(n), features, generator=g)
        batches.append((x.to(device), (x @ teacher).argmax(dim=1).to(device)))
    return model, SGD(model.parameters(), lr, criterion=criterion), criterion, batches


# ---------------------------------------------------------------------------------------------
# The probes
# ---------------------------------------------------------------------------------------------


def _warm_up(model: nn.Module, batches: Sequence[Any]) -> None:
    """On a GPU, before the counted block: a training step's operations once, on copies of the parameters.

    The reference's count is taken in the grader's process, the student's in a fresh process of its own:
    what a process does the first time it uses CUDA (cuBLAS handles and workspaces, autograd's device
    threads, kernels loaded on first launch, the allocator's first blocks) is neither loop's doing and must
    not count for one process and not for the other.  Nothing of the run changes: not the model, its
    gradients, the criterion's marks or any random state.
    """
    x, y = batches[0]
    h = x
    for layer in model:
        if isinstance(layer, nn.Linear):
            h = F.linear(h, layer.weight.detach().clone().requires_grad_(), layer.bias.detach().clone().requires_grad_())
        else:
            h = layer(h)
    loss = F.cross_entropy(h, y) + torch.zeros((), device=h.device, requires_grad=True)
    loss.backward()
    correct = torch.zeros((), dtype=torch.int64, device=h.device)
    correct += (h.argmax(dim=1) == y).sum()
    torch.cat([torch.stack([loss.detach()]).reshape(-1).to(torch.float64),
               correct.reshape(-1).to(torch.float64)]).tolist()
    torch.cuda.synchronize()


def fetch(mod: Any, device: str, tensors: Sequence[torch.Tensor]) -> dict[str, Any]:
    """``mod.fetch(*tensors)`` with the tensors on ``device``: what it returned and its synchronisations."""
    on_device = [t.to(device) for t in tensors]
    if device != "cpu":
        torch.cat([t.detach().reshape(-1).to(torch.float64) for t in on_device] or [torch.zeros(0)]).tolist()
    with SyncCounter(device) as syncs:
        values = mod.fetch(*on_device)
    return {"values": values, "syncs": syncs.summary()}


def train(mod: Any, device: str, seed: int, sizes: Sequence[int], lr: float,
          function: str = "train_epoch") -> dict[str, Any]:
    """One epoch of ``mod.<function>(model, optimizer, loss_fn, batches)`` on the run of ``make_run``.

    Returns the log it returned, the parameters after it, the number of optimizer steps, its
    synchronisations, per step the older steps whose graphs were still alive, and the steps whose
    graphs were still alive after it returned.
    """
    model, optimizer, loss_fn, batches = make_run(device, seed, sizes, lr)
    if device != "cpu":
        _warm_up(model, batches)   # first CUDA use in this process: not the loop's (see _warm_up)
    with SyncCounter(device) as syncs:
        log = getattr(mod, function)(model, optimizer, loss_fn, batches)
    return {"log": log, "params": [p.detach().clone() for p in model.parameters()], "steps": optimizer.steps,
            "syncs": syncs.summary(), "kept": optimizer.kept, "alive_after": loss_fn.alive()}


def meta_train(mod: Any, optimizer: Any, sizes: Sequence[int]) -> Any:
    """``mod.train_epoch`` on the ``meta`` device, with ``optimizer`` (the grader's object, in its process).

    Every host read raises on ``meta``, so the grader, which counts the optimizer's steps itself,
    sees how many steps ran before the first read (all of them, for a loop that reads once at the
    end).  Returns the name of the type of what it returned (a loop that reads nothing returns).
    """
    model, _, loss_fn, batches = make_run("meta", 0, sizes)
    return type(mod.train_epoch(model, optimizer, loss_fn, batches)).__name__


# ---------------------------------------------------------------------------------------------
# The meta run: its verdict (the grader's and the self-check's)
# ---------------------------------------------------------------------------------------------

# What PyTorch raises when a value (or a shape that depends on values) of a meta tensor is read on the host.
META_READS = ("cannot be called on meta tensors", "Cannot copy out of meta tensor", "meta device type tensor to "
              "numpy", "register_meta function", "with Meta tensors", "'Meta' backend",
              "unsupported format string passed to Tensor.__format__")


class Steps:
    """The optimizer of the meta run: it only counts ``zero_grad()`` and ``step()`` (meta tensors have no
    values to update).  The grader keeps it in its own process (a remote object for the student's code)."""

    def __init__(self) -> None:
        self.steps = 0
        self.zero_grads = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.zero_grads += 1

    def step(self) -> None:
        self.steps += 1


def is_meta_read(message: str) -> bool:
    """Whether an exception's message is PyTorch's for a host read of a meta tensor."""
    return any(text in message for text in META_READS)


def meta_verdict(steps: int, batches: int, raised: tuple[str, str] | None) -> str | None:
    """The verdict of a meta run: ``None`` when all ``batches`` steps ran before the first host read, which
    raised (``raised``: the exception's type name and message; ``None`` when the function returned)."""
    if raised is None:
        return (f"it returned after {steps} of {batches} steps without reading any value from the device (the "
                "log's numbers must be read from it, once)")
    kind, message = raised
    said = f"{kind}: {message.strip().splitlines()[0][:200] if message.strip() else ''}"
    if steps < batches:
        return (f"it stopped after {steps} of {batches} optimizer steps, raising {said}: every host read raises "
                "on the meta device, so this is a read (or a shape that depends on values) inside the loop, "
                "or a tensor the loop keeps on the host instead of the batches' device")
    if steps > batches:
        return f"it made {steps} optimizer steps for {batches} batches"
    if not is_meta_read(message):
        return (f"after its {batches} steps it raised {said} instead of reading the values: something it made "
                "is not on the batches' device (a tensor created without device=?)")
    return None


def meta_case(train_epoch: Any, sizes: Sequence[int]) -> Any:
    """The self-check's meta run (in the notebook's process; the grader's runs in its own, with :class:`Steps`
    in the grader's process): ``train_epoch`` on the meta device, as the grader judges it."""
    def case() -> tuple[Any, Any, bool]:
        steps = Steps()
        model, _, loss_fn, batches = make_run("meta", 0, sizes)
        raised = None
        try:
            train_epoch(model, steps, loss_fn, batches)
        except Exception as exc:  # noqa: BLE001 - what the grader sees too
            raised = (type(exc).__name__, str(exc))
        verdict = meta_verdict(steps.steps, len(sizes), raised)
        if verdict:
            print(f"On the meta device, train_epoch on {len(sizes)} batches: {verdict}")
        got = f"{steps.steps} steps, then " + ("a read" if raised and is_meta_read(raised[1]) else
                                                 raised[0] if raised else "returned")
        return got, f"{len(sizes)} steps, then a read", verdict is None
    return case
