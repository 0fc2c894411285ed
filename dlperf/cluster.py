"""A simulated cluster: ranks that hold tensors, links with an alpha-beta cost, exact accounting.

The multi-device chapters, their widgets and the graded exercises run
collectives on this simulator instead of real GPUs: it needs one CPU, it is
deterministic, and it counts exactly what a real cluster hides (who sent how
many bytes over which link, in how many steps).

The model
---------
* **Ranks.**  A :class:`Topology` has ``n`` ranks ``0 .. n-1`` (the devices) and
  possibly extra *nodes* named by strings (a PCIe switch, a network card, a
  network switch).  Rank ``r`` holds ordinary torch tensors (CPU tensors; a
  tensor on the ``meta`` device has a shape and a dtype but no storage, which
  lets the simulator cost a 160 MB transfer without allocating it; sums of
  meta tensors are skipped, only their sizes matter).  Collectives take one
  tensor per rank and return one per rank; ``cluster.memory[r]`` is a dict
  for what a rank keeps (memory accounting).  Dtypes are preserved;
  reductions happen in the tensors' own dtype, as NCCL does.
* **Links** are directed: ``connect(a, b)`` makes a full-duplex cable, one link
  each way.  Link ``l`` costs ``alpha_l`` seconds of latency and carries
  ``beta_l`` bytes per second.  A message follows the route with the fewest
  hops whose intermediate nodes are *not* ranks: ranks never forward other
  ranks' messages (on a ring, rank 0 cannot send to rank 2; rank 1 must
  receive and send again, and that is counted as two messages).
* **Steps.**  A step is a set of concurrent transfers (the ``with
  cluster.step():`` block).  The *load* of a link in a step is the number of
  bytes that all the step's transfers put on it.  A transfer of ``S`` bytes
  over route ``R`` costs::

      cost = sum(alpha_l for l in R) + max(load_l / beta_l for l in R)

  i.e. the alpha-beta model ``alpha + S / beta`` when nothing else shares its
  links, and the bandwidth of a shared link divided among the step's
  transfers otherwise (every transfer on a shared link is charged the time to
  drain the whole link; this is exact for equal transfers and pessimistic for
  the smaller ones of unequal transfers).
* **Clocks.**  Each rank has a clock.  A transfer starts when both its ends
  are free, at ``max(clock[src], clock[dst])`` (the clocks from before the
  step), and ends ``cost`` later.  After the step a rank's clock is the latest
  end among its transfers; ranks that took no part keep their clocks.  So a
  rank's clock advances by the cost of its slowest transfer of the step, and a
  rank that waits for data waits for the sender.  :attr:`Cluster.time` is the
  latest clock.
* **Accounting.**  Per rank: bytes and messages sent and received.  Per
  directed link: bytes and messages.  The number of (non-empty) steps.  A
  trace of :class:`Step` records (who sent how many bytes to whom, with a note
  saying which chunk), which :meth:`Cluster.replay` re-costs step by step for
  a widget, on the same or another topology.

Reference collectives run *on* the simulator, through the same primitives a
student uses, so their accounting is the simulator's: :func:`ring_allreduce`
(= :func:`ring_reduce_scatter` + :func:`ring_all_gather`),
:func:`multi_ring_allreduce` (several rings at once), :func:`naive_allreduce`
(reduce to a root, broadcast), :func:`tree_allreduce`,
:func:`parameter_server_allreduce` (sharded over ``k`` servers),
:func:`pipelined_broadcast` and :func:`pipelined_reduce`.  Each step is
labelled (``"reduce-scatter 2/3"``) and each message noted
(``"chunk 1, sum of 2 ranks"``), so ``cluster.trace`` -- or the ``on_step``
callback, called as each step completes -- runs a collective step by step.
Closed-form costs (:func:`ring_allreduce_time`, ...) and the bus-bandwidth
conversion (:func:`bus_bandwidth`) sit next to them, and
:func:`parameter_server_example` reproduces the worked example of the source
notes (60 / 80 / 15 ms, and the ring over 8 V100s).

Limits (said so that no chapter over-reads the numbers): computation is free
(a reduction of ``S`` bytes costs nothing); no memory-bandwidth, PCIe-root or
NIC-injection limits beyond the links modelled; no protocol overhead, no
packetisation and no overlap *between* steps (a step is a barrier for the
ranks it involves); contention is only between transfers of the same step.

Figures in the named topologies come from the sources cited in each factory's
docstring or are labelled illustrative there (all latencies are illustrative).

Example, the exercise's shape::

    from dlperf import cluster as C
    c = C.Cluster(C.ring(4))
    out = C.ring_allreduce(c, [torch.randn(12) for _ in range(4)])
    c.steps, c.bytes_sent, c.time        # 6, (72, 72, 72, 72), 6 * (alpha + 12 B / beta)

Student code uses the primitives::

    with c.step():                                  # concurrent sends
        for r in range(c.n):
            c.send(r, (r + 1) % c.n, chunks[r][i])
    got = c.recv(src=3, dst=0)                      # delivered when the step ended
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple, Union

import torch

from .memory import zero_memory_bytes  # noqa: F401  (the formula lives in dlperf.memory)

__all__ = [
    "DGX1_RINGS",
    "Cluster",
    "LinkSpec",
    "Message",
    "Step",
    "Topology",
    "Transfer",
    "WorkedExample",
    "algorithm_bandwidth",
    "bus_bandwidth",
    "busbw_factor",
    "dgx1_double_ring",
    "fully_connected",
    "multi_machine",
    "multi_ring_allreduce",
    "naive_allreduce",
    "naive_allreduce_time",
    "parameter_server",
    "parameter_server_allreduce",
    "parameter_server_example",
    "parameter_server_time",
    "pcie_switch",
    "pipelined_broadcast",
    "pipelined_broadcast_time",
    "pipelined_reduce",
    "place_zero_states",
    "ring",
    "ring_all_gather",
    "ring_all_gather_time",
    "ring_allreduce",
    "ring_allreduce_bytes_sent",
    "ring_allreduce_time",
    "ring_reduce_scatter",
    "ring_reduce_scatter_time",
    "transfer_time",
    "tree_allreduce",
    "tree_allreduce_time",
]

Node = Union[int, str]
"""A rank (``int``, ``0 <= r < n``) or a non-rank node such as a switch (``str``)."""

LinkKey = tuple[Node, Node]
"""A directed link ``(from, to)``."""

# Illustrative latencies (order of magnitude of a per-message software + wire latency):
_ALPHA_LOCAL = 5e-6  # inside a machine (PCIe, NVLink)
_ALPHA_NET = 2e-5  # between machines


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
# Topology
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinkSpec:
    """One direction of a cable: ``alpha`` seconds of latency, ``beta`` bytes per second.

    ``beta`` may be ``math.inf`` (a link whose bandwidth is not the point,
    e.g. a GPU to its own network card when only the network is modelled).
    """

    alpha: float
    beta: float


class Topology:
    """Ranks ``0 .. n-1``, extra named nodes, and directed links between them.

    Build one with a factory (:func:`ring`, :func:`fully_connected`,
    :func:`pcie_switch`, :func:`dgx1_double_ring`, :func:`parameter_server`,
    :func:`multi_machine`) or by hand with :meth:`connect`.  Metadata used by
    the collectives and the widgets:

    * ``labels[r]``: a display name per rank ("GPU0", "CPU", ...);
    * ``groups``: named tuples of ranks (``"workers"``, ``"servers"``,
      ``"machine0"``, ...);
    * ``rings``: rank orders along which ring algorithms run well here;
    * ``source``: where the figures come from.
    """

    def __init__(self, n: int, *, name: str = "custom", labels: Sequence[str] | None = None, source: str = ""):
        if n < 1:
            raise ValueError(f"a topology needs at least one rank, got n={n}")
        self.n = n
        self.name = name
        self.labels: tuple[str, ...] = tuple(labels) if labels is not None else tuple(f"rank{r}" for r in range(n))
        if len(self.labels) != n:
            raise ValueError(f"{len(self.labels)} labels for {n} ranks")
        self.source = source
        self.groups: dict[str, tuple[int, ...]] = {}
        self.rings: tuple[tuple[int, ...], ...] = ()
        self._links: dict[LinkKey, LinkSpec] = {}
        self._adj: dict[Node, list[Node]] = defaultdict(list)
        self._routes: dict[tuple[int, int], tuple[LinkKey, ...]] = {}

    # -- construction ------------------------------------------------------------------------
    def _check_node(self, node: Node) -> None:
        if isinstance(node, bool) or not isinstance(node, (int, str)):
            raise TypeError(f"a node is a rank (int) or a named node (str), got {node!r}")
        if isinstance(node, int) and not 0 <= node < self.n:
            raise ValueError(f"rank {node} out of range for {self.n} ranks")

    def connect(self, a: Node, b: Node, *, beta: float, alpha: float = 0.0) -> "Topology":
        """Join ``a`` and ``b`` by a full-duplex cable: links ``a->b`` and ``b->a``, each ``(alpha, beta)``.

        Connecting a pair again replaces its links.  Returns ``self`` (chainable).
        """
        self._check_node(a)
        self._check_node(b)
        if a == b:
            raise ValueError(f"cannot connect {a!r} to itself")
        if not beta > 0:
            raise ValueError(f"bandwidth must be positive, got beta={beta}")
        if not alpha >= 0:
            raise ValueError(f"latency must be non-negative, got alpha={alpha}")
        spec = LinkSpec(float(alpha), float(beta))
        for u, v in ((a, b), (b, a)):
            if (u, v) not in self._links:
                self._adj[u].append(v)
            self._links[(u, v)] = spec
        self._routes.clear()
        return self

    @property
    def links(self) -> Mapping[LinkKey, LinkSpec]:
        """Every directed link and its ``(alpha, beta)``, read-only."""
        return MappingProxyType(self._links)

    def neighbors(self, node: Node) -> tuple[Node, ...]:
        """The nodes one link away from ``node``, in the order they were connected."""
        return tuple(self._adj.get(node, ()))

    # -- routing and costs -------------------------------------------------------------------
    def route(self, src: int, dst: int) -> tuple[LinkKey, ...]:
        """The directed links a message from rank ``src`` to rank ``dst`` crosses.

        Fewest hops, through non-rank nodes only (ranks do not forward); ties are
        broken by connection order, so routes are deterministic.  Raises
        ``ValueError`` when there is no such route.
        """
        for r in (src, dst):
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.n:
                raise ValueError(f"{r!r} is not a rank of this {self.n}-rank topology")
        if src == dst:
            raise ValueError(f"rank {src} does not send to itself: use its tensor directly")
        key = (src, dst)
        if key in self._routes:
            return self._routes[key]
        parent: dict[Node, Node] = {src: src}
        queue: deque[Node] = deque([src])
        while queue:
            u = queue.popleft()
            if u == dst:
                break
            if u != src and isinstance(u, int):
                continue  # ranks do not forward
            for v in self._adj.get(u, ()):
                if v not in parent:
                    parent[v] = u
                    queue.append(v)
        if dst not in parent:
            raise ValueError(
                f"no route from rank {src} to rank {dst} in {self.name}: they are not neighbours "
                f"and ranks do not forward messages (send to a neighbour, which sends on)"
            )
        path: list[LinkKey] = []
        v: Node = dst
        while v != src:
            u = parent[v]
            path.append((u, v))
            v = u
        self._routes[key] = tuple(reversed(path))
        return self._routes[key]

    def latency(self, src: int, dst: int) -> float:
        """Alpha of the route from ``src`` to ``dst``: the sum of its links' latencies."""
        return sum(self._links[link].alpha for link in self.route(src, dst))

    def bandwidth(self, src: int, dst: int) -> float:
        """Beta of the route from ``src`` to ``dst`` when it is not shared: its slowest link."""
        return min(self._links[link].beta for link in self.route(src, dst))

    def cost(self, src: int, dst: int, nbytes: float) -> float:
        """Seconds to send ``nbytes`` from ``src`` to ``dst`` alone: ``alpha + nbytes / beta``."""
        return self.latency(src, dst) + max(nbytes / self._links[l].beta for l in self.route(src, dst))

    def ring_bandwidth(self, order: Sequence[int]) -> float:
        """Bottleneck bandwidth of a ring that visits the ranks in ``order`` (slowest hop)."""
        if len(order) < 2:
            return math.inf
        return min(self.bandwidth(order[i], order[(i + 1) % len(order)]) for i in range(len(order)))

    def describe(self) -> str:
        """A few lines: name, ranks, links (one line per cable), source."""
        lines = [f"{self.name}: {self.n} ranks ({', '.join(self.labels)})"]
        seen = set()
        for (u, v), spec in self._links.items():
            if (v, u) in seen:
                continue
            seen.add((u, v))
            name = lambda x: self.labels[x] if isinstance(x, int) else x  # noqa: E731
            lines.append(f"  {name(u)} <-> {name(v)}: {spec.beta / 1e9:g} GB/s each way, alpha {spec.alpha * 1e6:g} us")
        if self.source:
            lines.append(f"  figures: {self.source}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, n={self.n}, links={len(self._links)})"


def ring(n: int, *, beta: float = 25e9, alpha: float = _ALPHA_LOCAL) -> Topology:
    """``n`` ranks in a ring: rank ``r`` is cabled to ``r+1 mod n`` and nothing else.

    Default ``beta``: 25 GB/s per direction, one NVLink 2.0 link of a V100
    (NVIDIA Tesla V100 datasheet, 2017); ``alpha`` is illustrative.  Only
    neighbours can talk: a message from 0 to 2 has no route.
    """
    topo = Topology(n, name=f"ring({n})", labels=[f"GPU{r}" for r in range(n)],
                    source="beta: NVLink 2.0, 25 GB/s per link per direction (V100 datasheet, 2017); alpha illustrative")
    for r in range(n if n > 2 else n - 1):
        topo.connect(r, (r + 1) % n, beta=beta, alpha=alpha)
    topo.rings = (tuple(range(n)),)
    return topo


def fully_connected(n: int, *, beta: float = 25e9, alpha: float = _ALPHA_LOCAL) -> Topology:
    """``n`` ranks, a dedicated cable between every pair.

    A rank can drive all its ``n-1`` links at once (no per-device injection
    limit), so algorithms that fan in to one rank look better here than
    behind a switch.  Default ``beta``: 25 GB/s per direction, one NVLink 2.0
    link (V100 datasheet, 2017); ``alpha`` is illustrative.
    """
    topo = Topology(n, name=f"fully_connected({n})", labels=[f"GPU{r}" for r in range(n)],
                    source="beta: NVLink 2.0, 25 GB/s per link per direction (V100 datasheet, 2017); alpha illustrative")
    for a in range(n):
        for b in range(a + 1, n):
            topo.connect(a, b, beta=beta, alpha=alpha)
    topo.rings = (tuple(range(n)),)
    return topo


def pcie_switch(n: int, *, beta: float = 16e9, alpha: float = _ALPHA_LOCAL, cpu: bool = False) -> Topology:
    """``n`` GPUs on one PCIe switch, each on its own port of ``beta`` bytes/s per direction.

    The switch itself is non-blocking (node ``"switch"``): the limit is each
    port, so several GPUs sending to one GPU share that GPU's port.  A
    GPU-to-GPU message crosses two ports; each port link has latency
    ``alpha / 2``, so a message's latency is ``alpha``.  With ``cpu=True`` rank
    ``n`` is the host CPU on one more port of the same speed (the x16 link from
    the CPU to the switch); ``groups`` then names it the parameter server.

    Default ``beta`` = 16 GB/s: PCIe 3.0 x16 per direction as the source notes
    take it (d2l, "Parameter Servers" section); the PCIe 3.0 specification
    (2010) gives 8 GT/s x 16 lanes x 128/130 = 15.75 GB/s.  ``alpha`` is
    illustrative.
    """
    ranks = n + 1 if cpu else n
    labels = [f"GPU{r}" for r in range(n)] + (["CPU"] if cpu else [])
    topo = Topology(ranks, name=f"pcie_switch({n}{', cpu' if cpu else ''})", labels=labels,
                    source="PCIe 3.0 x16, 16 GB/s per direction per port (d2l, 'Parameter Servers'); alpha illustrative")
    for r in range(ranks):
        topo.connect(r, "switch", beta=beta, alpha=alpha / 2)
    gpus = tuple(range(n))
    topo.groups = {"gpus": gpus, "workers": gpus}
    topo.groups["servers"] = (n,) if cpu else gpus
    if cpu:
        topo.groups["cpu"] = (n,)
    topo.rings = (gpus,)
    return topo


DGX1_RINGS: tuple[tuple[int, ...], tuple[int, ...]] = ((0, 1, 2, 3, 4, 5, 6, 7), (0, 3, 5, 2, 4, 7, 1, 6))
"""The two rings of :func:`dgx1_double_ring`, 0-based (the source numbers GPUs from 1)."""


def dgx1_double_ring(*, link_beta: float = 18e9, alpha: float = _ALPHA_LOCAL) -> Topology:
    """Eight V100s of an NVLink server (DGX-1 / AWS p3.16xlarge), simplified to two rings.

    Each V100 has six NVLink links.  The real wiring is NVIDIA's *hybrid
    cube-mesh* (DGX-1 System Architecture whitepaper, 2017).  The source notes
    (d2l, "Parameter Servers" section and its ring figure, after Wang et al., 2018) decompose it into two
    edge-disjoint rings, and so does this topology -- the simplification: only
    the ring edges exist (each GPU has 4 neighbours, 6 links):

    * ring A ``0-1-2-3-4-5-6-7-0`` with *two* links per hop (``2 * link_beta``);
    * ring B ``0-3-5-2-4-7-1-6-0`` (the source's 1-4-6-3-5-8-2-7-1) with one link
      per hop (``link_beta``).

    Default ``link_beta`` = 18 GB/s per link per direction, the source's
    figure (from "300 Gbit/s bidirectionally").  The V100 datasheet (2017)
    gives 25 GB/s per link per direction (300 GB/s over six links, both
    directions together); pass ``link_beta=25e9`` for it.  ``alpha`` is
    illustrative.  ``rings`` holds both rings for :func:`multi_ring_allreduce`.
    """
    topo = Topology(8, name="dgx1_double_ring", labels=[f"GPU{r}" for r in range(8)],
                    source="NVLink 18 GB/s per link per direction and the two-ring decomposition: d2l, 'Parameter Servers'; "
                           "V100 datasheet (2017): 25 GB/s; alpha illustrative")
    a, b = DGX1_RINGS
    for i in range(8):
        topo.connect(a[i], a[(i + 1) % 8], beta=2 * link_beta, alpha=alpha)
    for i in range(8):
        topo.connect(b[i], b[(i + 1) % 8], beta=link_beta, alpha=alpha)
    topo.rings = DGX1_RINGS
    return topo


def parameter_server(
    workers: int,
    servers: int = 1,
    *,
    worker_beta: float = 12.5e9,
    server_beta: float | None = None,
    alpha: float = _ALPHA_NET,
) -> Topology:
    """``workers`` worker ranks and ``servers`` server ranks, each on its own port of one switch.

    Ranks ``0 .. workers-1`` are workers, the next ``servers`` ranks are
    servers (``groups["workers"]``, ``groups["servers"]``).  Worker ports carry
    ``worker_beta`` per direction, server ports ``server_beta`` (default: the
    same); the switch is non-blocking, so a server's port is the bottleneck
    when many workers push to it.  A message crosses two ports of ``alpha / 2``.

    Default bandwidth: 12.5 GB/s, the line rate of 100 Gbit/s Ethernet (IEEE
    802.3ba, 2010); the source notes (d2l, "Parameter Servers") say such a link "only
    amounts to 10 GB/s" in practice.  ``alpha`` is illustrative.
    """
    server_beta = worker_beta if server_beta is None else server_beta
    n = workers + servers
    labels = [f"worker{i}" for i in range(workers)] + [f"server{j}" for j in range(servers)]
    topo = Topology(n, name=f"parameter_server({workers}, {servers})", labels=labels,
                    source="100 Gbit/s Ethernet = 12.5 GB/s line rate (IEEE 802.3ba); alpha illustrative")
    for r in range(n):
        topo.connect(r, "switch", beta=worker_beta if r < workers else server_beta, alpha=alpha / 2)
    topo.groups = {"workers": tuple(range(workers)), "servers": tuple(range(workers, n))}
    topo.rings = (tuple(range(workers)),)
    return topo


def multi_machine(
    machines: int,
    gpus_per_machine: int,
    *,
    intra_beta: float = 50e9,
    intra_alpha: float = _ALPHA_LOCAL,
    net_beta: float = 12.5e9,
    net_alpha: float = _ALPHA_NET,
) -> Topology:
    """``machines`` machines of ``gpus_per_machine`` GPUs: fast links inside, a slower network between.

    Rank ``m * gpus_per_machine + i`` is GPU ``i`` of machine ``m``
    (``groups["machine<m>"]``).  Inside a machine every pair of GPUs has a
    dedicated cable ``(intra_alpha, intra_beta)``.  Each machine has one
    network card (node ``"nic<m>"``) on a non-blocking network switch
    (``"network"``); the card's port carries ``net_beta`` per direction and is
    *shared* by all the GPUs of its machine; the GPU-to-card hop is free (its
    bandwidth is infinite here).  A message between machines has latency
    ``net_alpha``.

    Figures, illustrative: ``intra_beta`` 50 GB/s is two NVLink 2.0 links of
    25 GB/s per direction (V100 datasheet, 2017); ``net_beta`` 12.5 GB/s is
    100 Gbit/s Ethernet's line rate; the latencies are illustrative.
    """
    n = machines * gpus_per_machine
    labels = [f"m{m}.GPU{i}" for m in range(machines) for i in range(gpus_per_machine)]
    topo = Topology(n, name=f"multi_machine({machines}x{gpus_per_machine})", labels=labels,
                    source="illustrative: 2 x NVLink 2.0 (25 GB/s each, V100 datasheet 2017) inside, "
                           "100 Gbit/s Ethernet (12.5 GB/s) between machines")
    for m in range(machines):
        ranks = list(range(m * gpus_per_machine, (m + 1) * gpus_per_machine))
        topo.groups[f"machine{m}"] = tuple(ranks)
        for i, a in enumerate(ranks):
            for b in ranks[i + 1:]:
                topo.connect(a, b, beta=intra_beta, alpha=intra_alpha)
        if machines > 1:
            for a in ranks:
                topo.connect(a, f"nic{m}", beta=math.inf, alpha=0.0)
            topo.connect(f"nic{m}", "network", beta=net_beta, alpha=net_alpha / 2)
    topo.rings = (tuple(range(n)),)
    return topo


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


# --------------------------------------------------------------------------------------------
# Reference collectives, written as step programs
# --------------------------------------------------------------------------------------------
#
# A program is a generator that yields (label, messages) for its next step and is sent back
# the tensors they delivered; it returns its result.  _run drives several programs in lockstep
# (their step k shares one cluster step), which is how the double ring runs its two rings at once.

Program = Generator[tuple[str, list[Message]], list[torch.Tensor], Any]


def _run(cluster: Cluster, programs: Sequence[Program]) -> list[Any]:
    results: list[Any] = [None] * len(programs)
    current: dict[int, tuple[str, list[Message]]] = {}
    for i, program in enumerate(programs):
        try:
            current[i] = next(program)
        except StopIteration as stop:
            results[i] = stop.value
    while current:
        label = next(iter(current.values()))[0]
        flat = [m for _, msgs in current.values() for m in msgs]
        delivered = cluster.exchange(flat, label=label)
        following: dict[int, tuple[str, list[Message]]] = {}
        pos = 0
        for i, (_, msgs) in current.items():
            part, pos = delivered[pos:pos + len(msgs)], pos + len(msgs)
            try:
                following[i] = programs[i].send(part)
            except StopIteration as stop:
                results[i] = stop.value
        current = following
    return results


def _ranks(cluster: Cluster, count: int, ranks: Sequence[int] | None, what: str = "tensors") -> tuple[int, ...]:
    chosen = tuple(range(cluster.n)) if ranks is None else tuple(ranks)
    if len(chosen) != count:
        raise ValueError(f"{count} {what} for {len(chosen)} ranks {chosen}: give one per rank")
    if len(set(chosen)) != len(chosen) or any(not 0 <= r < cluster.n for r in chosen):
        raise ValueError(f"ranks must be distinct ranks of the cluster, got {chosen}")
    if count == 0:
        raise ValueError("a collective needs at least one rank")
    return chosen


def _check_same(tensors: Sequence[torch.Tensor]) -> None:
    first = tensors[0]
    for t in tensors[1:]:
        if t.shape != first.shape or t.dtype != first.dtype:
            raise ValueError(f"all ranks need the same shape and dtype: {tuple(first.shape)} {first.dtype} "
                             f"vs {tuple(t.shape)} {t.dtype}")


def _reduce_scatter_program(chunks: list[list[torch.Tensor]], ranks: tuple[int, ...]) -> Program:
    """Ring reduce-scatter: ``chunks[p][c]`` is chunk ``c`` held by ``ranks[p]``; returns chunk ``p`` summed, per ``p``.

    Step ``k`` (``0 .. n-2``): position ``p`` sends its partial sum of chunk
    ``(p - k - 1) mod n`` to position ``p + 1``, which adds its own.  After
    ``n - 1`` steps position ``p`` holds chunk ``p`` summed over all ranks.
    """
    n = len(ranks)
    acc = [list(row) for row in chunks]
    for k in range(n - 1):
        msgs = []
        for p in range(n):
            c = (p - k - 1) % n
            note = f"chunk {c}, sum of {k + 1} rank{'s' if k else ''}"
            msgs.append(Message(ranks[p], ranks[(p + 1) % n], acc[p][c], note))
        got = yield f"reduce-scatter {k + 1}/{n - 1}", msgs
        for p in range(n):  # got[p] arrived at position p + 1
            q, c = (p + 1) % n, (p - k - 1) % n
            acc[q][c] = _add(acc[q][c], got[p])
    return [acc[p][p] for p in range(n)]


def _all_gather_program(owned: list[torch.Tensor], ranks: tuple[int, ...]) -> Program:
    """Ring all-gather: ``owned[p]`` is chunk ``p`` held by ``ranks[p]``; returns every position's list of chunks.

    Step ``k`` (``0 .. n-2``): position ``p`` forwards chunk ``(p - k) mod n``
    (its own at ``k = 0``, then the one it has just received) to ``p + 1``.
    """
    n = len(ranks)
    have: list[list[torch.Tensor | None]] = [[None] * n for _ in range(n)]
    for p in range(n):
        have[p][p] = owned[p]
    for k in range(n - 1):
        msgs = []
        for p in range(n):
            c = (p - k) % n
            msgs.append(Message(ranks[p], ranks[(p + 1) % n], have[p][c], f"chunk {c}, final"))
        got = yield f"all-gather {k + 1}/{n - 1}", msgs
        for p in range(n):
            have[(p + 1) % n][(p - k) % n] = got[p]
    return have


def _allreduce_program(flat: list[torch.Tensor], ranks: tuple[int, ...]) -> Program:
    n = len(ranks)
    chunks = [list(t.tensor_split(n)) for t in flat]
    owned = yield from _reduce_scatter_program(chunks, ranks)
    have = yield from _all_gather_program(owned, ranks)
    return [_cat(row) for row in have]


def ring_reduce_scatter(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Ring reduce-scatter: ``result[p]`` is chunk ``p`` of the flattened sum, held by ``ranks[p]``.

    ``tensors[p]`` is held by ``ranks[p]`` (default: rank ``p``); the ring runs
    ``ranks[0] -> ranks[1] -> ... -> ranks[0]``.  Chunks are
    ``flatten().tensor_split(n)`` (uneven when ``n`` does not divide the size:
    the first ``numel % n`` chunks have one element more).

    Cost: ``n - 1`` steps; each rank sends ``n - 1`` chunks, ``(n-1)/n * S``
    bytes when ``n`` divides the size; on a ring of ``(alpha, beta)`` links,
    ``(n-1) alpha + (n-1)/n * S / beta`` (:func:`ring_reduce_scatter_time`).
    """
    order = _ranks(cluster, len(tensors), ranks)
    _check_same(tensors)
    n = len(order)
    if n == 1:
        return [tensors[0].detach().reshape(-1).clone()]
    chunks = [list(t.detach().reshape(-1).tensor_split(n)) for t in tensors]
    (out,) = _run(cluster, [_reduce_scatter_program(chunks, order)])
    return out


def ring_all_gather(
    cluster: Cluster, chunks: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Ring all-gather: every rank ends with ``torch.cat`` of all the (flattened) chunks, in order.

    ``chunks[p]`` is held by ``ranks[p]`` (default: rank ``p``); chunks may
    differ in size but not in dtype.  Cost: ``n - 1`` steps; each rank sends
    every chunk but one; with equal chunks of a total ``S`` bytes on a ring,
    ``(n-1) alpha + (n-1)/n * S / beta`` (:func:`ring_all_gather_time`).
    """
    order = _ranks(cluster, len(chunks), ranks, "chunks")
    if len({c.dtype for c in chunks}) != 1:
        raise ValueError("all chunks need the same dtype")
    owned = [c.detach().reshape(-1) for c in chunks]
    if len(order) == 1:
        return [owned[0].clone()]
    (have,) = _run(cluster, [_all_gather_program(owned, order)])
    return [_cat(row) for row in have]


def ring_allreduce(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Ring allreduce = ring reduce-scatter then ring all-gather, ``n`` chunks (bandwidth-optimal).

    ``tensors[p]`` is held by ``ranks[p]`` (default: rank ``p``), the ring runs
    in that order.  Returns one tensor per rank, the sum, with the input's
    shape and dtype; inputs are not modified and outputs do not alias them.
    Every rank gets bit-identical values (each chunk is summed once, by its
    owner, and then copied).

    Cost: exactly ``2(n-1)`` steps; position ``p`` sends ``2S - c_p - c_{p+1}``
    bytes (``c_i`` = bytes of chunk ``i``; :func:`ring_allreduce_bytes_sent`),
    that is ``2(n-1)/n * S`` when ``n`` divides the size; on a ring of
    ``(alpha, beta)`` links ``T = 2(n-1) alpha + 2(n-1)/n * S / beta``
    (:func:`ring_allreduce_time`).  ``n = 1``: no communication, 0 steps.
    """
    order = _ranks(cluster, len(tensors), ranks)
    _check_same(tensors)
    shape = tensors[0].shape
    if len(order) == 1:
        return [tensors[0].detach().clone()]
    flat = [t.detach().reshape(-1) for t in tensors]
    (out,) = _run(cluster, [_allreduce_program(flat, order)])
    return [t.reshape(shape) for t in out]


def multi_ring_allreduce(
    cluster: Cluster,
    tensors: Sequence[torch.Tensor],
    *,
    rings: Sequence[Sequence[int]] | None = None,
    weights: Sequence[float] | None = None,
) -> list[torch.Tensor]:
    """Allreduce over several rings at once (the double ring of :func:`dgx1_double_ring`).

    ``tensors[r]`` is held by rank ``r``; ``rings`` (default:
    ``topology.rings``) are orders of all ranks.  The flattened tensor is cut
    into one part per ring, in proportion to ``weights`` (default: each ring's
    bottleneck bandwidth, :meth:`Topology.ring_bandwidth`), and each part is
    ring-allreduced on its ring; step ``k`` of every ring shares one cluster
    step.  With parts proportional to bandwidths and disjoint rings the time
    is that of one ring whose bandwidth is the sum:
    ``2(n-1) alpha + 2(n-1)/n * S / sum(beta_ring)``.
    """
    n = cluster.n
    order = _ranks(cluster, len(tensors), None)
    _check_same(tensors)
    rings = [tuple(r) for r in (rings if rings is not None else cluster.topology.rings)]
    if not rings:
        raise ValueError("no rings: pass rings= or use a topology that names its rings")
    for r in rings:
        if sorted(r) != list(order):
            raise ValueError(f"each ring must visit every rank once, got {r}")
    if weights is None:
        weights = [cluster.topology.ring_bandwidth(r) for r in rings]
    if len(weights) != len(rings) or any(not w > 0 for w in weights):
        raise ValueError(f"one positive weight per ring, got {weights}")
    shape = tensors[0].shape
    if n == 1:
        return [tensors[0].detach().clone()]
    numel = tensors[0].numel()
    total, cum, bounds = float(sum(weights)), 0.0, []
    for w in weights[:-1]:
        cum += w
        bounds.append(round(numel * cum / total))
    parts = [t.detach().reshape(-1).tensor_split(bounds) for t in tensors]
    programs = []
    for i, ring_order in enumerate(rings):
        # the program indexes by ring position; tensors are indexed by rank
        programs.append(_allreduce_program([parts[r][i] for r in ring_order], ring_order))
    results = _run(cluster, programs)
    out = []
    for r in range(n):
        pieces = [results[i][rings[i].index(r)] for i in range(len(rings))]
        out.append(_cat(pieces).reshape(shape))
    return out


def _naive_program(tensors: Sequence[torch.Tensor], ranks: tuple[int, ...]) -> Program:
    root, others = ranks[0], range(1, len(ranks))
    got = yield "reduce to the root", [Message(ranks[p], root, tensors[p], f"all of rank {ranks[p]}") for p in others]
    total = tensors[0]
    for t in got:
        total = _add(total, t)
    got = yield "broadcast from the root", [Message(root, ranks[p], total, "the sum") for p in others]
    return [total.clone()] + list(got)


def naive_allreduce(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Reduce to a root, then broadcast from it: the root is ``ranks[0]`` (default rank 0).

    Step 1: every other rank sends its whole tensor to the root, at once; the
    root sums.  Step 2: the root sends the sum to every other rank, at once.
    ``2`` steps (0 for ``n = 1``); the root receives and sends ``(n-1) S`` bytes
    each: ``2(n-1) S`` through one rank.  Behind a switch the root's port is
    the bottleneck: ``T = 2 alpha + 2(n-1) S / beta`` (:func:`naive_allreduce_time`).
    """
    order = _ranks(cluster, len(tensors), ranks)
    _check_same(tensors)
    if len(order) == 1:
        return [tensors[0].detach().clone()]
    (out,) = _run(cluster, [_naive_program([t.detach() for t in tensors], order)])
    return out


def _tree_program(tensors: Sequence[torch.Tensor], ranks: tuple[int, ...]) -> Program:
    n = len(ranks)
    depth = n.bit_length() - 1
    acc = list(tensors)
    level = lambda d: range(2**d - 1, min(2 ** (d + 1) - 1, n))  # noqa: E731  positions at depth d
    for d in range(depth, 0, -1):
        ps = list(level(d))
        got = yield f"tree reduce, depth {d}", [
            Message(ranks[p], ranks[(p - 1) // 2], acc[p], f"subtree sum of position {p}") for p in ps]
        for p, t in zip(ps, got):
            parent = (p - 1) // 2
            acc[parent] = _add(acc[parent], t)
    final: list[torch.Tensor | None] = [None] * n
    final[0] = acc[0]
    for d in range(1, depth + 1):
        ps = list(level(d))
        got = yield f"tree broadcast, depth {d}", [
            Message(ranks[(p - 1) // 2], ranks[p], final[(p - 1) // 2], "the sum") for p in ps]
        for p, t in zip(ps, got):
            final[p] = t
    final[0] = acc[0].clone()
    return final


def tree_allreduce(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, ranks: Sequence[int] | None = None
) -> list[torch.Tensor]:
    """Binary-tree reduce to ``ranks[0]``, then binary-tree broadcast back.

    Positions form a heap: position ``p``'s parent is ``(p - 1) // 2``; depth
    ``D = floor(log2 n)``.  Reduce: one step per level, deepest first, every
    node of the level sends its subtree's sum to its parent.  Broadcast: one
    step per level, parents send the sum to their children.  ``2D`` steps;
    a parent receives (then sends) ``2S`` per level.  On
    :func:`fully_connected` links ``T = 2D (alpha + S / beta)``
    (:func:`tree_allreduce_time`): fewer latencies than the ring (``2 log2 n``
    against ``2(n-1)``), more bytes per step.
    """
    order = _ranks(cluster, len(tensors), ranks)
    _check_same(tensors)
    if len(order) == 1:
        return [tensors[0].detach().clone()]
    (out,) = _run(cluster, [_tree_program([t.detach() for t in tensors], order)])
    return out


def _ps_program(tensors: Sequence[torch.Tensor], workers: tuple[int, ...], servers: tuple[int, ...]) -> Program:
    k = len(servers)
    shards = [list(t.reshape(-1).tensor_split(k)) for t in tensors]
    push = [(w, j) for w in range(len(workers)) for j in range(k) if workers[w] != servers[j]]
    got = yield "push", [Message(workers[w], servers[j], shards[w][j], f"shard {j} of worker {workers[w]}")
                         for w, j in push]
    received = dict(zip(push, got))
    sums = []
    for j in range(k):
        parts = [received[(w, j)] if (w, j) in received else shards[w][j] for w in range(len(workers))]
        total = parts[0]
        for t in parts[1:]:
            total = _add(total, t)
        sums.append(total)
    got = yield "pull", [Message(servers[j], workers[w], sums[j], f"summed shard {j}") for w, j in push]
    pulled = dict(zip(push, got))
    return [_cat([pulled[(w, j)] if (w, j) in pulled else sums[j].clone() for j in range(k)])
            for w in range(len(workers))]


def parameter_server_allreduce(
    cluster: Cluster,
    tensors: Sequence[torch.Tensor],
    *,
    workers: Sequence[int] | None = None,
    servers: Sequence[int] | None = None,
) -> list[torch.Tensor]:
    """Sharded parameter server: server ``j`` of ``k`` owns shard ``j`` (1/k of the keys).

    ``tensors[i]`` is the gradient of worker ``workers[i]``; defaults:
    ``topology.groups["workers"]`` and ``["servers"]`` when the topology names
    them, else every rank is a worker and a server (the sharded scheme of the
    source notes, each GPU aggregating a quarter).  Shards are
    ``flatten().tensor_split(k)``.  Push (1 step): every worker sends shard
    ``j`` to server ``j`` -- unless it *is* server ``j``, which keeps it; the
    servers sum.  Pull (1 step): server ``j`` sends the summed shard ``j`` to
    every other worker.  Returns one tensor per worker, shaped like the input.
    Cost: :func:`parameter_server_time`.
    """
    groups = cluster.topology.groups
    if workers is None:
        workers = groups.get("workers", tuple(range(cluster.n)))
    w_ranks = _ranks(cluster, len(tensors), workers)
    if servers is None:
        servers = groups.get("servers", w_ranks)
    s_ranks = tuple(servers)
    if not s_ranks or len(set(s_ranks)) != len(s_ranks) or any(not 0 <= r < cluster.n for r in s_ranks):
        raise ValueError(f"servers must be distinct ranks, got {s_ranks}")
    _check_same(tensors)
    shape = tensors[0].shape
    (out,) = _run(cluster, [_ps_program([t.detach() for t in tensors], w_ranks, s_ranks)])
    return [t.reshape(shape) for t in out]


def _chain(cluster: Cluster, count: int, root: int) -> tuple[int, ...]:
    if not 0 <= root < cluster.n:
        raise ValueError(f"root {root} is not a rank")
    return tuple((root + i) % cluster.n for i in range(count))


def pipelined_broadcast(
    cluster: Cluster, tensor: torch.Tensor, *, root: int = 0, chunks: int = 8
) -> list[torch.Tensor]:
    """Broadcast from ``root`` along the chain ``root, root+1, ...`` (mod n), pipelined in ``chunks`` pieces.

    At step ``s`` the rank at chain position ``i`` forwards piece ``s - i``.
    ``chunks + n - 2`` steps; each link carries ``S`` bytes once, so for many
    pieces the time tends to ``S / beta`` whatever ``n``: busbw = algbw
    (factor 1).  Exactly: :func:`pipelined_broadcast_time`.  Returns one copy
    per rank (index = rank).
    """
    n = cluster.n
    if chunks < 1:
        raise ValueError("chunks must be at least 1")
    chain = _chain(cluster, n, root)
    pieces = list(tensor.detach().reshape(-1).tensor_split(chunks))
    if n == 1:
        return [tensor.detach().clone()]

    def program() -> Program:
        have: list[list[torch.Tensor | None]] = [[None] * chunks for _ in range(n)]
        have[0] = list(pieces)
        for s in range(chunks + n - 2):
            senders = [i for i in range(n - 1) if 0 <= s - i < chunks]
            got = yield "pipelined broadcast", [
                Message(chain[i], chain[i + 1], have[i][s - i], f"piece {s - i}") for i in senders]
            for i, t in zip(senders, got):
                have[i + 1][s - i] = t
        return have

    (have,) = _run(cluster, [program()])
    out: list[torch.Tensor] = [tensor] * n
    for i, r in enumerate(chain):
        out[r] = _cat(have[i]).reshape(tensor.shape) if i else tensor.detach().clone()
    return out


def pipelined_reduce(
    cluster: Cluster, tensors: Sequence[torch.Tensor], *, root: int = 0, chunks: int = 8
) -> torch.Tensor:
    """Sum ``tensors[r]`` (held by rank ``r``) onto ``root``, pipelined along the chain toward it.

    The mirror of :func:`pipelined_broadcast`: the chain's last rank sends piece
    ``c`` at step ``c``; every rank adds its own piece and passes it on.
    ``chunks + n - 2`` steps and the same time as the broadcast; busbw factor 1.
    Returns the sum held by ``root``.
    """
    n = cluster.n
    _ranks(cluster, len(tensors), None)
    _check_same(tensors)
    if chunks < 1:
        raise ValueError("chunks must be at least 1")
    chain = _chain(cluster, n, root)
    shape = tensors[0].shape
    if n == 1:
        return tensors[0].detach().clone()
    pieces = [list(tensors[r].detach().reshape(-1).tensor_split(chunks)) for r in chain]

    def program() -> Program:
        acc = [list(p) for p in pieces]
        for s in range(chunks + n - 2):
            # position i (n-1 .. 1) sends piece c at step c + (n - 1 - i)
            senders = [i for i in range(n - 1, 0, -1) if 0 <= s - (n - 1 - i) < chunks]
            got = yield "pipelined reduce", [Message(chain[i], chain[i - 1], acc[i][s - (n - 1 - i)],
                                                     f"piece {s - (n - 1 - i)}")
                         for i in senders]
            for i, t in zip(senders, got):
                c = s - (n - 1 - i)
                acc[i - 1][c] = _add(acc[i - 1][c], t)
        return _cat(acc[0])

    (total,) = _run(cluster, [program()])
    return total.reshape(shape)


# --------------------------------------------------------------------------------------------
# Closed forms
# --------------------------------------------------------------------------------------------


def transfer_time(nbytes: float, alpha: float, beta: float) -> float:
    """The alpha-beta model of one message: ``alpha + nbytes / beta`` seconds."""
    return alpha + nbytes / beta


def ring_reduce_scatter_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring reduce-scatter of ``nbytes`` per rank: ``(n-1) alpha + (n-1)/n * S / beta``."""
    return (n - 1) * alpha + (n - 1) / n * nbytes / beta


def ring_all_gather_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring all-gather to ``nbytes`` per rank (the gathered size): ``(n-1) alpha + (n-1)/n * S / beta``."""
    return (n - 1) * alpha + (n - 1) / n * nbytes / beta


def ring_allreduce_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Ring allreduce of ``nbytes`` per rank: ``2(n-1) alpha + 2(n-1)/n * S / beta``.

    The bandwidth term barely grows with ``n`` (it tends to ``2 S / beta``);
    the latency term grows linearly.
    """
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes / beta


def naive_allreduce_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Reduce-to-root + broadcast behind a switch (:func:`pcie_switch`): ``2 alpha + 2(n-1) S / beta``.

    The root's port carries ``(n-1) S`` in, then ``(n-1) S`` out.  (On
    :func:`fully_connected` links the root has ``n-1`` links and the time is
    ``2 (alpha + S / beta)`` instead.)  0 for ``n = 1``.
    """
    if n == 1:
        return 0.0
    return 2 * alpha + 2 * (n - 1) * nbytes / beta


def tree_allreduce_time(n: int, nbytes: float, alpha: float, beta: float) -> float:
    """Binary-tree reduce + broadcast on :func:`fully_connected` links: ``2 floor(log2 n) (alpha + S / beta)``."""
    depth = n.bit_length() - 1
    return 2 * depth * (alpha + nbytes / beta)


def parameter_server_time(
    workers: int,
    servers: int,
    nbytes: float,
    alpha: float,
    beta: float,
    *,
    server_beta: float | None = None,
    colocated: bool = False,
) -> float:
    """Sharded parameter server (push + pull), every rank on its own switch port.

    Separate servers (:func:`parameter_server`): a worker's port carries ``S``
    each way, a server's port ``workers * S / k``::

        T = 2 (alpha + max(S / beta, workers * S / (k * server_beta)))

    ``colocated=True`` (servers are ``k`` of the workers, as in
    :func:`pcie_switch`): a server keeps its own shard, so its port carries
    ``(workers - 1) S / k`` in and a worker's ``S`` out (``S - S/k`` if it is a
    server too).  With ``k = workers = n``: ``2 (alpha + (n-1)/n * S / beta)``.
    Exact when ``k`` divides the size.
    """
    k = servers
    if colocated:
        if k > workers:
            raise ValueError("colocated servers are workers: servers <= workers")
        if workers == 1:
            return 0.0
        out_port = nbytes if k < workers else nbytes * (k - 1) / k
        in_port = (workers - 1) * nbytes / k
        return 2 * (alpha + max(out_port, in_port) / beta)
    sbeta = beta if server_beta is None else server_beta
    return 2 * (alpha + max(nbytes / beta, workers * nbytes / (k * sbeta)))


def pipelined_broadcast_time(n: int, nbytes: float, alpha: float, beta: float, chunks: int) -> float:
    """Chain broadcast (or reduce) in ``m = chunks`` pieces: ``(n - 2 + m)(alpha + S / (m beta))``; 0 for ``n = 1``."""
    if n == 1:
        return 0.0
    return (n - 2 + chunks) * (alpha + nbytes / (chunks * beta))


def ring_allreduce_bytes_sent(n: int, numel: int, element_size: int) -> list[int]:
    """Exact bytes each ring position sends in :func:`ring_allreduce` with uneven chunks.

    Position ``p`` sends every chunk but ``p`` in the reduce-scatter and every
    chunk but ``p + 1`` in the all-gather: ``2S - c_p - c_{p+1}`` (``c`` from
    ``tensor_split``), summing to ``2(n-1) S`` over all ranks.
    """
    if n == 1:
        return [0]
    sizes = [len(c) * element_size for c in torch.empty(numel, device="meta").tensor_split(n)]
    total = numel * element_size
    return [2 * total - sizes[p] - sizes[(p + 1) % n] for p in range(n)]


_BUSBW = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "all_to_all": lambda n: (n - 1) / n,
}


def algorithm_bandwidth(nbytes: float, seconds: float) -> float:
    """``algbw = S / t`` with ``S`` the bytes per rank (for all-gather: the gathered size)."""
    return nbytes / seconds


def busbw_factor(n: int, collective: str) -> float:
    """``busbw / algbw`` (nccl-tests, doc/PERFORMANCE.md): allreduce ``2(n-1)/n``;
    reduce_scatter, all_gather, all_to_all ``(n-1)/n``; broadcast, reduce ``1``."""
    if collective not in _BUSBW:
        raise ValueError(f"unknown collective {collective!r}; one of {sorted(_BUSBW)}")
    return _BUSBW[collective](n)


def bus_bandwidth(algbw: float, n: int, collective: str = "allreduce") -> float:
    """Bus bandwidth: ``algbw * busbw_factor(n, collective)``.

    It is comparable with one link's hardware bandwidth whatever ``n`` is: a
    bandwidth-optimal ring allreduce on links of ``beta`` (no latency) has
    busbw exactly ``beta``.
    """
    return algbw * busbw_factor(n, collective)


def place_zero_states(cluster: Cluster, num_params: int, stage: int) -> None:
    """Put each rank's ZeRO-``stage`` model state in ``cluster.memory`` (meta tensors: sizes only).

    Names: ``params`` and ``grads`` (bf16), ``master``, ``exp_avg``,
    ``exp_avg_sq`` (fp32); a sharded state holds ``tensor_split(n)[rank]`` of the
    ``P`` values.  Then ``cluster.memory_bytes(r)`` equals
    :func:`dlperf.memory.zero_memory_bytes` when ``n`` divides ``P``.
    """
    if stage not in (0, 1, 2, 3):
        raise ValueError(f"ZeRO stage is 0, 1, 2 or 3, got {stage}")
    n = cluster.n
    shard = [len(c) for c in torch.empty(num_params, device="meta").tensor_split(n)]
    sharded = {"params": stage >= 3, "grads": stage >= 2, "master": stage >= 1, "exp_avg": stage >= 1,
               "exp_avg_sq": stage >= 1}
    dtypes = {"params": torch.bfloat16, "grads": torch.bfloat16, "master": torch.float32,
              "exp_avg": torch.float32, "exp_avg_sq": torch.float32}
    for r in range(n):
        for name, is_sharded in sharded.items():
            size = shard[r] if is_sharded else num_params
            cluster.memory[r][name] = torch.empty(size, dtype=dtypes[name], device="meta")


# --------------------------------------------------------------------------------------------
# The worked example of the source notes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkedExample:
    """One strategy of the worked example: simulated time, closed form, the source's figure.

    ``cluster`` is the simulated run (its ``trace`` can be replayed by a widget).
    """

    name: str
    simulated_s: float
    formula_s: float
    stated_s: float
    cluster: Cluster
    assumptions: str


def parameter_server_example(nbytes: int = 160_000_000) -> dict[str, WorkedExample]:
    """The worked example of the source notes (d2l, "Parameter Servers"), simulated.

    160 MB (``1.6e8`` bytes, float32 meta tensors) of gradients:

    * ``"gpu0"`` -- 4 GPUs on a 16 GB/s PCIe switch, :func:`naive_allreduce` to
      GPU0: GPU0's port takes 3 x 160 MB in (30 ms) then 3 x 160 MB out (30 ms):
      **60 ms**;
    * ``"cpu"`` -- the same switch with the CPU on a fifth 16 GB/s port as the
      one server of :func:`parameter_server_allreduce`: the CPU's port takes
      4 x 160 MB each way: **80 ms**;
    * ``"sharded"`` -- every GPU is the server of a quarter (40 MB): each port
      carries 3 x 40 MB each way per phase, 7.5 ms, twice: **15 ms**;
    * ``"ring_nvlink"`` -- 8 V100s, :func:`dgx1_double_ring` with the source's
      18 GB/s per link, :func:`multi_ring_allreduce` splitting 2:1 over the
      double-bandwidth ring (36 GB/s) and the single ring (18 GB/s), i.e. one
      ring of 3 x 18 = 54 GB/s: ``2 (n-1)/n S / 54 GB/s`` = **5.19 ms**.  The
      source's "2 x 160 MB / (3 x 18 GB/s) = 6 ms" is this with
      ``(n-1)/n`` rounded to 1 (it says so: "(n-1)/n ~ 1"); ``stated_s`` keeps
      its 5.93 ms, which ``formula_s * n / (n-1)`` equals.

    Assumptions, as in the source: latency ``alpha = 0``; summing is free;
    every port is full duplex at the same speed in each direction; the switch
    is non-blocking ("full-bandwidth operation between all links").
    """
    S = nbytes
    grad = torch.empty(S // 4, dtype=torch.float32, device="meta")
    out: dict[str, WorkedExample] = {}

    c = Cluster(pcie_switch(4, beta=16e9, alpha=0.0))
    naive_allreduce(c, [grad] * 4)
    out["gpu0"] = WorkedExample(
        "aggregate on GPU0, then broadcast", c.time, naive_allreduce_time(4, S, 0.0, 16e9), 0.060, c,
        "3 x 10 ms into GPU0's port, 3 x 10 ms out of it; the switch port is the bottleneck; alpha = 0")

    c = Cluster(pcie_switch(4, beta=16e9, alpha=0.0, cpu=True))
    parameter_server_allreduce(c, [grad] * 4)
    out["cpu"] = WorkedExample(
        "aggregate on the CPU", c.time, parameter_server_time(4, 1, S, 0.0, 16e9), 0.080, c,
        "the CPU sits on a fifth 16 GB/s port of the switch (its x16 link); 4 x 10 ms in, 4 x 10 ms out; alpha = 0")

    c = Cluster(pcie_switch(4, beta=16e9, alpha=0.0))
    parameter_server_allreduce(c, [grad] * 4, servers=range(4))
    out["sharded"] = WorkedExample(
        "sharded over the 4 GPUs", c.time, parameter_server_time(4, 4, S, 0.0, 16e9, colocated=True), 0.015, c,
        "each GPU aggregates 40 MB: its port carries 3 x 40 MB each way (full duplex), 7.5 ms, twice; alpha = 0")

    n, link = 8, 18e9
    c = Cluster(dgx1_double_ring(link_beta=link, alpha=0.0))
    multi_ring_allreduce(c, [grad] * n)
    out["ring_nvlink"] = WorkedExample(
        "ring over 8 V100s with NVLink", c.time, ring_allreduce_time(n, S, 0.0, 3 * link), 2 * S / (3 * link), c,
        "two rings, 2 x 18 and 18 GB/s per direction, data split 2:1, alpha = 0; the source rounds (n-1)/n = 7/8 "
        "to 1, hence its 2 S / (3 x 18 GB/s) = 5.9 ms ('about 6 ms') against 5.2 ms here")
    return out
