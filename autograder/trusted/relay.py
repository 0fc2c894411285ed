"""The relay: every message between the ranks of a graded process group passes here, and is counted here.

Each rank of a graded run is a host in namespaces of its own (no network, no
shared file): its only way to another rank is its relay socket to this
process (:mod:`dlperf.grading.relay` is its end).  The relay matches each
``send`` with a ``recv`` of the same pair and tag (in order), delivers the
data, completes the send (so a ``send`` returns once its receive is posted,
as on gloo), and counts, with counters no student code can reach:

* per rank: bytes and messages sent and received, the peers it sent to;
* per directed pair: bytes.

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

    def as_dict(self) -> dict[str, Any]:
        return {"bytes_sent": self.bytes_sent, "bytes_received": self.bytes_received,
                "messages_sent": self.messages_sent, "messages_received": self.messages_received,
                "peers_sent": sorted(self.peers_sent)}


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


def _size(n: int) -> str:
    return f"{n} bytes" if n < 10_000 else f"{n / 1e6:.3g} MB"


class Relay:
    """Routes and counts the messages of ``len(socks)`` ranks (rank ``i`` on ``socks[i]``)."""

    def __init__(self, socks: list[socket.socket], on_stall: Callable[[str], None] | None = None):
        self.n = len(socks)
        self.chans = [wire.Channel(s) for s in socks]
        self.on_stall = on_stall
        self.lock = threading.RLock()
        self.traffic = [Traffic() for _ in range(self.n)]
        self.pair_bytes: dict[tuple[int, int], int] = {}
        self.sends: dict[tuple[int, int, int], deque[_Send]] = {}
        self.recvs: list[list[_Recv]] = [[] for _ in range(self.n)]
        self.open_sends: dict[tuple[int, int], _Send] = {}
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
            elif op == "wait":
                op_id = int(header["id"])
                if (rank, op_id) in self.open_sends or (rank, op_id) in self.open_recvs:
                    self.waiting[rank] = op_id
                    self._check_stall()
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

    # -- stalls ---------------------------------------------------------------------------------

    def _describe_pending(self) -> list[str]:
        lines = []
        for (rank, _), send in sorted(self.open_sends.items()):
            lines.append(f"rank {rank} sends {_size(len(send.data))} to rank {send.dst} (tag {send.tag}), "
                         "not received")
        for (rank, _), recv in sorted(self.open_recvs.items()):
            source = "any rank" if recv.src == -1 else f"rank {recv.src}"
            lines.append(f"rank {rank} waits to receive {_size(recv.nbytes)} from {source} (tag {recv.tag})")
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
