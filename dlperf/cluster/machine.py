"""The simulated cluster itself: ranks, messages, steps, and the exact accounting of every byte."""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from .topology import LinkKey, Topology


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b``; on the meta device only the shape matters (and meta arithmetic would import torch._dynamo)."""
    if a.is_meta:
        if a.shape != b.shape:
            raise ValueError(f"cannot add shapes {tuple(a.shape)} and {tuple(b.shape)}")
        return a
    return a + b


def _cat(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.cat`` of 1-D tensors, without meta arithmetic (see :func:`_add`)."""
    if tensors and tensors[0].is_meta:
        return torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device="meta")
    return torch.cat(list(tensors))



# --------------------------------------------------------------------------------------------
# The cluster: primitives and accounting
# --------------------------------------------------------------------------------------------


class Message(NamedTuple):
    """One message for :meth:`Cluster.exchange`: ``tensor`` from rank ``src`` to rank ``dst``."""

    src: int
    dst: int
    tensor: torch.Tensor
    note: str = ""


@dataclass(frozen=True)
class Transfer:
    """One message of a step, as the trace keeps it (no tensor, only its size).

    ``start`` and ``end`` are simulated seconds; ``note`` says what was sent
    (for instance ``"chunk 2, sum of 3 ranks"``); ``route`` lists the directed
    links crossed.
    """

    src: int
    dst: int
    nbytes: int
    note: str
    route: tuple[LinkKey, ...]
    start: float
    end: float

    @property
    def cost(self) -> float:
        """Seconds from start to end."""
        return self.end - self.start


@dataclass(frozen=True)
class Step:
    """One synchronous step: its transfers and every rank's clock after it."""

    index: int
    label: str
    transfers: tuple[Transfer, ...]
    clocks: tuple[float, ...]

    @property
    def start(self) -> float:
        """When the first transfer of the step started."""
        return min(t.start for t in self.transfers)

    @property
    def end(self) -> float:
        """When the last transfer of the step ended."""
        return max(t.end for t in self.transfers)

    @property
    def nbytes(self) -> int:
        """Bytes sent in this step, all ranks together."""
        return sum(t.nbytes for t in self.transfers)


class _Pending(NamedTuple):
    src: int
    dst: int
    nbytes: int
    tag: Hashable
    note: str
    payload: torch.Tensor | None


