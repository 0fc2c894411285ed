"""What a hidden check hands the student's code besides plain data, and what comes back.

* :class:`SharedTensor` -- a tensor in memory the checker owns (a sealed ``memfd`` region, :class:`_Region`):
  what the student's code writes into it, the checker reads itself;
* :class:`Remote` -- an object of the checker's process used through named methods and attributes;
* :class:`Handle` -- an object the student's code made, kept in its process;
* :class:`Report` -- what the caller's arguments look like after a call, as the student's process reports it.

:class:`autograder.trusted.student.Student` makes and sends them.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import mmap
import os
from collections.abc import Sequence
from typing import Any

import torch

from dlperf.grading import wire

__all__ = ["Handle", "Remote", "Report", "SharedTensor"]


class _Region:
    """Anonymous shared memory (``memfd``) of this process, mapped here; its descriptor goes to the host once.

    Its size is fixed before the descriptor leaves this process: the pages are allocated
    (``posix_fallocate``, so a full ``/dev/shm`` fails here, not as a ``SIGBUS`` later) and the file is
    sealed against shrinking, growing and further seals.  A host that truncates its copy of the
    descriptor gets ``EPERM``; without the seals, this process would die of ``SIGBUS`` at its next read.
    """

    _ids = itertools.count(1)
    SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL

    def __init__(self, nbytes: int):
        self.id = next(self._ids)
        self.size = max(64, -(-nbytes // 64) * 64)
        self.fd = os.memfd_create(f"dlperf-shared-{self.id}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.fd, self.size)
        os.posix_fallocate(self.fd, 0, self.size)
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, self.SEALS)
        self.mm = mmap.mmap(self.fd, self.size)
        self.base = torch.frombuffer(self.mm, dtype=torch.uint8)
        self.sent = False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _strides(shape: Sequence[int]) -> list[int]:
    out, step = [], 1
    for size in reversed(shape):
        out.append(step)
        step *= max(size, 1)
    return list(reversed(out))


class SharedTensor:
    """A tensor in memory this process owns, handed to the student's code as an ordinary tensor.

    :attr:`tensor` is this process's live view; :meth:`read` a snapshot.  What
    the student's code writes into its tensor (``copy_``, ``add_``, a receive
    into a view) lands here; what it does instead (``t.data = ...``, a new
    tensor) does not.
    """

    def __init__(self, region: _Region, offset: int, dtype: torch.dtype, shape: Sequence[int],
                 stride: Sequence[int], requires_grad: bool = False):
        self.region = region
        self.offset = offset
        self.dtype = dtype
        self.shape = tuple(shape)
        self.stride = tuple(stride)
        self.requires_grad = requires_grad
        itemsize = torch.empty((), dtype=dtype).element_size()
        extent = 0 if 0 in self.shape else 1 + sum((s - 1) * st for s, st in zip(self.shape, self.stride))
        self.tensor = region.base[offset: offset + extent * itemsize].view(dtype).as_strided(self.shape, self.stride)

    def read(self) -> torch.Tensor:
        """What the memory holds now (a copy)."""
        return self.tensor.clone()

    def view(self, shape: Sequence[int], stride: Sequence[int], offset: int = 0) -> SharedTensor:
        """Another tensor on the same memory: ``offset`` elements from this one's start (a view of it)."""
        itemsize = self.tensor.element_size()
        return SharedTensor(self.region, self.offset + offset * itemsize, self.dtype, shape, stride)

    def wire(self) -> dict[str, Any]:
        return {"$": "shared", "region": self.region.id, "offset": self.offset, "dtype": wire.dtype_name(self.dtype),
                "shape": list(self.shape), "stride": list(self.stride), "requires_grad": self.requires_grad}

    def __repr__(self) -> str:
        return f"SharedTensor({self.tensor!r})"


class Remote:
    """An object of this process that the student's code may use through ``methods`` and ``attrs`` only.

    Its methods run here, with arguments decoded from the wire; what they
    return goes back as plain data (a returned context manager, like
    ``cluster.step()``, is offered as a remote ``with`` block).
    """

    def __init__(self, obj: Any, methods: Sequence[str] = (), attrs: Sequence[str] = (), name: str | None = None):
        self.obj = obj
        self.methods = list(methods)
        self.attrs = list(attrs)
        self.name = name or type(obj).__name__


class Report:
    """What the caller's arguments look like after a call, *as the student's process reports it*.

    ``objects``: the values of the tensor objects that were passed, in order
    (``None`` for shared ones: read those with :meth:`SharedTensor.read`, which
    does not depend on the report); ``contents``: ``[args, kwargs]`` as they
    are after the call (lists the function changed included).  A submission
    that rewrites the harness in its own process could misreport these: use
    them for what only object state can show (CUDA tensors, lists the function
    rebuilt), and the shared memory for what must be trusted.
    """

    def __init__(self, objects: list[Any], contents: Any):
        self.objects = objects
        self.contents = contents


class Handle:
    """An object the student's code made, kept in the host: call its methods, read its attributes."""

    def __init__(self, student: Any, hid: int, type_name: str):   # the Student whose host keeps it
        self.student = student
        self.id = hid
        self.type_name = type_name

    def call(self, method: str, *args: Any, _keep: bool = False, _report: bool = False, _timeout: float | None = None,
             **kwargs: Any) -> Any:
        """``obj.method(*args, **kwargs)`` in the host (options as :meth:`Student.call`)."""
        return self.student._call({"handle": self.id, "method": method}, args, kwargs, keep=_keep, report=_report,
                                  timeout=_timeout)

    def get(self, attr: str | None = None, *, keep: bool = False) -> Any:
        """The object itself (or one attribute) as plain data."""
        reply, buffers = self.student._request({"op": "get", "handle": self.id, "attr": attr, "keep": keep},
                                               wire.Encoder(), self.student.timeout)
        return self.student._result(reply, buffers)

    def __repr__(self) -> str:
        return f"<{self.type_name} in the student's process>"
