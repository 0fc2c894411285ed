"""The wire between the trusted checker and a process that runs student code: plain data only.

A hidden check (the trusted side, :mod:`autograder.trusted`) and the process
that runs the student's solution (:mod:`dlperf.grading.host`) exchange
*frames* over a Unix socket.  Nothing on this wire is executable: no pickle,
no code objects, no class that runs code when it is rebuilt.  A frame is a
JSON header and raw byte buffers (tensor data), optionally with file
descriptors (shared memory the trusted side owns), and the values it carries
are built from a closed set of types:

===========================  ==================================================
value                        JSON
===========================  ==================================================
None, bool, int, float, str  themselves (``NaN``, ``Infinity`` as Python's json)
list                         a JSON array
tuple, dict                  ``{"$": "tuple", "items": [...]}``,
                             ``{"$": "dict", "items": [[key, value], ...]}``
torch.Tensor                 ``{"$": "tensor", "buf": i, "dtype", "shape",
                             "device", "requires_grad"}`` (bytes in buffer i)
torch.dtype, torch.device    ``{"$": "dtype", "name"}``, ``{"$": "device", "name"}``
shared tensor (trusted ->)   ``{"$": "shared", "region", "offset", "dtype",
                             "shape", "stride", "requires_grad"}``
handle (<- host)             ``{"$": "handle", "id", "type"}``: an object kept in
                             the student's process
remote, callback (trusted->) ``{"$": "remote", "id", "methods", "attrs"}``,
                             ``{"$": "callback", "id", "name"}``: objects and
                             functions that live on the trusted side
anything else (<- host)      ``{"$": "object", "type", "repr"}`` (:class:`Opaque`)
===========================  ==================================================

:func:`decode` is strict: unknown tags, dtypes outside :data:`DTYPES`,
shapes that disagree with their buffer, oversized strings, deep nesting and
oversized frames raise :class:`WireError`.  The trusted side decodes every
frame from the student's process this way and trusts none of it beyond its
value.
"""

from __future__ import annotations

import array
import json
import math
import socket
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = [
    "DTYPES",
    "Channel",
    "Decoded",
    "Encoder",
    "Opaque",
    "WireError",
    "decode",
    "dtype_name",
]

DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "complex64": torch.complex64, "complex128": torch.complex128,
}
_NAMES = {v: k for k, v in DTYPES.items()}

# A frame is bounded before it is read: what a peer sends can make the reader hold at most about
# MAX_HEADER of JSON (a few times that as Python objects), and MAX_FRAME of buffers (twice that while
# a tensor is rebuilt from one).  The largest frame a check sends today is a 32 MiB tensor.
MAX_HEADER = 8 * 2**20           # bytes of JSON in one frame
MAX_FRAME = 256 * 2**20          # bytes of buffers in one frame
MAX_BUFFERS = 100_000
MAX_FDS = 64
MAX_DEPTH = 40
MAX_STRING = 20_000              # characters of one string (longer ones are cut, never refused)
MAX_ITEMS = 1_000_000            # elements of one container
MAX_VALUES = 2_000_000           # values decoded from one frame, all containers together

_HEAD = struct.Struct("<II")     # header length, number of buffers
_LEN = struct.Struct("<Q")


class WireError(ValueError):
    """A frame or a value that breaks the protocol (malformed, oversized, of a type the wire does not carry)."""


@dataclass(frozen=True)
class Opaque:
    """An object of the student's process that the wire does not carry: its type name and a short repr."""

    type: str
    repr: str

    def __repr__(self) -> str:
        return f"<{self.type} object: {self.repr}>"


def dtype_name(dtype: torch.dtype) -> str:
    """``"float32"`` for ``torch.float32``; :class:`WireError` for a dtype the wire does not carry."""
    try:
        return _NAMES[dtype]
    except KeyError:
        raise WireError(f"tensors of dtype {dtype} cannot be sent") from None


def _short(text: str, limit: int = MAX_STRING) -> str:
    return text if len(text) <= limit else text[: limit - 15] + " ...[truncated]"


# ---------------------------------------------------------------------------------------------
# Encoding
# ---------------------------------------------------------------------------------------------


