"""The hidden check's handle on the student's code: a process it drives with plain data.

A hidden test cell (run by the check run, or by ``nbgrader autograde`` in the
kernel) grades a solution like this::

    from autograder.trusted import Student, CheckFailed

    with Student(allreduce) as student:               # the cell(s) that define allreduce, in a host
        data = [student.share(t) for t in tensors]     # memory this process owns
        student.call("allreduce", data)               # the student's allreduce runs over there
        got = [d.read() for d in data]                 # ...and wrote into our memory, or not
        expected = torch.stack(tensors).sum(0)         # computed here, never sent
        if not all(torch.equal(g, expected) for g in got): raise CheckFailed("...")

:class:`Student` starts a host (:mod:`dlperf.grading.host`) through the zygote
(:mod:`autograder.trusted.zygote`), loads the solution cells there, and turns
each request into plain data on the wire (:mod:`dlperf.grading.wire`).  The
host never receives the check's source, an expected value or anything that
says what the verdict is; what it sends back is decoded strictly and trusted
for its value only.  Four kinds of arguments let a check observe what the
student's code *did* without asking it:

* :meth:`Student.share` -- a tensor in memory the checker owns; the student's
  code gets it as an ordinary tensor, and whatever it writes into it the
  checker reads itself (in-place semantics, untouched inputs);
* :class:`Remote` -- an object that lives here (the simulated cluster): the
  student's code calls its methods, the object counts in this process;
* a function -- becomes a callback: the student's code calls it, it runs here
  (a reference ``allreduce`` while ``train_step`` is graded);
* :class:`Handle` -- an object the student's code made and the host keeps (a
  ``GradScaler`` driven step by step).

Errors: the student's exceptions become :class:`StudentRaised` (type, message
and the student's own frames, capped); a crash, a timeout or a broken wire
become :class:`CheckFailed` with a sentence that says so.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import itertools
import os
import signal
import socket
import sys
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

from dlperf.grading import wire
from dlperf.grading.reading import cells_of

from . import zygote as zygote_module
from .arguments import Handle, Remote, Report, SharedTensor, _Region, _strides

__all__ = [
    "CheckFailed",
    "Handle",
    "Remote",
    "SharedTensor",
    "Student",
    "StudentRaised",
    "set_deadline",
    "solution_parts",
]


class CheckFailed(AssertionError):
    """A hidden check failed; the message is what the student reads (it names the case, never the check's code)."""


class StudentRaised(CheckFailed):
    """The student's code raised: ``type_name``, ``message`` and the student's own traceback (all capped)."""

    def __init__(self, type_name: str, message: str, student_traceback: str, mro: Sequence[str] = ()):
        self.type_name = type_name
        self.message = message
        self.student_traceback = student_traceback
        self.mro = tuple(mro) or (type_name,)
        super().__init__(f"your code raised {type_name}: {message}\n{student_traceback}".rstrip())

    def is_a(self, name: str) -> bool:
        """Whether the exception is an instance of the class named ``name`` (by its classes' names)."""
        return name in self.mro


_deadline: float | None = None
_files: dict[str, bytes] = {}
isolations: set[str] = set()   # how the hosts of this process were isolated (the check run reports it)


def set_deadline(seconds: float | None) -> None:
    """Bound every later request by what is left of ``seconds`` from now (the submission's budget)."""
    global _deadline
    _deadline = None if seconds is None else time.monotonic() + seconds


def set_files(files: dict[str, bytes]) -> None:
    """Files every later host gets in its working folder (the assignment's data, beside the solution)."""
    global _files
    _files = dict(files)


def _time_left(timeout: float) -> float:
    if _deadline is not None:
        timeout = min(timeout, _deadline - time.monotonic())
    return max(0.5, timeout)


# ---------------------------------------------------------------------------------------------
# Which code is the student's
# ---------------------------------------------------------------------------------------------


def solution_parts(*objects: Any) -> list[tuple[str, str]]:
    """``[(file name, source)]`` of the cells that define ``objects`` (:func:`dlperf.grading.reading.cells_of`:
    the self-check finds the same cells in the student's kernel)."""
    return cells_of(*objects)


def _module_of(name: str) -> str:
    """The module that defines the object ``name`` (``torch.amp.grad_scaler`` for ``torch.amp.GradScaler``)."""
    from dlperf.grading.host import _resolve

    _, _, obj = _resolve(name)
    return getattr(obj, "__module__", None) or name.rsplit(".", 1)[0]


def present(names: Sequence[str]) -> list[str]:
    """The names of ``names`` that this process's libraries have: one that a library's version lacks is nothing
    to switch off (torch 2.11 has fewer of ``torch.distributed.pipelining``'s private helpers than 2.13; on a
    GPU machine with 2.11, resolving them stopped every host of pipeline_schedule from starting: 0/10 for the
    reference, 2026-11-27).  ``tests/test_trusted.py`` checks that every exercise's names exist in the
    course's own torch, so that a misspelt name is caught there rather than skipped."""
    from dlperf.grading.host import _resolve

    kept = []
    for name in names:
        try:
            _resolve(name)
        except (ImportError, AttributeError):
            continue
        kept.append(name)
    return kept


def hidden_files(names: Sequence[str]) -> list[str]:
    """The source (and cached bytecode) files defining the objects ``names`` (hidden from the host)."""
    from dlperf.grading.host import _resolve

    files: list[str] = []
    for name in names:
        owner, _, obj = _resolve(name)
        module = sys.modules.get(getattr(obj, "__module__", "") or "")
        if module is None and isinstance(owner, types.ModuleType):   # a dict or other value: its module's file
            module = owner
        path = getattr(module, "__file__", None) or inspect.getfile(obj)
        for candidate in (path, importlib.util.cache_from_source(path) if path.endswith(".py") else None):
            if candidate and os.path.isfile(candidate) and candidate not in files:
                files.append(os.path.realpath(candidate))
    return files


# ---------------------------------------------------------------------------------------------
# The student's process
# ---------------------------------------------------------------------------------------------


def _exit_description(code: int | None) -> str:
    if code is None:
        return "it was killed or lost"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Student:
    """One process running the student's solution cells, driven by this (trusted) process.

    ``solution``: the functions or classes the student defined (their cells
    are loaded, in order, as one module), or ``parts=[(file name, source)]``.
    ``forbid``: library objects switched off there (and their source files
    hidden).  ``timeout``: seconds per request (bounded by the submission's
    budget).  ``relay``: give the host a relay socket (:class:`~autograder.trusted.ranks.Ranks`).
    """

    def __init__(self, *solution: Any, parts: Sequence[tuple[str, str]] | None = None, forbid: Sequence[str] = (),
                 timeout: float = 60.0, relay: bool = False, capture: bool = False, isolate: bool = True,
                 zygote: zygote_module.Zygote | None = None):
        self.parts = list(parts) if parts is not None else solution_parts(*solution)
        self.forbid = present(forbid)
        self.timeout = timeout
        self.relay = relay
        self.capture = capture
        self.isolate = isolate
        self.zygote = zygote
        self.process: zygote_module.HostProcess | None = None
        self.chan: wire.Channel | None = None
        self.regions: dict[int, _Region] = {}
        self.remotes: dict[int, Remote] = {}
        self.remote_ids: dict[int, int] = {}
        self.functions: dict[int, Callable[..., Any]] = {}
        self.function_ids: dict[int, int] = {}
        self._ids = itertools.count(1)
        self.dead: str | None = None

    # -- lifetime ------------------------------------------------------------------------------

    def __enter__(self) -> Student:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def isolation(self) -> str:
        """How the host is kept apart: ``"namespaces"`` or ``"process (why)"``."""
        if self.process is None:
            return "not started"
        return self.process.isolation + (f" ({self.process.why})" if self.process.why else "")

    def start(self) -> None:
        zyg = self.zygote or zygote_module.get()
        private = [p for p in {os.getcwd(), os.path.expanduser("~")} if _coverable(p)]
        self.process = zyg.host(relay=self.relay, capture=self.capture, isolate=self.isolate,
                                hide=hidden_files(self.forbid), private=private,
                                preload=sorted({_module_of(name) for name in self.forbid}))
        self.chan = wire.Channel(self.process.sock)
        isolations.add(self.isolation)
        try:
            hello, _, _ = self._recv(_time_left(30.0))
            if hello.get("op") != "hello":
                raise CheckFailed("the process for your code did not start")
            if self.forbid:
                self._result(*self._request({"op": "forbid", "names": self.forbid}, wire.Encoder(), 30.0))
            names = sorted(_files)
            load = {"op": "load", "parts": [list(p) for p in self.parts], "files": names}
            reply, buffers = self._request(load, wire.Encoder(buffers=[_files[n] for n in names]), self.timeout)
        except StudentRaised as exc:
            self.close()
            raise CheckFailed("the cell(s) with your solution failed when run on their own (keep the imports and "
                              "helpers your solution needs in those cells):\n" + exc.student_traceback) from None
        except BaseException:
            self.close()
            raise
        try:
            self._result(reply, buffers)
        except StudentRaised as exc:
            self.close()
            raise CheckFailed("the cell(s) with your solution failed when run on their own (keep the imports and "
                              "helpers your solution needs in those cells):\n" + exc.student_traceback) from None

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            with contextlib.suppress(OSError):
                self.process.sock.close()
            if self.process.relay is not None:
                with contextlib.suppress(OSError):
                    self.process.relay.close()
        for region in self.regions.values():
            region.close()

    def output(self, limit: int = 8000) -> str:
        """The last ``limit`` characters the student's code printed (``capture=True``), as text."""
        if self.process is None or self.process.output is None:
            return ""
        size = os.fstat(self.process.output).st_size
        data = os.pread(self.process.output, min(size, limit * 4), max(0, size - limit * 4))
        return data.decode("utf-8", errors="replace")[-limit:]

    # -- what a check calls --------------------------------------------------------------------

    def share(self, value: torch.Tensor, *, requires_grad: bool = False) -> SharedTensor:
        """A copy of ``value`` (a CPU tensor) in shared memory; hand it to :meth:`call` as an argument."""
        value = value.detach()
        if value.device.type != "cpu":
            raise ValueError("only CPU tensors can be shared; send CUDA tensors as values")
        region = _Region(value.numel() * value.element_size())
        self.regions[region.id] = region
        shared = SharedTensor(region, 0, value.dtype, value.shape, _strides(value.shape), requires_grad)
        shared.tensor.copy_(value)
        return shared

    def call(self, name: str, *args: Any, _replace: dict[str, Any] | None = None, _report: bool = False,
             _keep: bool = False, _timeout: float | None = None, **kwargs: Any) -> Any:
        """``name(*args, **kwargs)`` from the student's module, in the host; its result as plain data.

        ``_replace``: module names bound to other values while the call runs
        (functions here become callbacks).  ``_report``: return ``(result,
        Report)``: what the caller's tensor objects hold afterwards, as the
        student's process reports it.  ``_keep``: return a :class:`Handle` to
        what it returned instead of its value.
        """
        return self._call({"name": name}, args, kwargs, replace=_replace, report=_report, keep=_keep,
                          timeout=_timeout)

    def keep(self, name: str, *args: Any, **kwargs: Any) -> Handle:
        """``name(*args, **kwargs)`` in the host, kept there: a :class:`Handle` (e.g. an instance)."""
        result = self._call({"name": name}, args, kwargs, keep=True)
        if not isinstance(result, Handle):
            raise CheckFailed(f"{name}(...) returned {result!r}, not an object")
        return result

    def hold(self, value: Any) -> Handle:
        """Send ``value`` once and keep it in the host: pass the :class:`Handle` to several calls, and the
        student's code sees the same objects each time (tensors whose ``.grad`` persists, lists it changed)."""
        enc = wire.Encoder(special=self._special)
        reply, buffers = self._request({"op": "hold", "value": enc.encode(value)}, enc, self.timeout)
        handle = self._result(reply, buffers)
        if not isinstance(handle, Handle):
            self._die("your code broke the grader's channel (no handle)")
        return handle

    def probe(self, probe: str, *args: Any, _timeout: float | None = None, **kwargs: Any) -> Any:
        """A public probe ``dlperf.grading.probes.<probe>`` run on the student's module in the host."""
        return self._call({"probe": f"dlperf.grading.probes.{probe}"}, args, kwargs, timeout=_timeout)

    # -- the wire ------------------------------------------------------------------------------

    def _call(self, target: dict[str, Any], args: Sequence[Any], kwargs: dict[str, Any], *,
              replace: dict[str, Any] | None = None, report: bool = False, keep: bool = False,
              timeout: float | None = None) -> Any:
        enc = wire.Encoder(special=self._special)
        header = {"op": "call", "target": target, "args": enc.encode(list(args)), "kwargs": enc.encode(dict(kwargs)),
                  "replace": enc.encode(dict(replace or {})), "report": report, "keep": keep}
        reply, buffers = self._request(header, enc, timeout or self.timeout)
        value = self._result(reply, buffers)
        if report:
            try:
                objects = [None if v is None else self._decode(v, buffers) for v in reply.get("objects", [])]
                contents = self._decode(reply.get("contents", [[], {"$": "dict", "items": []}]), buffers)
            except wire.WireError as exc:
                self._die(f"your code sent back something the grader cannot read ({exc})")
            return value, Report(objects, contents)
        return value

    def _special(self, value: Any) -> Any:
        if isinstance(value, SharedTensor):
            if value.region.id not in self.regions:
                raise wire.WireError("a shared tensor of another student process")
            return value.wire()
        if isinstance(value, Handle):
            if value.student is not self:
                raise wire.WireError("a handle of another student process")
            return {"$": "handle", "id": value.id}
        if isinstance(value, Remote):
            rid = self.remote_ids.get(id(value.obj))
            if rid is None:
                rid = next(self._ids)
                self.remote_ids[id(value.obj)] = rid
                self.remotes[rid] = value
            spec = self.remotes[rid]
            return {"$": "remote", "id": rid, "methods": spec.methods, "attrs": spec.attrs, "type": spec.name}
        if id(value) in self.remote_ids and not isinstance(value, (int, float, str, bool)):
            return self._special(self.remotes[self.remote_ids[id(value)]])
        if callable(value) and not isinstance(value, (type, torch.Tensor)) and (
                isinstance(value, (types.FunctionType, types.MethodType, types.BuiltinFunctionType))):
            cid = self.function_ids.get(id(value))
            if cid is None:
                cid = next(self._ids)
                self.function_ids[id(value)] = cid
                self.functions[cid] = value
            return {"$": "callback", "id": cid, "name": getattr(value, "__name__", "callback")}
        return None

    def _device(self, name: str) -> str:
        if name == "cpu":
            return name
        if name.startswith("cuda") and torch.cuda.is_available():
            index = int(name.partition(":")[2] or 0)
            if 0 <= index < torch.cuda.device_count():
                return name
        raise wire.WireError(f"a tensor on an unknown device {name[:20]!r}")

    def _decode(self, data: Any, buffers: Sequence[bytes]) -> Any:
        def handle(obj: dict[str, Any]) -> Handle:
            hid = obj.get("id")
            if type(hid) is not int:
                raise wire.WireError("malformed handle")
            return Handle(self, hid, wire._short(str(obj.get("type", "object")), 200))

        def remote(obj: dict[str, Any]) -> Any:
            spec = self.remotes.get(obj.get("id"))  # type: ignore[arg-type]
            if spec is None:
                raise wire.WireError("unknown remote object")
            return spec.obj

        return wire.decode(data, wire.Decoded(buffers, {"handle": handle, "remote": remote}, devices=self._device))

    def _recv(self, timeout: float) -> tuple[dict[str, Any], list[bytes], list[int]]:
        assert self.chan is not None and self.process is not None
        if self.dead:
            raise CheckFailed(self.dead)
        self.chan.sock.settimeout(timeout)
        try:
            header, buffers, fds = self.chan.recv()
        except (TimeoutError, socket.timeout):
            self._die(f"timed out: your code did not finish within {timeout:.3g} s (an infinite loop, a deadlock, "
                      "or far too slow)")
        except (EOFError, ConnectionError, OSError):
            code = self.process.exitcode(wait=2.0)
            self._die(f"the process running your code died ({_exit_description(code)}) before it answered")
        except wire.WireError as exc:
            self._die(f"your code broke the grader's channel ({exc})")
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        if not isinstance(header, dict):
            self._die("your code broke the grader's channel (a frame that is not an object)")
        return header, buffers, fds

    def _die(self, message: str) -> None:
        self.dead = message
        if self.process is not None:
            self.process.kill()
        raise CheckFailed(message)

    def _request(self, header: dict[str, Any], enc: wire.Encoder, timeout: float) -> tuple[dict[str, Any], list[bytes]]:
        """Send a request; serve the host's callbacks until it answers; the answer."""
        assert self.chan is not None
        if self.dead:
            raise CheckFailed(self.dead)
        fresh = [r for r in self.regions.values() if not r.sent]
        if fresh:
            header["regions"] = [[r.id, r.size] for r in fresh]
        try:
            self.chan.send(header, enc.buffers, [r.fd for r in fresh])
        except OSError:
            self._recv(1.0)  # reports how the host died
        for region in fresh:
            region.sent = True
        deadline = time.monotonic() + _time_left(timeout)
        while True:
            reply, buffers, _ = self._recv(max(0.05, deadline - time.monotonic()))
            op = reply.get("op")
            if op in ("done", "raised"):
                return reply, buffers
            if op in ("callback", "remote", "remote_get"):
                self._serve(reply, buffers)
            else:
                self._die("your code broke the grader's channel (an unexpected message)")

    def _result(self, reply: dict[str, Any], buffers: Sequence[bytes]) -> Any:
        if reply.get("op") == "raised":
            mro = reply.get("mro")
            raise StudentRaised(wire._short(str(reply.get("type", "Exception")), 100),
                                wire._short(str(reply.get("message", "")), 2000),
                                wire._short(str(reply.get("traceback", "")), 4000),
                                [wire._short(str(m), 100) for m in mro[:20]] if isinstance(mro, list) else ())
        try:
            return self._decode(reply.get("ok"), buffers)
        except wire.WireError as exc:
            self._die(f"your code sent back something the grader cannot read ({exc})")

    def _serve(self, request: dict[str, Any], buffers: Sequence[bytes]) -> None:
        """Run a callback or a remote object's method here, for the student's code, and answer."""
        assert self.chan is not None
        enc = wire.Encoder(special=self._special, fallback=self._wrap_returned)
        try:
            args = self._decode(request.get("args", []), buffers)
            kwargs = self._decode(request.get("kwargs", {"$": "dict", "items": []}), buffers)
            if not isinstance(args, list) or not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
                raise wire.WireError("malformed arguments")
        except wire.WireError as exc:
            self._die(f"your code broke the grader's channel ({exc})")
        reply: dict[str, Any] = {"op": "return"}
        try:
            if request["op"] == "callback":
                fn = self.functions.get(request.get("id"))  # type: ignore[arg-type]
                if fn is None:
                    raise RuntimeError("unknown callback")
                before = [t.detach().clone() for t in _tensors([args, kwargs])]
                result = fn(*args, **kwargs)
                after = _tensors([args, kwargs])
                reply["args_after"] = enc.encode([[i, t] for i, (b, t) in enumerate(zip(before, after))
                                                  if not _same_bits(b, t)])
            else:
                spec = self.remotes.get(request.get("id"))  # type: ignore[arg-type]
                if spec is None:
                    raise RuntimeError("unknown object")
                if request["op"] == "remote_get":
                    name = str(request.get("attr"))
                    if name not in spec.attrs:
                        raise AttributeError(name)
                    result = getattr(spec.obj, name)
                else:
                    name = str(request.get("method"))
                    if name not in spec.methods:
                        raise AttributeError(name)
                    if name == "__exit__":
                        raised = bool(request.get("raised"))
                        exc = RuntimeError("an exception in your code") if raised else None
                        result = spec.obj.__exit__(type(exc) if exc else None, exc, None)
                    else:
                        result = getattr(spec.obj, name)(*args, **kwargs)
            reply["ok"] = enc.encode(result)
        except wire.WireError:
            raise
        except Exception as exc:  # noqa: BLE001 - the object's error goes back to the student's code
            reply = {"op": "return", "error_type": type(exc).__name__ if type(exc).__module__ == "builtins"
                     else "RuntimeError", "error": wire._short(str(exc), 2000)}
        self.chan.send(reply, enc.buffers)

    def _wrap_returned(self, value: Any) -> Any:
        """A remote method returned a non-plain object: a context manager is offered as one, nothing else."""
        if hasattr(value, "__enter__") and hasattr(value, "__exit__"):
            return self._special(Remote(value, ["__enter__", "__exit__"], name=type(value).__name__))
        raise wire.WireError(f"a {type(value).__name__} cannot be handed to the student's code")


def _tensors(value: Any) -> list[torch.Tensor]:
    from dlperf.grading.host import _flat_tensors

    return _flat_tensors(value, [])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool(torch.equal(a.detach().cpu().reshape(-1).view(torch.uint8) if a.numel() else a.cpu(),
                            b.detach().cpu().contiguous().reshape(-1).view(torch.uint8) if b.numel() else b.cpu()))


def _coverable(path: str) -> bool:
    """A folder the host may get an empty tmpfs over: not ``/``, and nothing the interpreter needs lies inside."""
    path = os.path.realpath(path)
    if path in ("/", "") or not os.path.isdir(path):
        return False
    needed = [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
              os.path.dirname(os.path.dirname(os.path.realpath(wire.__file__)))]
    needed += [p for p in sys.path if p and os.path.isdir(p)]
    return not any(os.path.realpath(n) == path or os.path.realpath(n).startswith(path + os.sep) for n in needed)

