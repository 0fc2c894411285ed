"""The relay: every message between the ranks of a graded process group passes here, and is counted here.

Each rank of a graded run is a host in namespaces of its own (no network, no
shared file): its only way to another rank is its relay socket to this
process (:mod:`dlperf.grading.relay` is its end).  The relay matches each
``send`` with a ``recv`` of the same pair and tag (in order), delivers the
data, completes the send (so a ``send`` returns once its receive is posted,
as on gloo), and counts, with counters no student code can reach:

* per rank: bytes and messages sent and received, the peers it sent to;
* per directed pair: bytes.

Collectives, only when the group was opened with ``collectives=True``
(:class:`~autograder.trusted.Ranks`; otherwise a rank that posts one fails the
run, whatever its own process allows): ``broadcast``, ``allreduce`` (sum),
``allgather``, ``reduce_scatter`` (sum) and ``barrier``.  Each rank posts its
contribution; the relay numbers each rank's collectives itself (the k-th
collective of every rank is one operation), waits until every rank has posted
the k-th, requires the same operation, root, dtype and size from all (a
mismatch fails every rank with both calls named), computes the result itself
(in the tensors' dtype, summing ranks 0, 1, ..., n-1 in that order) and
delivers it.  A rank that never posts is a deadlock, reported like a
point-to-point one.  With S the bytes of one rank's tensor (``numel`` elements
of the dtype: the tensor broadcast or reduced, each rank's input to an
all-gather, each rank's output of a reduce-scatter), the counters are, per rank:

* ``collective_calls``: calls per operation;
* ``bytes_contributed``: bytes the rank sends in: broadcast, S from the root and
  0 from the others; allreduce S; allgather S; reduce_scatter n*S; barrier 0;
* ``bytes_delivered``: bytes the relay writes into the rank's tensors:
  broadcast S to every rank but the root (0 there); allreduce S; allgather n*S;
  reduce_scatter S; barrier 0.

and :attr:`Relay.collectives` logs each completed collective in order (operation,
root, dtype, numel, bytes contributed and delivered per rank).

A collective's result reaches a rank only when that rank asks for it: the
relay computes it once every rank has posted, and sends it to a rank when that
rank waits for it (``Work.wait()``, or a blocking call, which waits) or polls it
(``Work.is_completed()``).  A rank that waits only for its last handle never
receives the others' results (their tensors keep what the rank put in), and a
rank cannot block on a result without the relay seeing it ask.

:attr:`Relay.timeline` keeps, per rank, what that rank did in the order the
relay received it: ``("post", k, operation, numel)`` when it posted its k-th
collective (``k`` from 0), ``("wait", k)`` when it waited for it, ``("poll", k)``
the first time it polled it, and ``("mark", label)`` or ``("mark", label, key)``
for a mark (:func:`dlperf.grading.relay.mark`, sent by a grader's probe, e.g. from
a gradient hook; ``key`` is whatever the probe was given to sign its marks with:
the relay records it, and the checker that chose it accepts only the marks that
carry it).  One rank's frames arrive in the order it sent them, so the timeline
orders its events exactly, with no clock: it shows, for instance, that a bucket's
all-reduce was posted before the backward pass computed the next gradient, and
that the rank did not wait for it until the pass had ended.

It also sees who is waiting for what: when every rank that is still inside
the graded call waits on an operation that nothing can complete, that is a
deadlock, reported at once with each rank's pending operations (``on_stall``).

The relay runs on two kinds of threads: one reader that handles every frame
from every rank, and one writer per rank (a rank that does not read cannot
block the others).
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import selectors
import socket
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dlperf.grading import wire

__all__ = ["Relay", "Traffic"]


@dataclass
class Traffic:
    """What one rank did through the relay (since the last :meth:`Relay.reset`)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    peers_sent: set[int] = field(default_factory=set)
    collective_calls: dict[str, int] = field(default_factory=dict)
    bytes_contributed: int = 0
    bytes_delivered: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "messages_sent": self.messages_sent, "messages_received": self.messages_received,
                "peers_sent": sorted(self.peers_sent), "collective_calls": dict(self.collective_calls),
                "bytes_contributed": self.bytes_contributed, "bytes_delivered": self.bytes_delivered}


