"""The wire between a hidden check and the student's process: plain data, decoded strictly."""

from __future__ import annotations

import json
import math
import socket
import struct

import pytest
import torch

from dlperf.grading import wire


def _roundtrip(value, **kwargs):
    enc = wire.Encoder(**kwargs)
    data = json.loads(json.dumps(enc.encode(value)))
    return wire.decode(data, wire.Decoded([bytes(b) for b in enc.buffers]))


@pytest.mark.parametrize("dtype", list(wire.DTYPES.values()))
def test_tensors_of_every_dtype_come_back_bit_for_bit(dtype):
    base = torch.arange(-6, 6).reshape(3, 4)
    t = (base.to(torch.float64) / 3).to(dtype) if dtype.is_floating_point or dtype.is_complex else base.to(dtype)
    got = _roundtrip(t)
    assert type(got) is torch.Tensor and got.dtype == dtype and got.shape == t.shape
    assert torch.equal(got, t)


def test_containers_keep_their_types_and_special_floats_survive():
    value = {"a": [1, 2.5, (None, True, "x")], 3: (torch.zeros(0), torch.tensor(7)), "nan": math.nan,
             "inf": -math.inf, "dtype": torch.float16, "device": torch.device("cpu")}
    got = _roundtrip(value)
    assert type(got) is dict and type(got["a"]) is list and type(got["a"][2]) is tuple and type(got[3]) is tuple
    assert got["a"][:2] == [1, 2.5] and got["a"][2] == (None, True, "x")
    assert math.isnan(got["nan"]) and got["inf"] == -math.inf
    assert got["dtype"] is torch.float16 and got["device"] == torch.device("cpu")
    assert got[3][0].shape == (0,) and got[3][1].item() == 7


def test_a_tensor_that_requires_grad_arrives_as_a_leaf_that_requires_grad():
    got = _roundtrip(torch.ones(3, requires_grad=True))
    assert got.requires_grad and got.is_leaf


def test_types_the_wire_does_not_carry_are_refused_or_made_opaque():
    class Sneaky(float):
        def __eq__(self, other):
            return True

    with pytest.raises(wire.WireError, match="cannot be sent"):
        wire.Encoder().encode(Sneaky(1.0))
    got = _roundtrip(Sneaky(1.0), fallback=wire.opaque)
    assert isinstance(got, wire.Opaque) and got.type.endswith("Sneaky") and got != 1.0


@pytest.mark.parametrize("data, problem", [
    ({"$": "tensor", "buf": 0, "dtype": "object", "shape": [1], "device": "cpu"}, "unknown dtype"),
    ({"$": "tensor", "buf": 0, "dtype": "float32", "shape": [3], "device": "cpu"}, "does not have 4 bytes"),
    ({"$": "tensor", "buf": 5, "dtype": "float32", "shape": [1], "device": "cpu"}, "missing buffer"),
    ({"$": "tensor", "buf": 0, "dtype": "float32", "shape": [-1], "device": "cpu"}, "malformed tensor shape"),
    ({"$": "pickle", "data": "gASV"}, "unexpected tag"),
    ({"$": "dict", "items": [[[1], 2]]}, "cannot be hashed"),
])
def test_decoding_is_strict(data, problem):
    with pytest.raises(wire.WireError, match=problem):
        wire.decode(data, wire.Decoded([b"\0\0\0\0"]))


def test_deep_nesting_is_refused():
    data: list = []
    for _ in range(100):
        data = [data]
    with pytest.raises(wire.WireError, match="nested too deeply"):
        wire.decode(data, wire.Decoded([]))


def test_long_strings_are_cut_not_refused():
    got = wire.decode("x" * 100_000, wire.Decoded([]))
    assert len(got) <= wire.MAX_STRING and got.endswith("[truncated]")


def test_frames_travel_with_buffers_and_descriptors():
    a, b = socket.socketpair()
    left, right = wire.Channel(a), wire.Channel(b)
    r, w = __import__("os").pipe()
    left.send({"op": "x", "n": 1}, [b"abc", b""], fds=[r])
    header, buffers, fds = right.recv()
    assert header == {"op": "x", "n": 1} and buffers == [b"abc", b""] and len(fds) == 1
    __import__("os").write(w, b"!")
    assert __import__("os").read(fds[0], 1) == b"!"


def test_a_frame_that_claims_too_much_is_refused_before_it_is_read():
    a, b = socket.socketpair()
    a.sendall(struct.pack("<II", wire.MAX_HEADER + 1, 0))
    with pytest.raises(wire.WireError, match="too large"):
        wire.Channel(b).recv()
    a2, b2 = socket.socketpair()
    a2.sendall(struct.pack("<II", 2, 1) + b"{}" + struct.pack("<Q", wire.MAX_FRAME + 1))
    with pytest.raises(wire.WireError, match="larger than"):
        wire.Channel(b2).recv()


def test_garbage_is_a_wire_error_and_a_closed_peer_is_eof():
    a, b = socket.socketpair()
    a.sendall(struct.pack("<II", 5, 0) + b"{oops")
    with pytest.raises(wire.WireError, match="malformed"):
        wire.Channel(b).recv()
    c, d = socket.socketpair()
    c.close()
    with pytest.raises(EOFError):
        wire.Channel(d).recv()


def test_the_largest_frame_a_peer_may_send_stays_small_in_the_reader():
    """A protocol-valid header of many tiny values (the most Python objects per byte of JSON) is bounded
    by MAX_HEADER before it is read and by MAX_VALUES while it is decoded: the reader's memory stays
    within a few hundred MiB, where the earlier limits let one frame take several GiB."""
    import resource
    import threading

    a, b = socket.socketpair()
    inner = b"[" + b"[]," * 999 + b"[]]"               # a thousand lists, three bytes each
    count = (wire.MAX_HEADER - 2) // (len(inner) + 1)
    header = b"[" + b",".join([inner] * count) + b"]"
    assert len(header) <= wire.MAX_HEADER
    sender = threading.Thread(target=lambda: a.sendall(struct.pack("<II", len(header), 0) + header))
    sender.start()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(wire.WireError, match="lists and objects in one frame"):
        wire.Channel(b).recv()                          # refused before it is parsed
    sender.join()
    fewer = b"[" + b",".join([inner] * 600) + b"]"    # 600,000 lists: parsed, then refused while decoded
    sender = threading.Thread(target=lambda: a.sendall(struct.pack("<II", len(fewer), 0) + fewer))
    sender.start()
    got, buffers, _ = wire.Channel(b).recv()
    sender.join()
    with pytest.raises(wire.WireError, match="values in one frame"):
        wire.decode([got] * 4, wire.Decoded(buffers))     # 2.4 million values in all
    del got
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 600, f"one frame took {grown_mib:.0f} MiB"
