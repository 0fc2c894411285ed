"""The links of a simulated cluster: their alpha-beta costs and the topologies the chapters use."""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Union



Node = Union[int, str]
"""A rank (``int``, ``0 <= r < n``) or a non-rank node such as a switch (``str``)."""

LinkKey = tuple[Node, Node]
"""A directed link ``(from, to)``."""

# Illustrative latencies (order of magnitude of a per-message software + wire latency):
_ALPHA_LOCAL = 5e-6  # inside a machine (PCIe, NVLink)
_ALPHA_NET = 2e-5  # between machines


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