@dataclass
class _Send:
    rank: int
    op_id: int
    dst: int
    tag: int
    data: bytes
    seq: int = 0      # arrival order at the relay


@dataclass
class _Recv:
    rank: int
    op_id: int
    src: int          # -1: any source
    tag: int
    nbytes: int


@dataclass
class _Coll:
    rank: int
    op_id: int
    sig: tuple[str, int, str, int]    # operation, root, dtype, numel
    data: bytes


COLLECTIVES = ("broadcast", "allreduce", "allgather", "reduce_scatter", "barrier")
# Bytes of point-to-point sends the relay holds for receives not yet posted, all ranks together: each frame
# is bounded by the wire, their sum by this (a rank sending what no rank receives would otherwise grow the
# check run's memory without end).
MAX_PENDING_BYTES = 512 * 2**20


def _describe(sig: tuple[str, int, str, int]) -> str:
    kind, root, dtype, numel = sig
    if kind == "barrier":
        return "barrier"
    what = f"{kind} of {numel} {dtype} elements"
    return f"{what} from rank {root}" if kind == "broadcast" else what


def _size(n: int) -> str:
    return f"{n} bytes" if n < 10_000 else f"{n / 1e6:.3g} MB"


class Relay:
    """Routes and counts the messages of ``len(socks)`` ranks (rank ``i`` on ``socks[i]``)."""

    def __init__(self, socks: list[socket.socket], on_stall: Callable[[str], None] | None = None,
                 collectives: bool = False):
        self.n = len(socks)
        self.allow_collectives = collectives
        self.coll_seq = [0] * self.n                 # the number of collectives each rank has posted
        self.coll_open: dict[int, dict[int, _Coll]] = {}
        self.open_colls: dict[tuple[int, int], int] = {}
        self.collectives: list[dict[str, Any]] = []
        self.timeline: list[list[tuple[Any, ...]]] = [[] for _ in range(self.n)]
        self.coll_ids: dict[tuple[int, int], int] = {}   # (rank, op id) -> the collective's number k
        self.results: dict[tuple[int, int], tuple[dict[str, Any], list[bytes]]] = {}   # computed, not yet asked for
        self.polled: set[tuple[int, int]] = set()
        self.chans = [wire.Channel(s) for s in socks]
        self.on_stall = on_stall
        self.lock = threading.RLock()
        self.traffic = [Traffic() for _ in range(self.n)]
        self.pair_bytes: dict[tuple[int, int], int] = {}
        self.sends: dict[tuple[int, int, int], deque[_Send]] = {}
        self.recvs: list[list[_Recv]] = [[] for _ in range(self.n)]
        self.open_sends: dict[tuple[int, int], _Send] = {}
        self.pending_bytes = 0      # held in open sends (bounded by MAX_PENDING_BYTES)
        self.open_recvs: dict[tuple[int, int], _Recv] = {}
        self.waiting: dict[int, int] = {}            # rank -> the op id it waits for
        self.active: set[int] = set()                # ranks inside the graded call
        self.problem: str | None = None
        self.arrivals = itertools.count()
        self.outboxes = [queue.Queue[Any]() for _ in range(self.n)]
        self.selector = selectors.DefaultSelector()
        for rank, chan in enumerate(self.chans):
            self.selector.register(chan.sock, selectors.EVENT_READ, rank)
        self.closed = False
        self.threads = [threading.Thread(target=self._read_loop, daemon=True, name="relay-reader")]
        self.threads += [threading.Thread(target=self._write_loop, args=(r,), daemon=True, name=f"relay-writer-{r}")
                         for r in range(self.n)]
        for thread in self.threads:
            thread.start()

    # -- what the driver uses -----------------------------------------------------------------

    def reset(self) -> None:
        """Zero the counters (between graded calls)."""
        with self.lock:
            self.traffic = [Traffic() for _ in range(self.n)]
            self.pair_bytes = {}
            self.collectives = []
            self.timeline = [[] for _ in range(self.n)]
            self.coll_ids = {}
            self.polled = set()
            self.coll_seq = [0] * self.n
            self.coll_open = {}
            self.open_colls = {}

    def begin(self, ranks: set[int]) -> None:
        """These ranks are now inside the graded call."""
        with self.lock:
            self.active = set(ranks)
            self.problem = None

    def end(self, rank: int) -> None:
        """This rank returned from the graded call."""
        with self.lock:
            self.active.discard(rank)
            self.waiting.pop(rank, None)
            self._check_stall()

    def pending(self) -> list[str]:
        """Each operation not completed yet, as a phrase."""
        with self.lock:
            return self._describe_pending()

    def close(self) -> None:
        self.closed = True
        for box in self.outboxes:
            box.put(None)
        for chan in self.chans:
            with contextlib.suppress(OSError):
                chan.sock.shutdown(socket.SHUT_RDWR)
            chan.close()
        with contextlib.suppress(Exception):
            self.selector.close()

    # -- the reader -----------------------------------------------------------------------------

    def _read_loop(self) -> None:
        while not self.closed:
            try:
                events = self.selector.select(timeout=0.2)
            except (OSError, ValueError):
                return
            for key, _ in events:
                rank = key.data
                try:
                    header, buffers, fds = self.chans[rank].recv()
                except (EOFError, OSError, wire.WireError) as exc:
                    with contextlib.suppress(Exception):
                        self.selector.unregister(key.fileobj)
                    if not self.closed and not isinstance(exc, EOFError):
                        self._fail(f"rank {rank} broke the relay's protocol ({exc})")
                    continue
                for fd in fds:
                    wire._close(fd)
                try:
                    self._handle(rank, header, buffers)
                except (KeyError, TypeError, ValueError) as exc:
                    self._fail(f"rank {rank} sent a malformed message to the relay ({type(exc).__name__})")

    def _handle(self, rank: int, header: dict[str, Any], buffers: list[bytes]) -> None:
        op = header.get("op")
        with self.lock:
            if op == "send":
                dst, tag, op_id = int(header["dst"]), int(header["tag"]), int(header["id"])
                if not 0 <= dst < self.n:
                    raise ValueError("destination")
                data = buffers[0] if buffers else b""
                if self.pending_bytes + len(data) > MAX_PENDING_BYTES:
                    self._fail(f"rank {rank} sent more than {_size(MAX_PENDING_BYTES)} that no rank has received "
                               "(every send waits in the relay until its receive is posted)")
                    return
                self.pending_bytes += len(data)
                send = _Send(rank, op_id, dst, tag, data, next(self.arrivals))
                t = self.traffic[rank]
                t.bytes_sent += len(data)
                t.messages_sent += 1
                t.peers_sent.add(dst)
                self.pair_bytes[(rank, dst)] = self.pair_bytes.get((rank, dst), 0) + len(data)
                self.open_sends[(rank, op_id)] = send
                self.sends.setdefault((rank, dst, tag), deque()).append(send)
                self._match(dst)
            elif op == "recv":
                src, tag, op_id = int(header["src"]), int(header["tag"]), int(header["id"])
                if not -1 <= src < self.n:
                    raise ValueError("source")
                recv = _Recv(rank, op_id, src, tag, int(header["nbytes"]))
                self.open_recvs[(rank, op_id)] = recv
                self.recvs[rank].append(recv)
                self._match(rank)
            elif op == "coll":
                self._post_collective(rank, header, buffers)
            elif op == "mark":
                label = str(header.get("label", ""))[:80]
                key = header.get("key")
                self.timeline[rank].append(("mark", label) if key is None else ("mark", label, str(key)[:64]))
                if "id" in header:     # a flush: the rank waits until the relay has taken the mark
                    self.outboxes[rank].put(({"op": "sent", "id": int(header["id"])}, []))
            elif op == "wait":
                op_id = int(header["id"])
                if (rank, op_id) in self.coll_ids:
                    self.timeline[rank].append(("wait", self.coll_ids[(rank, op_id)]))
                if (rank, op_id) in self.results:
                    self.outboxes[rank].put(self.results.pop((rank, op_id)))
                elif ((rank, op_id) in self.open_sends or (rank, op_id) in self.open_recvs
                        or (rank, op_id) in self.open_colls):
                    self.waiting[rank] = op_id
                    self._check_stall()
            elif op == "poll":       # Work.is_completed(): the result if it is there, else "pending"
                op_id = int(header["id"])
                if (rank, op_id) in self.coll_ids and (rank, op_id) not in self.polled:
                    self.polled.add((rank, op_id))
                    self.timeline[rank].append(("poll", self.coll_ids[(rank, op_id)]))
                if (rank, op_id) in self.results:
                    self.outboxes[rank].put(self.results.pop((rank, op_id)))
                else:
                    self.outboxes[rank].put(({"op": "pending", "id": op_id}, []))
            else:
                raise ValueError("operation")

    def _match(self, dst: int) -> None:
        """Pair the posted receives of rank ``dst`` with waiting sends, oldest first."""
        progress = True
        while progress:
            progress = False
            for recv in list(self.recvs[dst]):
                candidates = [q for (s, d, tag), q in self.sends.items()
                              if d == dst and tag == recv.tag and q and (recv.src in (-1, s))]
                if not candidates:
                    continue
                queue_ = min(candidates, key=lambda q: q[0].seq)
                send = queue_.popleft()
                self.recvs[dst].remove(recv)
                self._complete(send, recv)
                progress = True
                break

    def _complete(self, send: _Send, recv: _Recv) -> None:
        self.open_sends.pop((send.rank, send.op_id), None)
        self.pending_bytes -= len(send.data)
        self.open_recvs.pop((recv.rank, recv.op_id), None)
        for rank, op_id in ((send.rank, send.op_id), (recv.rank, recv.op_id)):
            if self.waiting.get(rank) == op_id:
                del self.waiting[rank]
        if len(send.data) != recv.nbytes:
            message = (f"rank {send.rank} sent {_size(len(send.data))} to rank {recv.rank}, which posted a receive "
                       f"of {_size(recv.nbytes)} (tag {recv.tag}): the sizes must match")
            self.outboxes[recv.rank].put(({"op": "error", "id": recv.op_id, "message": message}, []))
            self.outboxes[send.rank].put(({"op": "error", "id": send.op_id, "message": message}, []))
            return
        t = self.traffic[recv.rank]
        t.bytes_received += len(send.data)
        t.messages_received += 1
        self.outboxes[recv.rank].put(({"op": "deliver", "id": recv.op_id, "src": send.rank}, [send.data]))
        self.outboxes[send.rank].put(({"op": "sent", "id": send.op_id}, []))

    # -- collectives ----------------------------------------------------------------------------

    def _post_collective(self, rank: int, header: dict[str, Any], buffers: list[bytes]) -> None:
        import torch

        op_id, kind = int(header["id"]), str(header["kind"])
        if kind not in COLLECTIVES:
            raise ValueError("collective")
        if not self.allow_collectives:
            message = (f"rank {rank} called the collective {kind}: this process group has point-to-point operations "
                       "only (send, recv, isend, irecv, batch_isend_irecv)")
            self.outboxes[rank].put(({"op": "error", "id": op_id, "message": message}, []))
            self._fail(message)
            return
        root, dtype, numel = int(header.get("root", -1)), str(header.get("dtype", "")), int(header.get("numel", 0))
        if kind == "barrier":
            root, dtype, numel = -1, "", 0
        elif dtype not in wire.DTYPES or numel < 0:
            raise ValueError("dtype or size")
        if kind != "broadcast":
            root = -1
        elif not 0 <= root < self.n:
            raise ValueError("root")
        size = numel * (wire.DTYPES[dtype].itemsize if dtype else 0)
        data = b"".join(buffers)
        want = {"broadcast": size if rank == root else 0, "allreduce": size, "allgather": size,
                "reduce_scatter": self.n * size, "barrier": 0}[kind]
        if len(data) != want or (kind in ("allreduce", "reduce_scatter") and dtype in ("bool",)):
            raise ValueError("contribution")
        seq = self.coll_seq[rank]
        self.coll_seq[rank] += 1
        self.coll_ids[(rank, op_id)] = seq
        self.timeline[rank].append(("post", seq, kind, numel))
        sig = (kind, root, dtype, numel)
        entry = self.coll_open.setdefault(seq, {})
        first = next(iter(entry.values()), None)
        t = self.traffic[rank]
        t.collective_calls[kind] = t.collective_calls.get(kind, 0) + 1
        t.bytes_contributed += len(data)
        if first is not None and first.sig != sig:
            self._fail(f"collective #{seq + 1}: rank {first.rank} called {_describe(first.sig)} while rank {rank} "
                       f"called {_describe(sig)}: every rank must call the same collectives in the same order, with "
                       "the same root, dtype and size")
            return
        entry[rank] = _Coll(rank, op_id, sig, data)
        self.open_colls[(rank, op_id)] = seq
        if len(entry) < self.n:
            return
        del self.coll_open[seq]
        posts = [entry[r] for r in range(self.n)]
        out: list[list[bytes]]
        if kind == "broadcast":
            out = [[] if r == root else [posts[root].data] for r in range(self.n)]
        elif kind == "barrier":
            out = [[] for _ in range(self.n)]
        elif kind == "allgather":
            out = [[p.data for p in posts] for _ in range(self.n)]
        else:
            tdtype = wire.DTYPES[dtype]
            parts = [torch.frombuffer(bytearray(p.data), dtype=tdtype) if p.data else torch.empty(0, dtype=tdtype)
                     for p in posts]
            total = parts[0].clone()
            for part in parts[1:]:
                total = total + part
            raw = total.view(torch.uint8).numpy().tobytes() if total.numel() else b""
            if kind == "allreduce":
                out = [[raw] for _ in range(self.n)]
            else:
                out = [[raw[r * size:(r + 1) * size]] for r in range(self.n)]
        delivered = [sum(len(b) for b in bufs) for bufs in out]
        for r, post in enumerate(posts):
            self.open_colls.pop((r, post.op_id), None)
            self.traffic[r].bytes_delivered += delivered[r]
            answer = ({"op": "deliver", "id": post.op_id, "src": root}, out[r])
            if self.waiting.get(r) == post.op_id:     # the rank asked for it already
                del self.waiting[r]
                self.outboxes[r].put(answer)
            else:                                     # kept until the rank waits for it or polls it
                self.results[(r, post.op_id)] = answer
        self.collectives.append({"op": kind, "root": root, "dtype": dtype, "numel": numel,
                                 "contributed": [len(p.data) for p in posts], "delivered": delivered})

    # -- stalls ---------------------------------------------------------------------------------

    def _describe_pending(self) -> list[str]:
        lines = []
        for (rank, _), send in sorted(self.open_sends.items()):
            lines.append(f"rank {rank} sends {_size(len(send.data))} to rank {send.dst} (tag {send.tag}), "
                         "not received")
        for (rank, _), recv in sorted(self.open_recvs.items()):
            source = "any rank" if recv.src == -1 else f"rank {recv.src}"
            lines.append(f"rank {rank} waits to receive {_size(recv.nbytes)} from {source} (tag {recv.tag})")
        for seq, entry in sorted(self.coll_open.items()):
            missing = [r for r in range(self.n) if r not in entry]
            sig = next(iter(entry.values())).sig
            lines.append(f"ranks {sorted(entry)} wait in collective #{seq + 1} ({_describe(sig)}), which rank"
                         f"{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} never called")
        return lines

    def _check_stall(self) -> None:
        if not self.active or self.problem is not None:
            return
        if all(rank in self.waiting for rank in self.active):
            ranks = ", ".join(str(r) for r in sorted(self.active))
            self._fail(f"deadlock: every rank still running ({ranks}) waits for a message that no rank will send or "
                       "receive:\n  " + "\n  ".join(self._describe_pending()))

    def _fail(self, message: str) -> None:
        with self.lock:
            if self.problem is not None:
                return
            self.problem = message
        if self.on_stall is not None:
            self.on_stall(message)

    # -- writers --------------------------------------------------------------------------------

    def _write_loop(self, rank: int) -> None:
        box = self.outboxes[rank]
        while True:
            item = box.get()
            if item is None:
                return
            header, buffers = item
            try:
                self.chans[rank].send(header, buffers)
            except OSError:
                return
