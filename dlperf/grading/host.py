"""The process that runs a student's solution for a hidden check: it holds nothing worth taking.

A hidden check (trusted, :mod:`autograder.trusted`) never runs student code
itself.  It starts one of these processes (through its zygote, in namespaces
of its own), sends it the student's solution cells, and then drives it with
requests made of plain data (:mod:`dlperf.grading.wire`):

* ``load``: run the solution cells (and the instructor's setup cell when the
  solution needs it) as the module ``student_solution``;
* ``forbid``: before loading, switch off library objects the exercise forbids
  (e.g. ``torch.amp.GradScaler`` in the exercise that asks for one written from
  scratch): their methods raise, their aliases are gone (the trusted side also
  hides their source files from this process);
* ``call``: call a function of the module, a method of an object kept here
  (a *handle*), or a public *probe* (``dlperf.grading.probes``: code that
  exercises the student's objects the same way the trusted side exercises the
  reference); arguments may be tensors in memory that the trusted side owns
  (``shared``: what the student writes into them, the checker reads itself),
  objects that live on the trusted side (``remote``: e.g. the simulated
  cluster, whose accounting the student cannot touch) and trusted functions
  (``callback``: e.g. a reference ``allreduce`` while ``train_step`` is graded);
* ``hold`` / ``get`` / ``release``: keep a value here (so that the same objects
  are passed to several calls), read or drop a kept object;
* ``relay``: join a process group whose every message goes through the trusted
  side (:mod:`dlperf.grading.relay`).

Replies are plain data too: a value, or what the student's code raised (type
name, message and the student's own frames of the traceback, all capped).
Nothing here decides anything: the trusted side compares what comes back
with what it computed itself.  What the student's code prints goes nowhere
(or to a capture the trusted side reads as text), so it cannot reach the
notebook, and this process has no file, descriptor or variable that holds a
hidden test, an expected value or a verdict.
"""

from __future__ import annotations

import builtins
import importlib
import linecache
import mmap
import os
import socket
import sys
import traceback
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

from . import wire

__all__ = ["MODULE", "forbid", "index_globals", "serve"]

MODULE = "student_solution"
TRACEBACK_LIMIT = 4000
MESSAGE_LIMIT = 2000


class _Forbidden:
    """What a switched-off library object becomes: every use raises with the same message."""

    def __init__(self, name: str):
        self._name = name

    def message(self) -> str:
        return (f"{self._name} is switched off while this exercise is graded: the exercise asks you to write "
                "it yourself")


def _raiser(name: str) -> Callable[..., Any]:
    message = _Forbidden(name).message()

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(message)

    forbidden.__name__ = forbidden.__qualname__ = name.rsplit(".", 1)[-1]
    return forbidden