class Cluster:
    """``topology.n`` simulated devices joined by ``topology``'s links, with exact accounting.

    Primitives (what student code calls):

    * ``with cluster.step(): ...`` -- a synchronous step; the :meth:`send` calls
      inside it are concurrent, and their messages are delivered when the block ends;
    * :meth:`send` ``(src, dst, tensor)`` -- outside a step it is a step by itself;
    * :meth:`recv` ``(src, dst)`` -- the oldest delivered message from ``src`` to ``dst``;
    * :meth:`exchange` ``(messages)`` -- one step, returns what each message delivered.

    Read-only accounting: :attr:`clocks`, :attr:`time`, :attr:`steps`,
    :attr:`bytes_sent`, :attr:`bytes_received`, :attr:`messages_sent`,
    :attr:`messages_received`, :attr:`link_bytes`, :attr:`link_messages`,
    :attr:`trace`.  ``memory[r]`` is a dict of tensors that rank ``r`` holds
    (for memory accounting, :meth:`memory_bytes`).  ``on_step``, if given, is
    called with each :class:`Step` as it completes.

    Sent tensors are copied (``detach().clone()``) at :meth:`send`: changing the
    sender's tensor afterwards does not change the message.
    """

    def __init__(self, topology: Topology, *, on_step: Callable[[Step], Any] | None = None):
        self.topology = topology
        self.on_step = on_step
        self.memory: list[dict[str, torch.Tensor]] = [{} for _ in range(topology.n)]
        self.reset()

    def reset(self) -> None:
        """Zero the clocks, counters and trace; drop undelivered messages (``memory`` is kept)."""
        n = self.topology.n
        self._clocks = [0.0] * n
        self._sent = [0] * n
        self._received = [0] * n
        self._msent = [0] * n
        self._mreceived = [0] * n
        self._link_bytes: dict[LinkKey, int] = {link: 0 for link in self.topology.links}
        self._link_messages: dict[LinkKey, int] = {link: 0 for link in self.topology.links}
        self._trace: list[Step] = []
        self._mailbox: dict[tuple[int, int, Hashable], deque[torch.Tensor]] = defaultdict(deque)
        self._open: list[_Pending] | None = None

    # -- read-only state ---------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of ranks."""
        return self.topology.n

    @property
    def clocks(self) -> tuple[float, ...]:
        """Each rank's simulated time in seconds."""
        return tuple(self._clocks)

    @property
    def time(self) -> float:
        """Simulated seconds so far: the latest clock."""
        return max(self._clocks)

    @property
    def steps(self) -> int:
        """Number of steps that carried at least one message."""
        return len(self._trace)

    @property
    def bytes_sent(self) -> tuple[int, ...]:
        """Bytes each rank has sent."""
        return tuple(self._sent)

    @property
    def bytes_received(self) -> tuple[int, ...]:
        """Bytes each rank has received."""
        return tuple(self._received)

    @property
    def messages_sent(self) -> tuple[int, ...]:
        """Messages each rank has sent."""
        return tuple(self._msent)

    @property
    def messages_received(self) -> tuple[int, ...]:
        """Messages each rank has received."""
        return tuple(self._mreceived)

    @property
    def link_bytes(self) -> dict[LinkKey, int]:
        """Bytes that crossed each directed link (a copy)."""
        return dict(self._link_bytes)

    @property
    def link_messages(self) -> dict[LinkKey, int]:
        """Messages that crossed each directed link (a copy)."""
        return dict(self._link_messages)

    @property
    def trace(self) -> tuple[Step, ...]:
        """Every step so far, in order."""
        return tuple(self._trace)

    def memory_bytes(self, rank: int) -> int:
        """Bytes of the tensors in ``memory[rank]``."""
        return sum(_nbytes(t) for t in self.memory[rank].values())

    # -- primitives --------------------------------------------------------------------------
    @contextmanager
    def step(self, label: str = "") -> Iterator["Cluster"]:
        """A synchronous step: the sends inside are concurrent; delivery and costs at the end.

        Steps do not nest.  If the block raises, its messages are dropped and no
        step is counted.  A step with no message is not counted.
        """
        if self._open is not None:
            raise RuntimeError("steps do not nest: a step is already open")
        self._open = []
        try:
            yield self
        except BaseException:
            self._open = None
            raise
        pending, self._open = self._open, None
        self._commit(pending, label)

    def send(self, src: int, dst: int, tensor: torch.Tensor, *, tag: Hashable = None, note: str = "") -> None:
        """Send a copy of ``tensor`` from rank ``src`` to rank ``dst``.

        Inside ``with step():`` the message joins the step; outside, it is a step
        of its own.  ``tag`` separates message streams between the same pair;
        ``note`` is kept in the trace (say which chunk it is).  Costs
        ``tensor.numel() * tensor.element_size()`` bytes.
        """
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"send a torch.Tensor, got {type(tensor).__name__}")
        self.topology.route(src, dst)  # raises now, where the mistake is, if there is no route
        message = _Pending(src, dst, _nbytes(tensor), tag, note, tensor.detach().clone())
        if self._open is None:
            self._commit([message], "send")
        else:
            self._open.append(message)

    def recv(self, src: int, dst: int, *, tag: Hashable = None) -> torch.Tensor:
        """The oldest delivered message from ``src`` to ``dst`` (with ``tag``), removed from the mailbox."""
        box = self._mailbox.get((src, dst, tag))
        if box:
            return box.popleft()
        if self._open is not None and any(
            (m.src, m.dst, m.tag) == (src, dst, tag) for m in self._open
        ):
            raise RuntimeError(
                f"the message from {src} to {dst} was sent in the step that is still open: "
                f"messages are delivered when their step ends"
            )
        raise RuntimeError(f"no message from rank {src} to rank {dst} (tag {tag!r}) to receive")

    def exchange(self, messages: Iterable[Message | tuple], *, label: str = "") -> list[torch.Tensor]:
        """Send all ``messages`` in one step and return what each delivered, in order.

        Each message is a :class:`Message` or a tuple ``(src, dst, tensor[, note])``.
        No step is counted when ``messages`` is empty.
        """
        msgs = [Message(*m) for m in messages]
        tags = [object() for _ in msgs]
        with self.step(label):
            for m, tag in zip(msgs, tags):
                self.send(m.src, m.dst, m.tensor, tag=tag, note=m.note)
        return [self.recv(m.src, m.dst, tag=tag) for m, tag in zip(msgs, tags)]

    def replay(self, trace: Iterable[Step]) -> Iterator[Step]:
        """Re-cost a recorded trace on this cluster, yielding each new :class:`Step` as it completes.

        Only sizes travel (no tensors are delivered), so a trace recorded on one
        topology can be costed on another with the same ranks, step by step, for
        a widget.  On a fresh cluster of the same topology it reproduces the
        original clocks and counters exactly.
        """
        for step in trace:
            pending = [_Pending(t.src, t.dst, t.nbytes, None, t.note, None) for t in step.transfers]
            for p in pending:
                self.topology.route(p.src, p.dst)
            committed = self._commit(pending, step.label)
            if committed is not None:
                yield committed

    def _commit(self, pending: list[_Pending], label: str) -> Step | None:
        """Cost one step's transfers, advance the clocks, count, deliver and record them."""
        if not pending:
            return None
        topo, links = self.topology, self.topology.links
        routes = [topo.route(p.src, p.dst) for p in pending]
        load: dict[LinkKey, int] = defaultdict(int)
        for p, route in zip(pending, routes):
            for link in route:
                load[link] += p.nbytes
        before = self._clocks
        after = list(before)
        transfers = []
        for p, route in zip(pending, routes):
            alpha = sum(links[l].alpha for l in route)
            drain = max(load[l] / links[l].beta for l in route)
            start = max(before[p.src], before[p.dst])
            end = start + alpha + drain
            after[p.src] = max(after[p.src], end)
            after[p.dst] = max(after[p.dst], end)
            transfers.append(Transfer(p.src, p.dst, p.nbytes, p.note, route, start, end))
            self._sent[p.src] += p.nbytes
            self._received[p.dst] += p.nbytes
            self._msent[p.src] += 1
            self._mreceived[p.dst] += 1
            for link in route:  # .get: links may have been added to the topology after reset()
                self._link_bytes[link] = self._link_bytes.get(link, 0) + p.nbytes
                self._link_messages[link] = self._link_messages.get(link, 0) + 1
            if p.payload is not None:
                self._mailbox[(p.src, p.dst, p.tag)].append(p.payload)
        self._clocks = after
        step = Step(len(self._trace), label, tuple(transfers), tuple(after))
        self._trace.append(step)
        if self.on_step is not None:
            self.on_step(step)
        return step

    def summary(self) -> str:
        """A plain-text table: per rank, bytes and messages sent and received, and its clock."""
        width = max(len(label) for label in self.topology.labels + ("rank",))
        lines = [f"{self.topology.name}: {self.steps} steps, {self.time * 1e3:.4g} ms",
                 f"{'rank':<{width}}  {'sent B':>12}  {'recv B':>12}  {'msgs out':>8}  {'msgs in':>8}  {'clock ms':>10}"]
        for r in range(self.n):
            lines.append(f"{self.topology.labels[r]:<{width}}  {self._sent[r]:>12}  {self._received[r]:>12}  "
                         f"{self._msent[r]:>8}  {self._mreceived[r]:>8}  {self._clocks[r] * 1e3:>10.4g}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Cluster({self.topology.name}, steps={self.steps}, time={self.time:.6g} s)"