@dataclass
class Encoder:
    """Turns a value into JSON-able data plus buffers.

    ``special(value)`` is asked first for every value and may return the JSON of
    it (the host uses it for handles, the trusted side for shared tensors,
    remote objects and callbacks), or ``None``.  ``fallback(value)`` handles a
    value of no known type (default: :class:`WireError`; the host encodes it as
    :class:`Opaque`).
    """

    special: Callable[[Any], Any] | None = None
    fallback: Callable[[Any], Any] | None = None
    buffers: list[bytes | memoryview] = field(default_factory=list)

    def encode(self, value: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise WireError("a value nested too deeply to be sent")
        if self.special is not None:
            found = self.special(value)
            if found is not None:
                return found
        if value is None or isinstance(value, (bool, str)):
            return _short(value) if isinstance(value, str) else value
        if type(value) is int:
            return value
        if type(value) is float:
            return value
        if isinstance(value, torch.Tensor):
            return self.tensor(value)
        if type(value) is list:
            return [self.encode(v, depth + 1) for v in value]
        if type(value) is tuple:
            return {"$": "tuple", "items": [self.encode(v, depth + 1) for v in value]}
        if type(value) is dict:
            return {"$": "dict", "items": [[self.encode(k, depth + 1), self.encode(v, depth + 1)]
                                           for k, v in value.items()]}
        if isinstance(value, torch.dtype):
            return {"$": "dtype", "name": dtype_name(value)}
        if isinstance(value, torch.device):
            return {"$": "device", "name": str(value)}
        if self.fallback is not None:
            return self.fallback(value)
        raise WireError(f"a {type(value).__name__} cannot be sent")

    def tensor(self, t: torch.Tensor) -> dict[str, Any]:
        data = t.detach()
        if data.is_sparse or data.layout != torch.strided:
            raise WireError("only dense tensors can be sent")
        device = str(data.device)
        name = dtype_name(data.dtype)
        flat = data.to("cpu").contiguous().reshape(-1)
        if flat.dtype == torch.bfloat16:
            raw = flat.view(torch.int16).numpy().tobytes()
        elif flat.is_complex():
            raw = torch.view_as_real(flat).numpy().tobytes()
        else:
            raw = flat.numpy().tobytes()
        self.buffers.append(raw)
        return {"$": "tensor", "buf": len(self.buffers) - 1, "dtype": name, "shape": list(data.shape),
                "device": device, "requires_grad": bool(t.requires_grad)}


def opaque(value: Any) -> dict[str, Any]:
    """The fallback of the untrusted side: an object the wire does not carry, by type name and repr."""
    try:
        text = repr(value)
    except Exception as exc:  # noqa: BLE001 - a broken __repr__ is the student's business
        text = f"<repr failed: {type(exc).__name__}>"
    return {"$": "object", "type": _short(type(value).__qualname__, 200), "repr": _short(str(text), 500)}


# ---------------------------------------------------------------------------------------------
# Decoding (strict)
# ---------------------------------------------------------------------------------------------


@dataclass
class Decoded:
    """How to rebuild the tags that only one side understands (handles, shared tensors, remotes)."""

    buffers: Sequence[bytes]
    tags: dict[str, Callable[[dict[str, Any]], Any]] = field(default_factory=dict)
    devices: Callable[[str], str] | None = None
    values: int = 0      # decoded so far (bounded by MAX_VALUES)


def _int_list(value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or len(value) > 64 or not all(type(v) is int and v >= 0 for v in value):
        raise WireError(f"malformed {what}")
    return value


def _tensor(obj: dict[str, Any], ctx: Decoded) -> torch.Tensor:
    name = obj.get("dtype")
    if name not in DTYPES:
        raise WireError(f"unknown dtype {str(name)[:40]!r}")
    dtype = DTYPES[name]
    shape = _int_list(obj.get("shape"), "tensor shape")
    index = obj.get("buf")
    if type(index) is not int or not 0 <= index < len(ctx.buffers):
        raise WireError("a tensor refers to a missing buffer")
    raw = ctx.buffers[index]
    numel = math.prod(shape)
    itemsize = torch.empty((), dtype=dtype).element_size()
    if numel * itemsize != len(raw):
        raise WireError(f"a tensor of shape {shape} and dtype {name} does not have {len(raw)} bytes")
    if numel == 0:
        tensor = torch.empty(shape, dtype=dtype)
    elif dtype == torch.bfloat16:
        tensor = torch.frombuffer(bytearray(raw), dtype=torch.int16).view(torch.bfloat16).reshape(shape)
    elif dtype.is_complex:
        real = torch.float32 if dtype == torch.complex64 else torch.float64
        tensor = torch.view_as_complex(torch.frombuffer(bytearray(raw), dtype=real).reshape(*shape, 2))
    else:
        tensor = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
    device = obj.get("device", "cpu")
    if not isinstance(device, str) or len(device) > 20:
        raise WireError("malformed device")
    if device != "cpu":
        target = ctx.devices(device) if ctx.devices is not None else "cpu"
        tensor = tensor.to(target)
    if obj.get("requires_grad") is True and dtype.is_floating_point:
        tensor.requires_grad_()
    return tensor


def decode(data: Any, ctx: Decoded, depth: int = 0) -> Any:
    """Rebuild a value from its JSON; :class:`WireError` for anything the protocol does not allow."""
    if depth > MAX_DEPTH:
        raise WireError("a value nested too deeply")
    ctx.values += 1
    if ctx.values > MAX_VALUES:
        raise WireError(f"more than {MAX_VALUES:,} values in one frame")
    if data is None or isinstance(data, (bool, int, float)):
        return data
    if isinstance(data, str):
        return _short(data)
    if isinstance(data, list):
        if len(data) > MAX_ITEMS:
            raise WireError("a list too long")
        return [decode(v, ctx, depth + 1) for v in data]
    if not isinstance(data, dict):
        raise WireError(f"unexpected JSON {type(data).__name__}")
    tag = data.get("$")
    if tag == "tuple":
        items = data.get("items")
        if not isinstance(items, list) or len(items) > MAX_ITEMS:
            raise WireError("malformed tuple")
        return tuple(decode(v, ctx, depth + 1) for v in items)
    if tag == "dict":
        items = data.get("items")
        if not isinstance(items, list) or len(items) > MAX_ITEMS:
            raise WireError("malformed dict")
        out = {}
        for pair in items:
            if not isinstance(pair, list) or len(pair) != 2:
                raise WireError("malformed dict item")
            key = decode(pair[0], ctx, depth + 1)
            try:
                hash(key)
            except TypeError:
                raise WireError("a dict key that cannot be hashed") from None
            out[key] = decode(pair[1], ctx, depth + 1)
        return out
    if tag == "tensor":
        return _tensor(data, ctx)
    if tag == "dtype":
        name = data.get("name")
        if name not in DTYPES:
            raise WireError("unknown dtype")
        return DTYPES[name]
    if tag == "device":
        name = data.get("name")
        if not isinstance(name, str) or len(name) > 20:
            raise WireError("malformed device")
        try:
            return torch.device(name)
        except RuntimeError:
            raise WireError("malformed device") from None
    if tag == "object":
        return Opaque(_short(str(data.get("type", "?")), 200), _short(str(data.get("repr", "")), 500))
    if isinstance(tag, str) and tag in ctx.tags:
        return ctx.tags[tag](data)
    raise WireError(f"unexpected tag {str(tag)[:40]!r}")


# ---------------------------------------------------------------------------------------------
# Frames on a socket
# ---------------------------------------------------------------------------------------------


class Channel:
    """Frames over a connected Unix stream socket: ``send(header, buffers, fds)`` / ``recv()``.

    A frame is ``<u32 header length><u32 buffer count>``, the JSON header, then
    each buffer as ``<u64 length><bytes>``.  File descriptors travel with the
    frame's first bytes (``SCM_RIGHTS``).  ``recv`` checks every length against
    the limits before reading, so a peer cannot make the reader allocate more
    than :data:`MAX_FRAME`.  A closed or broken peer raises ``EOFError``; a
    malformed frame raises :class:`WireError`.  One thread sends and one
    receives at a time (the callers lock).
    """

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.bytes_in = 0
        self.bytes_out = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, header: Any, buffers: Sequence[bytes | memoryview] = (), fds: Sequence[int] = ()) -> None:
        text = json.dumps(header, separators=(",", ":")).encode()
        head = _HEAD.pack(len(text), len(buffers))
        if fds:
            self.sock.sendmsg([head], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
        else:
            self.sock.sendall(head)
        parts = [text]
        for buf in buffers:
            parts.append(_LEN.pack(len(buf)))
            parts.append(buf)
        for part in parts:
            self.sock.sendall(part)
        self.bytes_out += len(head) + sum(len(p) for p in parts)

    def _exact(self, n: int) -> bytearray:
        out = bytearray(n)
        view = memoryview(out)
        got = 0
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if k == 0:
                raise EOFError("the peer closed the channel")
            got += k
        self.bytes_in += n
        return out

    def recv(self) -> tuple[Any, list[bytes], list[int]]:
        fds: list[int] = []
        head = bytearray()
        while len(head) < _HEAD.size:
            data, ancillary, _, _ = self.sock.recvmsg(_HEAD.size - len(head),
                                                      socket.CMSG_SPACE(MAX_FDS * 4))
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(payload[: len(payload) - len(payload) % 4])
                    fds.extend(got)
            if not data:
                for fd in fds:
                    _close(fd)
                raise EOFError("the peer closed the channel")
            head += data
        self.bytes_in += len(head)
        length, count = _HEAD.unpack(head)
        if length > MAX_HEADER or count > MAX_BUFFERS:
            for fd in fds:
                _close(fd)
            raise WireError(f"a frame too large ({length} bytes of header, {count} buffers)")
        text = self._exact(length)
        if text.count(b"[") + text.count(b"{") > MAX_VALUES // 2:   # before parsing: each becomes an object
            for fd in fds:
                _close(fd)
            raise WireError(f"more than {MAX_VALUES // 2:,} lists and objects in one frame")
        try:
            header = json.loads(text)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError, ValueError) as exc:
            for fd in fds:
                _close(fd)
            raise WireError(f"a malformed frame header ({type(exc).__name__})") from None
        buffers: list[bytearray] = []
        total = 0
        for _ in range(count):
            (size,) = _LEN.unpack(self._exact(_LEN.size))
            total += size
            if total > MAX_FRAME:
                for fd in fds:
                    _close(fd)
                raise WireError(f"a frame larger than {MAX_FRAME // 2**20} MiB")
            buffers.append(self._exact(size))      # a bytearray: no second copy of a large buffer
        return header, buffers, fds

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _close(fd: int) -> None:
    import os

    try:
        os.close(fd)
    except OSError:
        pass