def _resolve(dotted: str) -> tuple[Any, str, Any]:
    """``(owner, attribute, object)`` of ``package.module.attr`` (the longest importable module prefix)."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:-1]:
            owner = getattr(owner, attr)
        return owner, parts[-1], getattr(owner, parts[-1])
    raise ImportError(f"cannot resolve {dotted}")


def forbid(dotted: str) -> None:
    """Switch off ``dotted`` in this process: calls raise, class methods raise, aliases go.

    A class loses every method, property and the constructor, and so do its
    subclasses; every module attribute anywhere that is the same object is
    replaced too.  The objects themselves are then unreferenced and freed.
    """
    owner, attr, obj = _resolve(dotted)
    replacement: Any
    if isinstance(obj, type):
        classes = [obj]
        todo = list(obj.__subclasses__())
        while todo:
            sub = todo.pop()
            if sub not in classes:
                classes.append(sub)
                todo.extend(sub.__subclasses__())
        for cls in classes:
            name = f"{cls.__module__}.{cls.__qualname__}"
            for key, value in list(vars(cls).items()):
                if key in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                    continue
                if isinstance(value, (types.FunctionType, classmethod, staticmethod, property)) or callable(value):
                    try:
                        setattr(cls, key, _raiser(f"{name}.{key}"))
                    except (AttributeError, TypeError):
                        pass
            try:
                cls.__init__ = _raiser(name)  # type: ignore[misc]
                cls.__new__ = staticmethod(_raiser(name))  # type: ignore[assignment]
            except (AttributeError, TypeError):
                pass
        replacement = _raiser(dotted)
    else:
        replacement = _raiser(dotted)
    for namespace, key in _aliases(obj):
        namespace[key] = replacement
    setattr(owner, attr, replacement)


# Each module's namespace when the process hosts are forked from indexed them (see index_globals): its
# id, its size and the ids of its values.
_INDEXED: dict[str, tuple[int, int, frozenset[int]]] = {}


def index_globals() -> None:
    """Record what every module holds, once, in the process hosts are forked from.

    :func:`forbid` must find every module attribute that is the forbidden object.  Walking every
    namespace in the host touches every global of some 1,100-2,000 modules (each gets its reference
    count raised), and every page so touched is copied out of the memory the host shares with its
    zygote: about 25 ms of system time per host, for each name forbidden, a fifth of the machine's time
    while a class is graded.  With the ids of each module's values recorded here (~20 ms, once), a host
    walks only the namespaces that hold the object, that are new since (modules imported later) or
    that changed size; looking an id up in the record only reads it.
    """
    if _INDEXED:      # made already (a fork of the check run that made it)
        return
    _INDEXED.clear()
    for name, module in list(sys.modules.items()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        _INDEXED[name] = (id(namespace), len(namespace), frozenset(map(id, namespace.values())))


def _aliases(obj: Any) -> list[tuple[dict[str, Any], str]]:
    """Every (module namespace, key) whose value is ``obj`` (skipping what the index says cannot hold it)."""
    found = []
    for name, module in list(sys.modules.items()):
        try:
            namespace = vars(module)
        except TypeError:
            continue
        indexed = _INDEXED.get(name)
        if indexed is not None and indexed[:2] == (id(namespace), len(namespace)) and id(obj) not in indexed[2]:
            continue
        found += [(namespace, key) for key, value in list(namespace.items()) if value is obj]
    return found


# ---------------------------------------------------------------------------------------------
# Objects that live on the trusted side
# ---------------------------------------------------------------------------------------------


class RemoteObject:
    """An object of the trusted side: its methods and attributes are requests to it.

    Only the methods and attributes the trusted side offers exist; a context
    manager offered by the trusted side works in a ``with`` block.
    """

    __slots__ = ("_host", "_id", "_methods", "_attrs", "_type")

    def __init__(self, host: Host, rid: int, methods: list[str], attrs: list[str], type_name: str):
        object.__setattr__(self, "_host", host)
        object.__setattr__(self, "_id", rid)
        object.__setattr__(self, "_methods", frozenset(methods))
        object.__setattr__(self, "_attrs", frozenset(attrs))
        object.__setattr__(self, "_type", type_name)

    def __getattr__(self, name: str) -> Any:
        if name in self._methods:
            host, rid = self._host, self._id

            def method(*args: Any, **kwargs: Any) -> Any:
                return host.ask({"op": "remote", "id": rid, "method": name}, args, kwargs)

            method.__name__ = name
            return method
        if name in self._attrs:
            return self._host.ask({"op": "remote_get", "id": self._id, "attr": name}, (), {})
        raise AttributeError(f"{self._type} has no attribute {name!r} here (the grader offers "
                             f"{', '.join(sorted(self._methods | self._attrs))})")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._type} is read-only")

    def __enter__(self) -> Any:
        if "__enter__" not in self._methods:
            raise TypeError(f"{self._type} is not a context manager")
        return self._host.ask({"op": "remote", "id": self._id, "method": "__enter__"}, (), {})

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        self._host.ask({"op": "remote", "id": self._id, "method": "__exit__", "raised": kind is not None}, (), {})
        return False

    def __repr__(self) -> str:      # neutral: code must not tell a grader's object from an ordinary one by it
        return f"<{self._type} object>"


# ---------------------------------------------------------------------------------------------
# The host
# ---------------------------------------------------------------------------------------------


def _flat_tensors(value: Any, out: list[torch.Tensor], depth: int = 0) -> list[torch.Tensor]:
    """Every tensor in a value, in order (lists, tuples, dict values)."""
    if depth > wire.MAX_DEPTH:
        return out
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _flat_tensors(v, out, depth + 1)
    elif isinstance(value, dict):
        for v in value.values():
            _flat_tensors(v, out, depth + 1)
    return out


class Host:
    """The request loop; ``chan`` is the channel to the trusted side."""

    def __init__(self, chan: wire.Channel, relay_fd: int | None = None):
        self.chan = chan
        self.relay_fd = relay_fd
        self.module: types.ModuleType | None = None
        self.files: set[str] = set()
        self.handles: dict[int, Any] = {}
        self.next_handle = 1
        self.regions: dict[int, tuple[mmap.mmap, torch.Tensor]] = {}
        self.remotes: dict[int, RemoteObject] = {}
        self.callbacks: dict[int, Callable[..., Any]] = {}
        # the tensors that live in the trusted side's memory, by id, held weakly: an id is reused once its
        # tensor is freed, and a tensor sent as a value later (a CUDA one) must not be taken for a shared one
        self.shared: dict[int, weakref.ref[torch.Tensor]] = {}

    # -- values -------------------------------------------------------------------------------

    def _special(self, value: Any) -> Any:
        if isinstance(value, RemoteObject):
            return {"$": "remote", "id": object.__getattribute__(value, "_id")}
        return None

    def _keep(self, value: Any) -> dict[str, Any]:
        hid = self.next_handle
        self.next_handle += 1
        self.handles[hid] = value
        return {"$": "handle", "id": hid, "type": wire._short(type(value).__qualname__, 200)}

    def encode(self, value: Any, keep: bool = False) -> tuple[Any, list[Any]]:
        enc = wire.Encoder(special=self._special, fallback=self._keep if keep else wire.opaque)
        return enc.encode(value), enc.buffers

    def _shared(self, obj: dict[str, Any]) -> torch.Tensor:
        region = self.regions.get(obj.get("region"))  # type: ignore[arg-type]
        if region is None:
            raise wire.WireError("unknown shared region")
        dtype = wire.DTYPES[obj["dtype"]]
        shape, stride, offset = list(obj["shape"]), list(obj["stride"]), int(obj["offset"])
        itemsize = torch.empty((), dtype=dtype).element_size()
        extent = 0 if 0 in shape else 1 + sum((s - 1) * st for s, st in zip(shape, stride))
        base = region[1]
        if offset % itemsize or offset + extent * itemsize > base.numel():
            raise wire.WireError("a shared tensor outside its region")
        flat = base[offset: offset + extent * itemsize].view(dtype)
        tensor = flat.as_strided(shape, stride).detach()
        if obj.get("requires_grad"):
            tensor.requires_grad_()
        key = id(tensor)
        self.shared[key] = weakref.ref(tensor, lambda ref, key=key: self._forget_shared(key, ref))
        return tensor

    def _forget_shared(self, key: int, ref: weakref.ref[torch.Tensor]) -> None:
        if self.shared.get(key) is ref:
            del self.shared[key]

    def is_shared(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` itself (not a later object with a freed one's id) lives in the trusted side's memory."""
        ref = self.shared.get(id(tensor))
        return ref is not None and ref() is tensor

    def _remote(self, obj: dict[str, Any]) -> RemoteObject:
        rid = int(obj["id"])
        if rid not in self.remotes:
            self.remotes[rid] = RemoteObject(self, rid, list(obj.get("methods", [])), list(obj.get("attrs", [])),
                                             str(obj.get("type", "object")))
        return self.remotes[rid]

    def _callback(self, obj: dict[str, Any]) -> Callable[..., Any]:
        cid = int(obj["id"])
        if cid not in self.callbacks:
            host, name = self, str(obj.get("name", "callback"))

            def callback(*args: Any, **kwargs: Any) -> Any:
                return host.ask({"op": "callback", "id": cid}, args, kwargs, mirror=True)

            callback.__name__ = callback.__qualname__ = name
            self.callbacks[cid] = callback
        return self.callbacks[cid]

    def _handle(self, obj: dict[str, Any]) -> Any:
        hid = obj.get("id")
        if hid not in self.handles:
            raise wire.WireError("unknown handle")
        return self.handles[hid]

    def decode(self, data: Any, buffers: list[bytes]) -> Any:
        ctx = wire.Decoded(buffers, {"shared": self._shared, "remote": self._remote, "callback": self._callback,
                                     "handle": self._handle}, devices=lambda name: name)
        return wire.decode(data, ctx)

    def _map(self, header: dict[str, Any], fds: list[int]) -> None:
        for (rid, size), fd in zip(header.get("regions", []), fds):
            mm = mmap.mmap(fd, size) if size else mmap.mmap(-1, 1)
            os.close(fd)
            base = torch.frombuffer(mm, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
            self.regions[int(rid)] = (mm, base)

    # -- talking to the trusted side during a call ----------------------------------------------

    def ask(self, header: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any], mirror: bool = False) -> Any:
        """A request to the trusted side (a callback, a remote method), while the student's code runs."""
        enc = wire.Encoder(special=self._special)
        header = {**header, "args": enc.encode(list(args)), "kwargs": enc.encode(dict(kwargs))}
        self.chan.send(header, enc.buffers)
        reply, buffers, fds = self.chan.recv()
        self._map(reply, fds)
        if reply.get("op") != "return":
            raise RuntimeError("the grader's channel is out of step")
        if "error" in reply:
            kind = getattr(builtins, str(reply.get("error_type", "RuntimeError")), RuntimeError)
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                kind = RuntimeError
            raise kind(str(reply["error"]))
        if mirror and "args_after" in reply:
            originals = _flat_tensors(list(args) + list(kwargs.values()), [])
            for index, value in self.decode(reply["args_after"], buffers):
                if 0 <= index < len(originals):
                    with torch.no_grad():
                        originals[index].copy_(value)
        return self.decode(reply.get("ok"), buffers)

    # -- requests -------------------------------------------------------------------------------

    def load(self, parts: list[list[str]]) -> None:
        module = types.ModuleType(MODULE)
        module.__file__ = f"<{MODULE}>"
        module.__builtins__ = builtins  # type: ignore[attr-defined]
        sys.modules[MODULE] = module
        self.module = module
        for filename, source in parts:
            self.files.add(filename)
            linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
            exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 - the student's cells

    def write_files(self, names: list[str], buffers: list[bytes]) -> None:
        """The assignment's files, in this process's working folder (private to it), before its code loads."""
        for name, data in zip(names, buffers):
            path = os.path.normpath(str(name))
            if path.startswith(("/", "..")) or "\0" in path:
                continue
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)

    def target(self, spec: dict[str, Any]) -> Callable[..., Any]:
        if "probe" in spec:
            path, _, name = str(spec["probe"]).partition(":")
            if not path.startswith("dlperf.grading.probes."):
                raise wire.WireError("probes live in dlperf.grading.probes")
            probe = getattr(importlib.import_module(path), name)
            module = self.module
            return lambda *a, **k: probe(module, *a, **k)
        if "handle" in spec:
            obj = self._handle({"id": spec["handle"]})
            return getattr(obj, str(spec["method"])) if spec.get("method") else obj
        name = str(spec["name"])
        if self.module is None or not hasattr(self.module, name):
            raise AttributeError(f"your solution does not define {name}")
        return getattr(self.module, name)

    def call(self, header: dict[str, Any], buffers: list[bytes]) -> None:
        fn = self.target(header["target"])
        args = self.decode(header.get("args", []), buffers)
        kwargs = self.decode(header.get("kwargs", {"$": "dict", "items": []}), buffers)
        replaced = {}
        for name, value in self.decode(header.get("replace", {"$": "dict", "items": []}), buffers).items():
            assert self.module is not None
            replaced[name] = self.module.__dict__.get(name, _MISSING)
            setattr(self.module, name, value)
        given = _flat_tensors([args, kwargs], []) if header.get("report") else []
        try:
            result = fn(*args, **kwargs)
        finally:
            for name, old in replaced.items():
                if old is _MISSING:
                    self.module.__dict__.pop(name, None)  # type: ignore[union-attr]
                else:
                    setattr(self.module, name, old)
        value, bufs = self.encode(result, keep=bool(header.get("keep")))
        reply: dict[str, Any] = {"op": "done", "ok": value}
        if header.get("report"):
            # What the caller would see afterwards: the tensor objects it passed (None for those in the
            # trusted side's memory, which it reads itself), and what its argument lists hold now.
            enc = wire.Encoder(special=self._special, fallback=wire.opaque, buffers=bufs)
            reply["objects"] = [None if self.is_shared(t) else enc.encode(t) for t in given]
            reply["contents"] = enc.encode([list(args), dict(kwargs)])
        self.chan.send(reply, bufs)

    def get(self, header: dict[str, Any]) -> None:
        obj = self._handle({"id": header.get("handle")})
        if header.get("attr"):
            obj = getattr(obj, str(header["attr"]))
        value, bufs = self.encode(obj, keep=bool(header.get("keep")))
        self.chan.send({"op": "done", "ok": value}, bufs)

    def raised(self, exc: BaseException) -> None:
        self.chan.send({"op": "raised", "type": wire._short(type(exc).__name__, 100),
                        "module": wire._short(type(exc).__module__, 100),
                        "mro": [wire._short(c.__name__, 100) for c in type(exc).__mro__][:20],
                        "message": wire._short(_text(exc), MESSAGE_LIMIT),
                        "traceback": self.student_traceback(exc)})

    def student_traceback(self, exc: BaseException) -> str:
        """The frames of the student's cells (and the exception), capped; no frame of anything else."""
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename in self.files]
        text = "".join(traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc))
        return text if len(text) <= TRACEBACK_LIMIT else "...\n" + text[-TRACEBACK_LIMIT:]

    def loop(self) -> None:
        while True:
            try:
                header, buffers, fds = self.chan.recv()
            except EOFError:
                return
            self._map(header, fds)
            op = header.get("op")
            try:
                if op == "load":
                    self.write_files(header.get("files", []), buffers)
                    self.load(header["parts"])
                    self.chan.send({"op": "done", "ok": None})
                elif op == "forbid":
                    for name in header.get("names", []):
                        forbid(name)
                    self.chan.send({"op": "done", "ok": None})
                elif op == "call":
                    self.call(header, buffers)
                elif op == "get":
                    self.get(header)
                elif op == "hold":
                    value = self.decode(header.get("value"), buffers)
                    self.chan.send({"op": "done", "ok": self._keep(value)})
                elif op == "release":
                    self.handles.pop(header.get("handle"), None)
                    self.chan.send({"op": "done", "ok": None})
                elif op == "relay":
                    from . import relay

                    if self.relay_fd is None:
                        raise RuntimeError("this process has no relay channel")
                    relay.join(socket.socket(fileno=self.relay_fd), int(header["rank"]), int(header["world"]),
                               collectives=bool(header.get("collectives", False)))
                    self.chan.send({"op": "done", "ok": None})
                elif op == "exit":
                    self.chan.send({"op": "done", "ok": None})
                    return
                else:
                    raise wire.WireError(f"unknown request {str(op)[:40]!r}")
            except (wire.WireError, EOFError, BrokenPipeError):
                raise
            except BaseException as exc:  # noqa: BLE001 - the student's exception, reported as data
                self.raised(exc)


_MISSING = object()


def _text(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # noqa: BLE001
        return f"<{type(exc).__name__} whose str() failed>"


def serve(fd: int, relay_fd: int | None = None) -> None:
    """Run the request loop on the connected socket ``fd`` until the trusted side closes it."""
    chan = wire.Channel(socket.socket(fileno=fd))
    chan.send({"op": "hello"})
    Host(chan, relay_fd).loop()
