"""Count the memory traffic of Triton kernels by watching the interpreter load and store.

In interpreter mode (``TRITON_INTERPRET=1``, :mod:`dlperf.kernels.mode`) every ``tl.load`` and ``tl.store``
of a kernel becomes a call of the interpreter's builder with the block of addresses and the mask.
:func:`count_traffic` wraps those calls (``create_masked_load``/``create_masked_store``, which the unmasked
forms also go through) and the launch itself, and records for every access of every program:

* the *elements* it moves, the lanes whose mask is true, and the bytes, ``elements x itemsize``: a masked
  lane moves nothing;
* the 32-byte *sectors* it touches, ``|{addr // 32}|`` over the active lanes: the unit in which an NVIDIA
  GPU's memory system serves a warp's request (CUDA C++ Best Practices Guide, *Coalesced access to global
  memory*).  ``sectors x 32`` is what the hardware fetches for one access instruction of a program, if no
  cache catches anything; for contiguous, aligned ``float32`` lanes it equals the bytes, for lanes
  ``k >= 8`` elements apart it is ``32 / 4 = 8`` times the bytes.

Both are counted per program instance and per launch, as the program asks, with no cache between programs:
on a real GPU the L2 cache may serve some of a program's loads that another program made before, so the
counts are the traffic *to the memory system*, an upper bound on the traffic to HBM.

Not counted: atomics, tensor descriptors and block pointers (``tl.make_block_ptr``); the kernels of this
course do not use them.

:func:`count_torch_ops` counts, for comparison, what a chain of eager PyTorch operators reads and writes:
every tensor argument of every ATen operator once, every output once (views move nothing).
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["SECTOR", "Access", "Launch", "Traffic", "count", "count_traffic", "OpTraffic", "count_torch_ops"]

SECTOR = 32  # bytes


@dataclass(frozen=True)
class Access:
    """One ``tl.load`` or ``tl.store`` executed by one program instance."""

    kind: str                       # "load" or "store"
    program: tuple[int, int, int]   # (pid0, pid1, pid2)
    elements: int                   # active (unmasked) lanes
    itemsize: int                   # bytes per element
    sectors: int                    # distinct 32-byte sectors the active lanes touch

    @property
    def nbytes(self) -> int:
        """Bytes the access asks for: ``elements x itemsize``."""
        return self.elements * self.itemsize

    @property
    def sector_bytes(self) -> int:
        """Bytes the memory system moves for it, in whole sectors: ``sectors x 32``."""
        return self.sectors * SECTOR


@dataclass
class Launch:
    """One launch ``kernel[grid](...)``: its name, grid and every access of every program."""

    kernel: str
    grid: tuple[int, int, int]
    accesses: list[Access] = field(default_factory=list)

    def _sum(self, kind: str | None, what: str) -> int:
        return sum(getattr(a, what) for a in self.accesses if kind is None or a.kind == kind)

    @property
    def programs(self) -> int:
        """Program instances in the grid."""
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def loaded_bytes(self) -> int:
        return self._sum("load", "nbytes")

    @property
    def stored_bytes(self) -> int:
        return self._sum("store", "nbytes")

    @property
    def nbytes(self) -> int:
        """Loaded plus stored bytes."""
        return self._sum(None, "nbytes")

    @property
    def loaded_sector_bytes(self) -> int:
        return self._sum("load", "sector_bytes")

    @property
    def stored_sector_bytes(self) -> int:
        return self._sum("store", "sector_bytes")

    @property
    def sector_bytes(self) -> int:
        """Loaded plus stored bytes in whole 32-byte sectors."""
        return self._sum(None, "sector_bytes")

    def per_program(self) -> dict[tuple[int, int, int], dict[str, int]]:
        """``{program: {"load": bytes, "store": bytes}}`` for every program that accessed memory."""
        out: dict[tuple[int, int, int], dict[str, int]] = defaultdict(lambda: {"load": 0, "store": 0})
        for a in self.accesses:
            out[a.program][a.kind] += a.nbytes
        return dict(out)

    def __str__(self) -> str:
        return (f"{self.kernel}[{self.programs} programs]: loaded {self.loaded_bytes:,} B, "
                f"stored {self.stored_bytes:,} B ({self.sector_bytes:,} B in 32-byte sectors)")


@dataclass
class Traffic:
    """Everything counted inside one :func:`count_traffic` block, launch by launch."""

    launches: list[Launch] = field(default_factory=list)

    @property
    def loaded_bytes(self) -> int:
        return sum(launch.loaded_bytes for launch in self.launches)

    @property
    def stored_bytes(self) -> int:
        return sum(launch.stored_bytes for launch in self.launches)

    @property
    def nbytes(self) -> int:
        return sum(launch.nbytes for launch in self.launches)

    @property
    def sector_bytes(self) -> int:
        return sum(launch.sector_bytes for launch in self.launches)

    @property
    def last(self) -> Launch:
        """The most recent launch."""
        if not self.launches:
            raise LookupError("no kernel was launched inside the count_traffic block")
        return self.launches[-1]

    def __str__(self) -> str:
        return "\n".join(str(launch) for launch in self.launches) or "no launch"


_active: list[Traffic] = []


def _sectors(addresses: np.ndarray) -> int:
    return int(np.unique(addresses // SECTOR).size) if addresses.size else 0


@contextlib.contextmanager
def count_traffic() -> Iterator[Traffic]:
    """Count the loads and stores of every Triton kernel launched inside the block (interpreter only).

    ``with count_traffic() as traffic: add(x, y)``, then ``traffic.last.loaded_bytes`` is ``2 n s``.
    """
    from triton.runtime import interpreter as interp

    from .mode import interpreting

    if not interpreting():
        raise RuntimeError("count_traffic needs Triton's interpreter (TRITON_INTERPRET=1, see "
                           "dlperf.kernels.mode.select_mode): compiled kernels cannot be watched from Python")
    if _active:
        raise RuntimeError("count_traffic blocks do not nest")
    builder = interp.interpreter_builder
    traffic = Traffic()
    original_load = builder.create_masked_load        # bound methods of the one interpreter builder
    original_store = builder.create_masked_store
    original_call = interp.GridExecutor.__call__

    def record(kind: str, ptrs: Any, mask: Any) -> None:
        if not traffic.launches:
            return
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), ptrs.data.shape)
        itemsize = max(1, ptrs.get_element_ty().primitive_bitwidth // 8)
        addresses = np.asarray(ptrs.data)[active]
        traffic.launches[-1].accesses.append(
            Access(kind, tuple(builder.grid_idx), int(active.sum()), itemsize, _sectors(addresses)))

    def load(ptrs, mask, *rest, **kwargs):          # (ptrs, mask, other, cache and volatility flags)
        record("load", ptrs, mask)
        return original_load(ptrs, mask, *rest, **kwargs)

    def store(ptrs, value, mask, *rest, **kwargs):  # (ptrs, value, mask, cache flags)
        record("store", ptrs, mask)
        return original_store(ptrs, value, mask, *rest, **kwargs)

    def call(self, *args, **kwargs):
        launch = Launch(getattr(self.fn, "__name__", "kernel"), (0, 0, 0))
        traffic.launches.append(launch)
        try:
            return original_call(self, *args, **kwargs)
        finally:   # a launch that failed before its grid was set keeps (0, 0, 0) and its own error
            grid = getattr(builder, "grid_dim", None)
            if grid is not None:
                launch.grid = tuple(int(g) for g in grid)

    builder.create_masked_load = load
    builder.create_masked_store = store
    interp.GridExecutor.__call__ = call
    _active.append(traffic)
    try:
        yield traffic
    finally:
        _active.pop()
        del builder.create_masked_load      # back to the class's methods
        del builder.create_masked_store
        interp.GridExecutor.__call__ = original_call


@dataclass(frozen=True)
class OpTraffic:
    """One eager ATen operator: what it reads and writes (every input and output tensor once)."""

    op: str
    read: int
    written: int

    @property
    def nbytes(self) -> int:
        return self.read + self.written


def count_torch_ops(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list[OpTraffic]]:
    """Run ``fn`` eagerly and list the bytes each ATen operator reads and writes.

    Each operator is one kernel (on a GPU) or one loop (on a CPU) that reads its tensor arguments and writes
    its outputs from and to memory: ``read = sum of the arguments' nbytes``, ``written = sum of the outputs'
    nbytes``.  Views (``op.is_view``) move nothing and are left out.  Returns ``(fn's result, ops)``.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    ops: list[OpTraffic] = []

    def nbytes(tree: Any) -> int:
        return sum(t.numel() * t.element_size() for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if not func.is_view:
                ops.append(OpTraffic(str(func.overloadpacket.__name__), nbytes((args, kwargs or {})), nbytes(out)))
            return out

    with Watch():
        result = fn(*args, **kwargs)
    return result, ops


def _to_cpu(value: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(v) for v in value)
    return value


_CHILD = """
import sys, importlib, torch
from dlperf.kernels.mode import select_mode
select_mode(verbose=False)
from dlperf.kernels.traffic import count_traffic
job = torch.load(sys.argv[1], weights_only=False)
launcher = getattr(importlib.import_module(job["module"]), job["name"])
with count_traffic() as traffic:
    result = launcher(*job["args"], **job["kwargs"])
torch.save({"result": result, "traffic": traffic}, sys.argv[2])
"""


def count(launcher: Callable[..., Any], *args: Any, in_subprocess: bool | None = None,
          **kwargs: Any) -> tuple[Any, Traffic]:
    """Run ``launcher(*args, **kwargs)`` (a function that launches Triton kernels) and count its traffic.

    Returns ``(result, traffic)``.  In interpreter mode this is :func:`count_traffic` around the call.  Where
    the kernels are compiled (a CUDA device), nothing can be watched from Python, so the same launcher runs
    in a child process in interpreter mode (``CUDA_VISIBLE_DEVICES=""``) on CPU copies of the tensors, and
    its result (on the CPU) and counts come back.  The launcher must be importable by module and name.
    ``in_subprocess`` forces one way or the other.
    """
    import os
    import subprocess
    import sys
    import tempfile

    import torch

    from .mode import select_mode

    if in_subprocess is None:
        in_subprocess = not select_mode(verbose=False).interpreted
    if not in_subprocess:
        with count_traffic() as traffic:
            result = launcher(*args, **kwargs)
        return result, traffic
    module, name = launcher.__module__, launcher.__name__
    with tempfile.TemporaryDirectory() as tmp:
        job, answer = os.path.join(tmp, "job.pt"), os.path.join(tmp, "answer.pt")
        torch.save({"module": module, "name": name, "args": _to_cpu(args), "kwargs": _to_cpu(kwargs)}, job)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}
        done = subprocess.run([sys.executable, "-c", _CHILD, job, answer], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"counting {module}.{name} in an interpreter process failed:\n{done.stderr[-3000:]}")
        out = torch.load(answer, weights_only=False)
    return out["result"], out["traffic"]
